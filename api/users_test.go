package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/server"
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
	var tk struct{ ID, Token string }
	if s := e.request("ann", "POST", "/api/v1/tokens", map[string]any{"name": "nb", "expiresInDays": 30}, &tk); s != 201 {
		t.Fatalf("ann's token: %d", s)
	}
	withToken := func(method, path string, body any) (int, string) {
		req, _ := http.NewRequest(method, e.url+path, bodyReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tk.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p problem
		json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p.Detail
	}
	launch := map[string]any{"template": "dev-environment", "team": "vision"}
	if s, d := withToken("POST", "/api/v1/workloads", launch); s != 201 {
		t.Fatalf("launch with the token while in ml-vision: %d %s", s, d)
	}

	// The provider drops ann from ml-vision; her next provider token says so.
	mu.Lock()
	annGroups = nil
	mu.Unlock()
	if s := e.request("ann", "GET", "/api/v1/me", nil, nil); s != 200 {
		t.Fatalf("ann's /me: %d", s)
	}
	if s, d := withToken("POST", "/api/v1/workloads", launch); s != 403 {
		t.Fatalf("launch with the token after leaving ml-vision: %d %s, want 403", s, d)
	}

	// Back in the group, then silence from the provider for longer than maxGroupAge.
	mu.Lock()
	annGroups = []string{"ml-vision"}
	mu.Unlock()
	e.request("ann", "GET", "/api/v1/me", nil, nil)
	if s, d := withToken("POST", "/api/v1/workloads", launch); s != 201 {
		t.Fatalf("launch after rejoining: %d %s", s, d)
	}
	clock.Step(25 * time.Hour)
	if s, d := withToken("GET", "/api/v1/templates", nil); s != 401 || !strings.Contains(d, "sign in again") {
		t.Fatalf("token with day-old groups: %d %q, want 401 asking to sign in again", s, d)
	}
	e.request("ann", "GET", "/api/v1/me", nil, nil) // a fresh provider token confirms the groups
	if s, d := withToken("GET", "/api/v1/templates", nil); s != 200 {
		t.Fatalf("token after a fresh provider token: %d %s", s, d)
	}

	// A platform admin lists users, sees ann's tokens, deactivates her.
	var users struct {
		Items []struct{ ID, Subject string }
	}
	if s, _ := e.do("GET", "/api/v1/users", nil, &users); s != 200 || len(users.Items) != 2 {
		t.Fatalf("users: %d %+v", s, users)
	}
	ann := user.IDOf("https://idp#ann")
	var tokens struct{ Items []struct{ ID string } }
	if s, _ := e.do("GET", "/api/v1/users/"+ann+"/tokens", nil, &tokens); s != 200 || len(tokens.Items) != 1 || tokens.Items[0].ID != tk.ID {
		t.Fatalf("ann's tokens: %d %+v", s, tokens)
	}
	var u struct{ Active bool }
	if s, _ := e.do("POST", "/api/v1/users/"+ann+"/deactivate", nil, &u); s != 200 || u.Active {
		t.Fatalf("deactivate: %d %+v", s, u)
	}
	if s, d := withToken("GET", "/api/v1/templates", nil); s != 401 || !strings.Contains(d, "deactivated") {
		t.Fatalf("deactivated user's token: %d %q", s, d)
	}
	if s := e.request("ann", "GET", "/api/v1/templates", nil, nil); s != 401 {
		t.Fatalf("deactivated user's provider token: %d", s)
	}
	if s, _ := e.do("POST", "/api/v1/users/"+user.IDOf("https://idp#alice")+"/deactivate", nil, nil); s != 409 {
		t.Fatalf("an admin deactivating themselves: %d, want 409", s)
	}
	if s, _ := e.do("POST", "/api/v1/users/"+ann+"/reactivate", nil, nil); s != 200 {
		t.Fatalf("reactivate: %d", s)
	}
	if s, _ := withToken("GET", "/api/v1/templates", nil); s != 200 {
		t.Fatalf("reactivated user's token: %d", s)
	}
	if s, _ := e.do("DELETE", "/api/v1/users/"+ann+"/tokens/"+tk.ID, nil, nil); s != 204 {
		t.Fatalf("revoke ann's token: %d", s)
	}
	if s, _ := withToken("GET", "/api/v1/templates", nil); s != 401 {
		t.Fatalf("revoked token: %d", s)
	}
	// Every one of those actions is in the audit log under the admin.
	var log struct {
		Items []struct{ Actor, Action string }
	}
	e.do("GET", "/api/v1/audit?actor=https://idp%23alice", nil, &log)
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
