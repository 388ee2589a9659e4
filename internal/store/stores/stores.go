// Package stores builds every aggregate store of internal/store on one
// database: what the server hands out (each service gets the one store its
// interface names) and what the store's conformance suite calls. All's
// methods are the aggregate stores', promoted, for the commands and tests
// that read or write records directly.
package stores

import (
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/accounts"
	"github.com/gantryhq/gantry/internal/store/auditlog"
	"github.com/gantryhq/gantry/internal/store/changefeed"
	"github.com/gantryhq/gantry/internal/store/governance"
	"github.com/gantryhq/gantry/internal/store/runsdb"
	"github.com/gantryhq/gantry/internal/store/telemetrydb"
	"github.com/gantryhq/gantry/internal/store/workloads"
)

// The aggregate stores, named for embedding in All.
type (
	Workloads  = workloads.Store
	Accounts   = accounts.Store
	Audit      = auditlog.Store
	Telemetry  = telemetrydb.Store
	Governance = governance.Store
	Feed       = changefeed.Store
	Runs       = runsdb.Store
)

// All is the database and every aggregate store on it. Close closes the
// database.
type All struct {
	*store.DB
	*Workloads
	*Accounts
	*Audit
	*Telemetry
	*Governance
	*Feed
	*Runs
}

// New builds every aggregate store on db, once each (telemetry's remembers
// the series this process has written).
func New(db *store.DB) *All {
	return &All{DB: db, Workloads: workloads.New(db), Accounts: accounts.New(db), Audit: auditlog.New(db),
		Telemetry: telemetrydb.New(db), Governance: governance.New(db), Feed: changefeed.New(db), Runs: runsdb.New(db)}
}
