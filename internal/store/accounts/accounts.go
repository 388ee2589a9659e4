// Package accounts stores who uses Gantry and how they are signed in: users
// as their identity provider last described them (users.go), personal
// access tokens (tokens.go), and browser sign-ins in progress and sessions
// (sessions.go). A change that must close what a credential opened (groups
// changed, a user deactivated, a token revoked, a session ended) is appended
// to the change feed in the transaction that makes it. It implements
// user.Store, token.Store and weblogin.Store.
package accounts

import (
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
)

// Store is the accounts of one database.
type Store struct {
	db       *store.DB
	creds    *kept[credential] // nil: not kept (CacheCredentials)
	sessions *kept[session]    // nil when creds is
}

var (
	_ user.Store     = (*Store)(nil)
	_ token.Store    = (*Store)(nil)
	_ weblogin.Store = (*Store)(nil)
)

// New is the accounts of db.
func New(db *store.DB) *Store { return &Store{db: db} }
