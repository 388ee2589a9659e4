package server

import (
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/store/stores"
)

// budgetStore is budget.Store: the teams and budget alerts (governance),
// and the audit log an alert is recorded in.
type budgetStore struct {
	*stores.Governance
	*stores.Audit
}

var _ budget.Store = budgetStore{}
