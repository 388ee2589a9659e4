package accounts

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/token"
)

// TestCredentialsKeep: an entry serves for its ttl only; a read that began
// before a forget is not kept; forgetting a token, an owner or all drops
// just those; the bound holds.
func TestCredentialsKeep(t *testing.T) {
	c := newCredentials(time.Minute, 3)
	now := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	ann, bob := identity.Identity{Issuer: "i", Subject: "ann"}, identity.Identity{Issuer: "i", Subject: "bob"}
	has := func(id string, at time.Time) bool { _, ok := c.get(id, at); return ok }
	put := func(id string, owner identity.Identity, at time.Time) {
		c.put(c.generation(), id, owner.String(), credential{t: token.Token{ID: id, Owner: owner}}, at)
	}

	put("a1", ann, now)
	if !has("a1", now.Add(59*time.Second)) || has("a1", now.Add(time.Minute)) || has("a1", now.Add(-time.Second)) {
		t.Fatal("an entry serves within its ttl, and only then")
	}
	gen := c.generation()
	c.forget("nothing")
	c.put(gen, "a2", ann.String(), credential{t: token.Token{ID: "a2", Owner: ann}}, now)
	if has("a2", now) {
		t.Fatal("a read that began before a forget was kept")
	}
	put("a2", ann, now)
	put("b1", bob, now)
	c.forgetOwner(ann.String())
	if has("a1", now) || has("a2", now) || !has("b1", now) {
		t.Fatal("forgetting ann dropped other than hers")
	}
	put("a1", ann, now)
	c.forget("a1")
	if has("a1", now) || !has("b1", now) {
		t.Fatal("forgetting a1 dropped other than it")
	}
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		put(id, ann, now)
	}
	if len(c.byKey) != 3 || !has("a4", now) {
		t.Fatalf("past the bound: %d entries, the last kept %v", len(c.byKey), has("a4", now))
	}
	n := 0
	for _, ids := range c.byOwner {
		n += len(ids)
	}
	if n != 3 {
		t.Fatalf("the owners' index holds %d ids for 3 entries", n)
	}
	c.forgetAll()
	if len(c.byKey) != 0 || len(c.byOwner) != 0 {
		t.Fatal("forgetting all left entries")
	}
}

// TestCredentialsConcurrently: requests reading and keeping entries while
// the feed's follower forgets them (run under -race); the owners' index
// stays in step with the entries, within the bound.
func TestCredentialsConcurrently(t *testing.T) {
	c := newCredentials(time.Minute, 50)
	now := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	owners := []identity.Identity{{Issuer: "i", Subject: "ann"}, {Issuer: "i", Subject: "bob"}}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				id := fmt.Sprintf("t%d", (g*500+i)%80)
				if _, ok := c.get(id, now); !ok {
					c.put(c.generation(), id, owners[i%2].String(), credential{t: token.Token{ID: id, Owner: owners[i%2]}}, now)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			switch i % 3 {
			case 0:
				c.forget(fmt.Sprintf("t%d", i%80))
			case 1:
				c.forgetOwner(owners[i%2].String())
			default:
				c.forgetAll()
			}
		}
	})
	wg.Wait()
	n := 0
	for _, ids := range c.byOwner {
		n += len(ids)
	}
	if len(c.byKey) > 50 || n != len(c.byKey) {
		t.Fatalf("%d entries (bound 50), %d in the owners' index", len(c.byKey), n)
	}
}
