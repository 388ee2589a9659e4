package accounts

import (
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
)

// credentials keeps what TokenAndOwner read, by token id, for a few
// seconds: every request with a personal access token reads its token and
// owner, and on PostgreSQL that round trip was half of a read's cost.
//
// It is never staler than the change feed lets a live connection be. A
// token's entry goes when it is revoked and a user's entries when their
// record changes (groups, deactivation, a session ended) — at once for this
// store's own writes, and for another replica's when the feed says so
// (Forget, called by the server's follower for every change it reads). A
// read that began before a change and ends after it is not kept (gen). The
// ttl bounds an entry's age if the feed cannot be read.
type credentials struct {
	ttl time.Duration
	max int

	mu      sync.Mutex
	gen     uint64 // counts forgets: a read that saw another gen is not kept
	byID    map[string]credential
	byOwner map[string]map[string]bool // owner's key → the ids kept of their tokens
}

type credential struct {
	t     token.Token
	owner *user.User
	at    time.Time
}

// maxCredentials bounds the entries: only tokens that exist are kept, so an
// unknown id cannot grow it.
const maxCredentials = 10000

// CacheCredentials has TokenAndOwner keep what it reads for ttl (see
// credentials). Call it once, before serving, where the change feed is
// followed and every change it reads is passed to Forget; without it
// every read goes to the database.
func (s *Store) CacheCredentials(ttl time.Duration) {
	s.creds = newCredentials(ttl, maxCredentials)
}

func newCredentials(ttl time.Duration, max int) *credentials {
	return &credentials{ttl: ttl, max: max, byID: map[string]credential{}, byOwner: map[string]map[string]bool{}}
}

// Forget drops what a change of the feed makes stale: a token's entry, a
// user's, or all of them.
func (s *Store) Forget(c live.Change) {
	if s.creds == nil {
		return
	}
	switch c.Kind {
	case live.Token:
		s.creds.forget(c.Subject)
	case live.User:
		s.creds.forgetOwner(c.Subject)
	case live.All:
		s.creds.forgetAll()
	}
}

// generation is the count of forgets before a read.
func (c *credentials) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// get is the entry for id, a copy, while it is younger than ttl.
func (c *credentials) get(id string, now time.Time) (token.Token, *user.User, bool) {
	c.mu.Lock()
	e, ok := c.byID[id]
	c.mu.Unlock()
	if !ok || now.Sub(e.at) >= c.ttl || now.Before(e.at) {
		return token.Token{}, nil, false
	}
	t, owner := copyCredential(e.t, e.owner)
	return t, owner, true
}

// put keeps what a read that began at gen found, unless something was
// forgotten since. When full, an arbitrary entry makes room.
func (c *credentials) put(gen uint64, t token.Token, owner *user.User, now time.Time) {
	t, owner = copyCredential(t, owner)
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.byID[t.ID]; !ok && len(c.byID) >= c.max {
		for id := range c.byID { // map order: an arbitrary entry
			c.drop(id)
			break
		}
	}
	c.drop(t.ID)
	key := t.Owner.String()
	c.byID[t.ID] = credential{t: t, owner: owner, at: now}
	if c.byOwner[key] == nil {
		c.byOwner[key] = map[string]bool{}
	}
	c.byOwner[key][t.ID] = true
}

// forget drops token id's entry.
func (c *credentials) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.drop(id)
}

// forgetOwner drops the entries of the tokens of the user whose key it is.
func (c *credentials) forgetOwner(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for id := range c.byOwner[key] {
		c.drop(id)
	}
}

// forgetAll drops every entry.
func (c *credentials) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.byID)
	clear(c.byOwner)
}

// drop removes id's entry and its place in the owner's index; c.mu is held.
func (c *credentials) drop(id string) {
	e, ok := c.byID[id]
	if !ok {
		return
	}
	delete(c.byID, id)
	key := e.t.Owner.String()
	delete(c.byOwner[key], id)
	if len(c.byOwner[key]) == 0 {
		delete(c.byOwner, key)
	}
}

// copyCredential copies what a caller could change.
func copyCredential(t token.Token, owner *user.User) (token.Token, *user.User) {
	t.Owner.Groups = slices.Clone(t.Owner.Groups)
	if owner != nil {
		u := *owner
		u.Groups = slices.Clone(u.Groups)
		owner = &u
	}
	return t, owner
}
