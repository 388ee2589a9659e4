package accounts

import (
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
)

// kept keeps what a credential's read found, by its key (a token's id, a
// session's hash), for a few seconds: every request with a personal access
// token reads its token and owner, and every browser request its session
// and user, and on PostgreSQL that round trip was half of a read's cost.
//
// It is never staler than the change feed lets a live connection be. A
// token's entry goes when it is revoked and a user's entries (tokens and
// sessions) when their record changes (groups, deactivation, a session
// ended) — at once for this store's own writes, and for another replica's
// when the feed says so (Forget, called by the server's follower for every
// change it reads). A read that began before a change and ends after it is
// not kept (gen). The ttl bounds an entry's age if the feed cannot be read.
type kept[V any] struct {
	ttl  time.Duration
	max  int
	copy func(V) V // what a caller could change, copied in and out

	mu      sync.Mutex
	gen     uint64 // counts forgets: a read that saw another gen is not kept
	byKey   map[string]entry[V]
	byOwner map[string]map[string]bool // owner's identity → the keys kept of theirs
}

type entry[V any] struct {
	v     V
	owner string
	at    time.Time
}

// credential is a token and its owner's record; session a session and its
// user's.
type (
	credential struct {
		t     token.Token
		owner *user.User
	}
	session struct {
		ses  weblogin.Session
		user *user.User
	}
)

// maxCredentials bounds the entries of each kind: only credentials that
// exist are kept, so an unknown key cannot grow it.
const maxCredentials = 10000

// CacheCredentials has TokenAndOwner and SessionAndUser keep what they
// read for ttl (see kept). Call it once, before serving, where the change
// feed is followed and every change it reads is passed to Forget; without
// it every read goes to the database.
func (s *Store) CacheCredentials(ttl time.Duration) {
	s.creds = newCredentials(ttl, maxCredentials)
	s.sessions = newKept(ttl, maxCredentials, func(v session) session {
		v.ses.Identity.Groups = slices.Clone(v.ses.Identity.Groups)
		v.user = copyUser(v.user)
		return v
	})
}

func newCredentials(ttl time.Duration, max int) *kept[credential] {
	return newKept(ttl, max, func(v credential) credential {
		v.t.Owner.Groups = slices.Clone(v.t.Owner.Groups)
		v.owner = copyUser(v.owner)
		return v
	})
}

func newKept[V any](ttl time.Duration, max int, copy func(V) V) *kept[V] {
	return &kept[V]{ttl: ttl, max: max, copy: copy, byKey: map[string]entry[V]{}, byOwner: map[string]map[string]bool{}}
}

// Forget drops what a change of the feed makes stale: a token's entry, a
// user's tokens and sessions, or all of them.
func (s *Store) Forget(c live.Change) {
	if s.creds == nil {
		return
	}
	switch c.Kind {
	case live.Token:
		s.creds.forget(c.Subject)
	case live.User:
		s.creds.forgetOwner(c.Subject)
		s.sessions.forgetOwner(c.Subject)
	case live.All:
		s.creds.forgetAll()
		s.sessions.forgetAll()
	}
}

// read is key's entry while it is kept, else what load reads (the value
// and its owner's identity), kept unless it failed or something was
// forgotten meanwhile. On a nil c (nothing kept) it is load's.
func (c *kept[V]) read(key string, now func() time.Time, load func() (V, string, error)) (V, error) {
	if c == nil {
		v, _, err := load()
		return v, err
	}
	if v, ok := c.get(key, now()); ok {
		return v, nil
	}
	gen := c.generation()
	v, owner, err := load()
	if err == nil {
		c.put(gen, key, owner, v, now())
	}
	return v, err
}

// generation is the count of forgets before a read.
func (c *kept[V]) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// get is the entry for key, a copy, while it is younger than ttl.
func (c *kept[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	e, ok := c.byKey[key]
	c.mu.Unlock()
	if !ok || now.Sub(e.at) >= c.ttl || now.Before(e.at) {
		var zero V
		return zero, false
	}
	return c.copy(e.v), true
}

// put keeps what a read that began at gen found for key, of owner (an
// identity's String), unless something was forgotten since. When full, an
// arbitrary entry makes room.
func (c *kept[V]) put(gen uint64, key, owner string, v V, now time.Time) {
	v = c.copy(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.byKey[key]; !ok && len(c.byKey) >= c.max {
		for k := range c.byKey { // map order: an arbitrary entry
			c.drop(k)
			break
		}
	}
	c.drop(key)
	c.byKey[key] = entry[V]{v: v, owner: owner, at: now}
	if c.byOwner[owner] == nil {
		c.byOwner[owner] = map[string]bool{}
	}
	c.byOwner[owner][key] = true
}

// forget drops key's entry.
func (c *kept[V]) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.drop(key)
}

// forgetOwner drops the entries of the user whose identity owner is.
func (c *kept[V]) forgetOwner(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for key := range c.byOwner[owner] {
		c.drop(key)
	}
}

// forgetAll drops every entry.
func (c *kept[V]) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.byKey)
	clear(c.byOwner)
}

// drop removes key's entry and its place in the owner's index; c.mu is held.
func (c *kept[V]) drop(key string) {
	e, ok := c.byKey[key]
	if !ok {
		return
	}
	delete(c.byKey, key)
	delete(c.byOwner[e.owner], key)
	if len(c.byOwner[e.owner]) == 0 {
		delete(c.byOwner, e.owner)
	}
}

// copyUser copies what a caller could change of a user's record.
func copyUser(u *user.User) *user.User {
	if u == nil {
		return nil
	}
	c := *u
	c.Groups = slices.Clone(c.Groups)
	return &c
}
