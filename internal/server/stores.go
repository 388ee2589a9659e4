package server

import (
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/accounts"
	"github.com/gantryhq/gantry/internal/store/auditlog"
	"github.com/gantryhq/gantry/internal/store/changefeed"
	"github.com/gantryhq/gantry/internal/store/governance"
	"github.com/gantryhq/gantry/internal/store/telemetrydb"
	"github.com/gantryhq/gantry/internal/store/workloads"
)

// Stores are the database and the stores built on it, one per aggregate
// (internal/store's sub-packages). Each service is given the one its
// interface names (or, for an interface that spans two, a struct of both);
// their methods are promoted here for the commands and tests that read or
// write records directly. Close closes the database.
type Stores struct {
	*store.DB
	*workloadStore
	*accountStore
	*auditStore
	*telemetryStore
	*governanceStore
	*feedStore
}

// The aggregate stores, named for embedding in Stores.
type (
	workloadStore   = workloads.Store
	accountStore    = accounts.Store
	auditStore      = auditlog.Store
	telemetryStore  = telemetrydb.Store
	governanceStore = governance.Store
	feedStore       = changefeed.Store
)

// newStores builds every aggregate store on db, once: telemetry's
// remembers the series this process has written.
func newStores(db *store.DB) *Stores {
	return &Stores{DB: db, workloadStore: workloads.New(db), accountStore: accounts.New(db), auditStore: auditlog.New(db),
		telemetryStore: telemetrydb.New(db), governanceStore: governance.New(db), feedStore: changefeed.New(db)}
}

// budgetStore is budget.Store: the teams and budget alerts (governance),
// and the audit log an alert is recorded in.
type budgetStore struct {
	*governanceStore
	*auditStore
}

var _ budget.Store = budgetStore{}
