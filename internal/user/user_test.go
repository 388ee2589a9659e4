package user_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/accounts"
	"github.com/gantryhq/gantry/internal/user"
)

func TestObserveAndCurrent(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	svc := service(t, func() time.Time { return now })
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann", Email: "ann@x", Groups: []string{"ml-vision"}}
	tokenOwner := ann
	tokenOwner.Groups = []string{"gantry-admins"} // what a token was made with: never trusted
	tokenOwner.TokenID, tokenOwner.TokenTeam = "tok", "vision"
	// current is what a token's owner acts as, their record read as the
	// store reads it with the token.
	current := func(id identity.Identity) (identity.Identity, error) {
		u, err := svc.Get(ctx, user.IDOf(id.String()))
		var nf *fault.NotFound
		if errors.As(err, &nf) {
			return svc.CurrentFrom(id, nil)
		}
		if err != nil {
			return identity.Identity{}, err
		}
		return svc.CurrentFrom(id, &u)
	}

	if _, err := current(tokenOwner); !errors.Is(err, user.ErrStale) {
		t.Fatalf("unknown user: %v, want ErrStale", err)
	}
	if _, err := svc.Observe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	cur, err := current(tokenOwner)
	if err != nil || len(cur.Groups) != 1 || cur.Groups[0] != "ml-vision" || cur.TokenID != "tok" || cur.TokenTeam != "vision" {
		t.Fatalf("current: %+v %v", cur, err)
	}
	// The same again within a minute writes nothing; its groups' age does not move.
	now = now.Add(30 * time.Second)
	svc.Observe(ctx, ann)
	if u, _ := svc.Get(ctx, user.IDOf(ann.String())); !u.GroupsAt.Equal(now.Add(-30 * time.Second)) {
		t.Errorf("groups_at %v moved without a write being due", u.GroupsAt)
	}
	// A change is written at once.
	ann.Groups = []string{"ml-nlp"}
	svc.Observe(ctx, ann)
	if cur, _ := current(tokenOwner); len(cur.Groups) != 1 || cur.Groups[0] != "ml-nlp" {
		t.Fatalf("after a group change: %+v", cur.Groups)
	}
	now = now.Add(24*time.Hour + time.Minute)
	if _, err := current(tokenOwner); !errors.Is(err, user.ErrStale) {
		t.Fatalf("day-old groups: %v, want ErrStale", err)
	}
	if _, err := svc.Deactivate(ctx, user.IDOf(ann.String())); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Observe(ctx, ann); !errors.Is(err, user.ErrDeactivated) {
		t.Fatalf("deactivated user signing in: %v", err)
	}
	if _, err := current(tokenOwner); !errors.Is(err, user.ErrDeactivated) {
		t.Fatalf("deactivated user's token: %v", err)
	}
	if u, _ := svc.Get(ctx, user.IDOf(ann.String())); u.Active() {
		t.Fatal("still active")
	}
}

// TestOlderTokenKeepsNewerGroups: a provider token issued before the
// user's last sign-in (still valid: an hour on most providers) carries the
// groups as they were; using it does not write them back over the newer
// ones, which the user's sessions and tokens act with.
func TestOlderTokenKeepsNewerGroups(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	svc := service(t, func() time.Time { return now })
	old := identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"gantry-admins"}, IssuedAt: now.Add(-20 * time.Minute)}
	fresh := identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"ml-vision"}, IssuedAt: now.Add(-2 * time.Minute)}
	groups := func() ([]string, time.Time) {
		u, err := svc.Get(ctx, user.IDOf(old.String()))
		if err != nil {
			t.Fatal(err)
		}
		return u.Groups, u.GroupsAt
	}
	for _, id := range []identity.Identity{old, fresh, old} {
		if _, err := svc.Observe(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if g, at := groups(); len(g) != 1 || g[0] != "ml-vision" || !at.Equal(fresh.IssuedAt) {
		t.Fatalf("after the older token again: %v as of %v, want [ml-vision] as of %v", g, at, fresh.IssuedAt)
	}
	// The order is the provider's clock's, even where it runs ahead of
	// Gantry's: the newer token wins.
	now = now.Add(2 * time.Minute)
	ahead := identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"ml-nlp"}, IssuedAt: now.Add(time.Minute)}
	if _, err := svc.Observe(ctx, ahead); err != nil {
		t.Fatal(err)
	}
	if g, at := groups(); len(g) != 1 || g[0] != "ml-nlp" || !at.Equal(ahead.IssuedAt) {
		t.Fatalf("after a token from the provider's future: %v as of %v, want [ml-nlp] as of %v", g, at, ahead.IssuedAt)
	}
	// A newer token without the groups claim at all (the provider sends
	// them at sign-in only) leaves the recorded groups be; one with an
	// empty claim says there are none.
	now = now.Add(5 * time.Minute)
	absent := identity.Identity{Issuer: "https://idp", Subject: "ann", IssuedAt: now, GroupsAbsent: true}
	if _, err := svc.Observe(ctx, absent); err != nil {
		t.Fatal(err)
	}
	if g, at := groups(); len(g) != 1 || g[0] != "ml-nlp" || !at.Equal(ahead.IssuedAt) {
		t.Fatalf("after a token without the groups claim: %v as of %v, want [ml-nlp] as of %v", g, at, ahead.IssuedAt)
	}
	none := identity.Identity{Issuer: "https://idp", Subject: "ann", IssuedAt: now}
	if _, err := svc.Observe(ctx, none); err != nil {
		t.Fatal(err)
	}
	if g, _ := groups(); len(g) != 0 {
		t.Fatalf("after a token with an empty groups claim: %v, want none", g)
	}
}

// countingStore counts UsersByKey reads of the real store.
type countingStore struct {
	*accounts.Store
	reads int
}

func (c *countingStore) UsersByKey(ctx context.Context, keys []string) ([]user.User, error) {
	c.reads++
	return c.Store.UsersByKey(ctx, keys)
}

// TestNamesCached: names are read once and served from memory for a minute
// (every workload answer names its owner); a sign-in with a new name is seen
// at once; an unknown key is remembered as unnamed too.
func TestNamesCached(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.SQLite, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cs := &countingStore{Store: accounts.New(st)}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	svc, err := user.New(user.Options{Store: cs, MaxGroupAge: 24 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann", Name: "Ann"}
	if _, err := svc.Observe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	name := func() string {
		t.Helper()
		m, err := svc.Names(ctx, ann.String(), "https://idp#nobody")
		if err != nil {
			t.Fatal(err)
		}
		return m[ann.String()]
	}
	if n := name(); n != "Ann" || cs.reads != 1 {
		t.Fatalf("first: %q after %d reads", n, cs.reads)
	}
	if n := name(); n != "Ann" || cs.reads != 1 {
		t.Fatalf("again: %q after %d reads, want it from memory", n, cs.reads)
	}
	ann.Name = "Ann Lee"
	if _, err := svc.Observe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	if n := name(); n != "Ann Lee" {
		t.Fatalf("after a sign-in with a new name: %q", n)
	}
	reads := cs.reads
	now = now.Add(2 * time.Minute)
	if name(); cs.reads != reads+1 {
		t.Fatalf("after its minute: %d reads, want one more than %d", cs.reads, reads)
	}
}

// service is a user service on a SQLite database of its own, on the clock
// now.
func service(t *testing.T, now func() time.Time) *user.Service {
	t.Helper()
	st, err := store.Open(context.Background(), store.SQLite, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := user.New(user.Options{Store: accounts.New(st), MaxGroupAge: 24 * time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
