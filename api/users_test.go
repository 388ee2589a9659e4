package api_test

import (
	"database/sql"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/user"
)

// TestGroupsAreCurrent: a personal access token acts with its owner's groups
// as the identity provider last said them, not as they were when it was
// made; groups the provider has not confirmed for longer than maxGroupAge
// (24h by default) make the owner sign in again; a platform admin deactivates
// a user (every token and provider token refused at once), lists users and
// revokes anyone's token.
func TestGroupsAreCurrent(t *testing.T) {
	var mu sync.Mutex
	annGroups := []string{"ml-vision"}
	clock := clocktesting.NewFakeClock(time.Now())
	e := newEnvWith(t, server.Overrides{Clock: clock, Identify: func(r *http.Request) (identity.Identity, error) {
		if r.Header.Get("X-Test-Role") == "ann" {
			mu.Lock()
			defer mu.Unlock()
			return identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: append([]string(nil), annGroups...)}, nil
		}
		return identity.Identity{Issuer: "https://idp", Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
	}})
	ctx := t.Context()
	ann := e.as("ann")
	tr := servertest.Must(ann.CreateTokenWithResponse(ctx, model.TokenRequest{Name: "nb", ExpiresInDays: 30}))(t)
	if tr.StatusCode() != 201 {
		t.Fatalf("ann's token: %d", tr.StatusCode())
	}
	tk := servertest.Deref(tr.JSON201)
	withToken := newClient(e.url, tk.Token, "")
	// outcome is a call's status and its problem's detail.
	outcome := func(r answer, err error) (int, string) {
		t.Helper()
		r = servertest.Must(r, err)(t)
		return r.StatusCode(), problemOf(r.GetApplicationproblemJSONDefault()).Detail
	}
	launch := func() (int, string) {
		return outcome(withToken.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))
	}
	templates := func() (int, string) { return outcome(withToken.ListTemplatesWithResponse(ctx)) }
	if s, d := launch(); s != 201 {
		t.Fatalf("launch with the token while in ml-vision: %d %s", s, d)
	}

	// The provider drops ann from ml-vision; her next provider token says so.
	mu.Lock()
	annGroups = nil
	mu.Unlock()
	if s := servertest.Must(ann.GetMeWithResponse(ctx))(t).StatusCode(); s != 200 {
		t.Fatalf("ann's /me: %d", s)
	}
	if s, d := launch(); s != 403 {
		t.Fatalf("launch with the token after leaving ml-vision: %d %s, want 403", s, d)
	}

	// Back in the group, then silence from the provider for longer than maxGroupAge.
	mu.Lock()
	annGroups = []string{"ml-vision"}
	mu.Unlock()
	servertest.Must(ann.GetMeWithResponse(ctx))(t)
	if s, d := launch(); s != 201 {
		t.Fatalf("launch after rejoining: %d %s", s, d)
	}
	clock.Step(25 * time.Hour)
	if s, d := templates(); s != 401 || !strings.Contains(d, "sign in again") {
		t.Fatalf("token with day-old groups: %d %q, want 401 asking to sign in again", s, d)
	}
	servertest.Must(ann.GetMeWithResponse(ctx))(t) // a fresh provider token confirms the groups
	if s, d := templates(); s != 200 {
		t.Fatalf("token after a fresh provider token: %d %s", s, d)
	}

	// A platform admin lists users, sees ann's tokens, deactivates her.
	users := servertest.Must(e.api.ListUsersWithResponse(ctx))(t)
	if users.StatusCode() != 200 || len(servertest.Deref(users.JSON200).Items) != 2 {
		t.Fatalf("users: %d %s", users.StatusCode(), users.Body)
	}
	annID := user.IDOf("https://idp#ann")
	tokens := servertest.Must(e.api.ListUserTokensWithResponse(ctx, annID))(t)
	if items := servertest.Deref(tokens.JSON200).Items; tokens.StatusCode() != 200 || len(items) != 1 || items[0].Id != tk.Id {
		t.Fatalf("ann's tokens: %d %s", tokens.StatusCode(), tokens.Body)
	}
	if u := servertest.Must(e.api.DeactivateUserWithResponse(ctx, annID))(t); u.StatusCode() != 200 || u.JSON200.Active {
		t.Fatalf("deactivate: %d %s", u.StatusCode(), u.Body)
	}
	if s, d := templates(); s != 401 || !strings.Contains(d, "deactivated") {
		t.Fatalf("deactivated user's token: %d %q", s, d)
	}
	if s := servertest.Must(ann.ListTemplatesWithResponse(ctx))(t).StatusCode(); s != 401 {
		t.Fatalf("deactivated user's provider token: %d", s)
	}
	if s := servertest.Must(e.api.DeactivateUserWithResponse(ctx, user.IDOf("https://idp#alice")))(t).StatusCode(); s != 409 {
		t.Fatalf("an admin deactivating themselves: %d, want 409", s)
	}
	if s := servertest.Must(e.api.ReactivateUserWithResponse(ctx, annID))(t).StatusCode(); s != 200 {
		t.Fatalf("reactivate: %d", s)
	}
	if s, _ := templates(); s != 200 {
		t.Fatalf("reactivated user's token: %d", s)
	}
	if s := servertest.Must(e.api.RevokeUserTokenWithResponse(ctx, annID, tk.Id))(t).StatusCode(); s != 204 {
		t.Fatalf("revoke ann's token: %d", s)
	}
	if s, _ := templates(); s != 401 {
		t.Fatalf("revoked token: %d", s)
	}
	// Every one of those actions is in the audit log under the admin.
	log := servertest.Deref(servertest.Must(e.api.ListAuditWithResponse(ctx, &model.ListAuditParams{Actor: new("https://idp#alice")}))(t).JSON200)
	seen := map[string]bool{}
	for _, r := range log.Items {
		seen[r.Action] = true
	}
	for _, a := range []string{"POST /api/v1/users/:user/deactivate", "POST /api/v1/users/:user/reactivate", "DELETE /api/v1/users/:user/tokens/:id"} {
		if !seen[a] {
			t.Errorf("audit log lacks %s: %v", a, seen)
		}
	}
}

// TestRecordingTheUserFailingIsNotA401: a provider token that verifies is
// the caller's good credential even when Gantry cannot record its user (the
// users table away here; two first requests racing on PostgreSQL before):
// the answer is Gantry's failure, never 401 "not authenticated", which
// tells a client to drop a token that is fine.
func TestRecordingTheUserFailingIsNotA401(t *testing.T) {
	e := newEnvWith(t, server.Overrides{Identify: alice})
	if r := e.raw(http.MethodGet, "/api/v1/templates", ""); r.resp.StatusCode != http.StatusOK {
		t.Fatalf("before: %d %s", r.resp.StatusCode, r.body)
	}
	db, err := sql.Open("sqlite", "file:"+e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ALTER TABLE users RENAME TO users_away`); err != nil {
		t.Fatal(err)
	}
	r := e.raw(http.MethodGet, "/api/v1/templates", "")
	if r.resp.StatusCode != http.StatusInternalServerError || r.resp.Header.Get("WWW-Authenticate") != "" {
		t.Errorf("users table away: %d (WWW-Authenticate %q) %s, want 500 and no challenge",
			r.resp.StatusCode, r.resp.Header.Get("WWW-Authenticate"), r.body)
	}
	if _, err := db.Exec(`ALTER TABLE users_away RENAME TO users`); err != nil {
		t.Fatal(err)
	}
	if r := e.raw(http.MethodGet, "/api/v1/templates", ""); r.resp.StatusCode != http.StatusOK {
		t.Fatalf("users table back: %d %s", r.resp.StatusCode, r.body)
	}
}
