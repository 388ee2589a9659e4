package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/store/stores"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
)

// testCredentialCache: with credentials kept (a replica that follows the
// change feed), what this store writes — a revocation, a deactivation, a
// sign-in — shows at once; what another replica (b) writes shows once the
// feed's change is passed to Forget, and not before; a caller's change to
// what it was handed is not kept.
func testCredentialCache(t *testing.T, a, b *stores.All) {
	ctx := context.Background()
	a.Accounts.CacheCredentials(time.Hour)
	now := time.Now().UTC()
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann"}
	signIn := func(s *stores.All, groups ...string) {
		t.Helper()
		u := user.User{ID: user.IDOf(ann.String()), Key: ann.String(), Issuer: ann.Issuer, Subject: ann.Subject, Groups: groups,
			GroupsAt: now, CreatedAt: now, LastSeenAt: now}
		if err := s.Accounts.UpsertUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	signIn(a, "ml-vision")
	mint := func(id string) {
		t.Helper()
		if err := a.Accounts.CreateToken(ctx, token.Token{ID: id, Owner: ann, Name: id, SecretHash: token.Hash("s3cret"),
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(id string) (token.Token, *user.User) {
		t.Helper()
		tk, owner, err := a.Accounts.TokenAndOwner(ctx, id)
		if err != nil || owner == nil {
			t.Fatalf("token %s: %+v %+v %v", id, tk, owner, err)
		}
		return tk, owner
	}
	groups := func(id string) string { _, o := read(id); return strings.Join(o.Groups, ",") }
	mint("t1")
	mint("t2")
	read("t1")
	read("t2")

	// Another replica revokes t1: kept until the feed says so.
	if err := b.Accounts.RevokeToken(ctx, ann.String(), "t1", now); err != nil {
		t.Fatal(err)
	}
	if tk, _ := read("t1"); !tk.RevokedAt.IsZero() {
		t.Fatalf("t1 read again before the feed said so: %+v (the credential was not kept)", tk)
	}
	a.Accounts.Forget(live.Change{Kind: live.Token, Subject: "t1"})
	if tk, _ := read("t1"); tk.RevokedAt.IsZero() {
		t.Fatal("t1 still not revoked after the feed said so")
	}
	// This replica revokes t2: at once.
	if err := a.Accounts.RevokeToken(ctx, ann.String(), "t2", now); err != nil {
		t.Fatal(err)
	}
	if tk, _ := read("t2"); tk.RevokedAt.IsZero() {
		t.Fatal("t2 not revoked on the replica that revoked it")
	}

	mint("t3")
	if got := groups("t3"); got != "ml-vision" {
		t.Fatalf("groups %q", got)
	}
	// Another replica's sign-in with new groups: kept until the user's change.
	signIn(b, "ml-nlp")
	if got := groups("t3"); got != "ml-vision" {
		t.Fatalf("groups %q before the feed said so", got)
	}
	a.Accounts.Forget(live.Change{Kind: live.User, Subject: ann.String()})
	if got := groups("t3"); got != "ml-nlp" {
		t.Fatalf("groups %q after the user's change, want ml-nlp", got)
	}
	// All (the feed skipped changes) forgets everything.
	signIn(b, "ml-speech")
	a.Accounts.Forget(live.Change{Kind: live.All})
	if got := groups("t3"); got != "ml-speech" {
		t.Fatalf("groups %q after All, want ml-speech", got)
	}
	// This replica's sign-in and deactivation: at once.
	signIn(a, "ml-robotics")
	if got := groups("t3"); got != "ml-robotics" {
		t.Fatalf("groups %q after a sign-in here, want ml-robotics", got)
	}
	if err := a.Accounts.SetUserDeactivated(ctx, user.IDOf(ann.String()), now); err != nil {
		t.Fatal(err)
	}
	if _, o := read("t3"); o.Active() {
		t.Fatal("the owner is still active on the replica that deactivated them")
	}
	// What a caller changes in its copy is not what the next one reads.
	tk, o := read("t3")
	tk.Owner.Groups, o.Groups[0] = []string{"x"}, "gantry-admins"
	if got := groups("t3"); got != "ml-robotics" {
		t.Fatalf("a caller's change reached the kept credential: %q", got)
	}
	if _, _, err := a.Accounts.TokenAndOwner(ctx, "no-such-token"); !isNotFound(err) {
		t.Fatalf("unknown token: %v, want not found", err)
	}

	// Sessions alike: kept, and forgotten with their user.
	for _, h := range []string{"s1", "s2"} {
		if err := a.Accounts.CreateSession(ctx, weblogin.Session{IDHash: h, Identity: ann, CSRF: "c", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	session := func(h string) (*user.User, error) {
		t.Helper()
		_, u, err := a.Accounts.SessionAndUser(ctx, h)
		return u, err
	}
	if u, err := session("s1"); err != nil || u == nil || u.Active() {
		t.Fatalf("s1: its user %+v (deactivated above) %v", u, err)
	}
	// Another replica ends s1: kept until the feed says so.
	if err := b.Accounts.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := session("s1"); err != nil {
		t.Fatalf("s1 read again before the feed said so: %v (the session was not kept)", err)
	}
	a.Accounts.Forget(live.Change{Kind: live.User, Subject: ann.String()})
	if _, err := session("s1"); !isNotFound(err) {
		t.Fatalf("s1 after the feed said it ended: %v, want not found", err)
	}
	// This replica ends s2: at once.
	session("s2")
	if err := a.Accounts.DeleteSession(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := session("s2"); !isNotFound(err) {
		t.Fatalf("s2 on the replica that ended it: %v, want not found", err)
	}
}
