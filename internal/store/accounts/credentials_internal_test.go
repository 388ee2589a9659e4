package accounts

import (
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/token"
)

// TestCredentialsKeep: an entry serves for its ttl only; a read that began
// before a forget is not kept; the bound holds, making room from expired
// entries first.
func TestCredentialsKeep(t *testing.T) {
	c := &credentials{ttl: time.Minute, max: 2, byID: map[string]credential{}}
	now := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	has := func(id string, at time.Time) bool { _, _, ok := c.get(id, at); return ok }

	c.put(c.generation(), token.Token{ID: "a"}, nil, now)
	if !has("a", now.Add(59*time.Second)) || has("a", now.Add(time.Minute)) || has("a", now.Add(-time.Second)) {
		t.Fatal("an entry serves within its ttl, and only then")
	}
	gen := c.generation()
	c.forget(func(id string, _ credential) bool { return id == "nothing" })
	c.put(gen, token.Token{ID: "b"}, nil, now)
	if has("b", now) {
		t.Fatal("a read that began before a forget was kept")
	}
	c.put(c.generation(), token.Token{ID: "b"}, nil, now)
	c.put(c.generation(), token.Token{ID: "c"}, nil, now)
	if has("c", now) || len(c.byID) != 2 {
		t.Fatalf("past the bound: %d entries", len(c.byID))
	}
	later := now.Add(2 * time.Minute)
	c.put(c.generation(), token.Token{ID: "c"}, nil, later)
	if !has("c", later) || len(c.byID) != 1 {
		t.Fatalf("expired entries did not make room: %d entries", len(c.byID))
	}
}
