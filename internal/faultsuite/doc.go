// Package faultsuite holds Gantry's fault-injection tests (docs/reliability.md):
// each breaks one thing Gantry depends on while it works — the SQLite
// database's disk, PostgreSQL's connections, the webhook receiver, an
// agent's link — and checks afterwards that nothing was lost, duplicated
// or half-applied. It has no code of its own.
package faultsuite
