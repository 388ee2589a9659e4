package user_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/user"
)

func TestObserveAndCurrent(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.SQLite, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	svc, err := user.New(st, 24*time.Hour, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann", Email: "ann@x", Groups: []string{"ml-vision"}}
	tokenOwner := ann
	tokenOwner.Groups = []string{"gantry-admins"} // what a token was made with: never trusted
	tokenOwner.TokenID, tokenOwner.TokenTeam = "tok", "vision"

	if _, err := svc.Current(ctx, tokenOwner); !errors.Is(err, user.ErrStale) {
		t.Fatalf("unknown user: %v, want ErrStale", err)
	}
	if _, err := svc.Observe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	cur, err := svc.Current(ctx, tokenOwner)
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
	if cur, _ := svc.Current(ctx, tokenOwner); len(cur.Groups) != 1 || cur.Groups[0] != "ml-nlp" {
		t.Fatalf("after a group change: %+v", cur.Groups)
	}
	now = now.Add(24*time.Hour + time.Minute)
	if _, err := svc.Current(ctx, tokenOwner); !errors.Is(err, user.ErrStale) {
		t.Fatalf("day-old groups: %v, want ErrStale", err)
	}
	if _, err := svc.Deactivate(ctx, user.IDOf(ann.String())); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Observe(ctx, ann); !errors.Is(err, user.ErrDeactivated) {
		t.Fatalf("deactivated user signing in: %v", err)
	}
	if _, err := svc.Current(ctx, tokenOwner); !errors.Is(err, user.ErrDeactivated) {
		t.Fatalf("deactivated user's token: %v", err)
	}
	if u, _ := svc.Get(ctx, user.IDOf(ann.String())); u.Active() {
		t.Fatal("still active")
	}
}
