package api_test

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
)

// TestPersonalAccessTokens: a member makes tokens and uses them as a notebook
// would; narrowing, revocation and storage behave.
func TestPersonalAccessTokens(t *testing.T) {
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		return identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"ml-vision"}}, nil
	})
	create := func(body map[string]any) (int, string, string) {
		var tk struct{ ID, Token string }
		s := e.request("member", "POST", "/api/v1/tokens", body, &tk)
		return s, tk.ID, tk.Token
	}
	s, id, full := create(map[string]any{"name": "notebook", "expiresInDays": 30})
	if s != 201 || !strings.HasPrefix(full, "gnt_"+id+"_") || len(full) < 30 {
		t.Fatalf("create: %d %q", s, full)
	}
	_, _, visionOnly := create(map[string]any{"name": "vision only", "expiresInDays": 1, "team": "vision"})
	if s, _, _ := create(map[string]any{"name": "nlp only", "expiresInDays": 1, "team": "nlp"}); s != 422 {
		t.Errorf("a member of vision narrows a token to nlp: %d, want 422", s)
	}
	_, _, readOnly := create(map[string]any{"name": "dashboards", "expiresInDays": 1, "readOnly": true})

	// The secret is never shown again, and the database holds only its hash.
	var list struct {
		Items []map[string]any
	}
	e.request("member", "GET", "/api/v1/tokens", nil, &list)
	if len(list.Items) != 3 {
		t.Fatalf("%d tokens listed", len(list.Items))
	}
	for _, it := range list.Items {
		if _, leaked := it["token"]; leaked {
			t.Fatalf("list shows a secret: %v", it)
		}
	}
	secret := full[strings.LastIndex(full, "_")+1:]
	if dumpContains(t, e, secret) {
		t.Fatal("the database holds the token's secret")
	}

	use := func(tok, method, path string, body any) int {
		req, _ := http.NewRequest(method, e.url+path, bodyReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Test-Role", "ignored") // the token decides who this is
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	launch := map[string]any{"template": "dev-environment", "team": "vision"}
	if s := use(full, "POST", "/api/v1/workloads", launch); s != 201 {
		t.Errorf("launch with a token: %d", s)
	}
	if s := use(visionOnly, "POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "nlp"}); s != 403 {
		t.Errorf("launch in nlp with a token narrowed to vision: %d, want 403", s)
	}
	if s := use(readOnly, "GET", "/api/v1/templates", nil); s != 200 {
		t.Errorf("read with a read-only token: %d", s)
	}
	if s := use(readOnly, "POST", "/api/v1/workloads", launch); s != 403 {
		t.Errorf("launch with a read-only token: %d, want 403", s)
	}
	if s := use(full, "POST", "/api/v1/tokens", map[string]any{"name": "child", "expiresInDays": 366}); s != 403 {
		t.Errorf("a token making a token: %d, want 403", s)
	}
	// Read-only means no token management either: neither listing its
	// owner's tokens nor revoking one (the full one, here).
	if s := use(readOnly, "GET", "/api/v1/tokens", nil); s != 403 {
		t.Errorf("a read-only token listing tokens: %d, want 403", s)
	}
	if s := use(readOnly, "DELETE", "/api/v1/tokens/"+id, nil); s != 403 {
		t.Errorf("a read-only token revoking a token: %d, want 403", s)
	}
	if s := use(full, "GET", "/api/v1/templates", nil); s != 200 {
		t.Errorf("the full token after a read-only token tried to revoke it: %d, want 200", s)
	}
	for _, bad := range []string{"gnt_" + id + "_wrongsecret", "gnt_nosuchid_x", "gnt_", full + "x"} {
		if s := use(bad, "GET", "/api/v1/templates", nil); s != 401 {
			t.Errorf("token %q: %d, want 401", bad, s)
		}
	}
	// Revoked: the very next use fails.
	if s := e.request("member", "DELETE", "/api/v1/tokens/"+id, nil, nil); s != 204 {
		t.Fatalf("revoke: %d", s)
	}
	if s := use(full, "GET", "/api/v1/templates", nil); s != 401 {
		t.Errorf("revoked token: %d, want 401", s)
	}
	if s := e.request("member", "POST", "/api/v1/tokens", map[string]any{"name": "", "expiresInDays": 0}, nil); s != 400 {
		t.Errorf("bad token request: %d, want 400", s)
	}
	// Narrowed to a team its owner holds no role in, or to no team of the
	// policy at all, a token would grant nothing: refused, naming the team.
	for _, tc := range []struct{ role, team string }{{"member", "nlp"}, {"member", "ghost"}} {
		var p problem
		if s := e.request(tc.role, "POST", "/api/v1/tokens", map[string]any{"name": "narrow", "expiresInDays": 1, "team": tc.team}, &p); s != 422 || p.fields()["team"] == "" {
			t.Errorf("%s narrows a token to %q: %d %+v, want 422 naming team", tc.role, tc.team, s, p)
		}
	}
}

func TestTokenExpiry(t *testing.T) {
	st, err := store.Open(context.Background(), store.SQLite, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	users, err := user.New(user.Options{Store: st, MaxGroupAge: 24 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := authz.New(authz.InDir("../policy"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := token.New(token.Options{Store: st, Owners: users, Teams: policy, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann"}
	if _, err := users.Observe(context.Background(), ann); err != nil {
		t.Fatal(err)
	}
	ctx := identity.With(context.Background(), ann)
	_, secret, err := svc.Create(ctx, token.Request{Name: "short", Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(ctx, secret); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	now = now.Add(time.Hour)
	if _, err := svc.Authenticate(ctx, secret); err != token.ErrInvalid {
		t.Fatalf("expired token: %v, want ErrInvalid", err)
	}
}

// dumpContains reports whether any text column of the test database holds s.
func dumpContains(t *testing.T, e *env, s string) bool {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+e.dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM tokens WHERE instr(id || name || secret_hash || owner || groups, ?) > 0`, s).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestNarrowedTokenHasNoPlatformPowers: a platform admin's token narrowed to
// team vision acts in vision only: no audit log, no template writes, no
// launches elsewhere; catalog reads and launches in vision still work.
func TestNarrowedTokenHasNoPlatformPowers(t *testing.T) {
	e := newEnv(t, alice) // a platform admin
	var tk struct{ Token string }
	if s := e.request("", "POST", "/api/v1/tokens", map[string]any{"name": "vision only", "expiresInDays": 1, "team": "vision"}, &tk); s != 201 {
		t.Fatalf("create: %d", s)
	}
	use := func(method, path string, body any) int {
		req, _ := http.NewRequest(method, e.url+path, bodyReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tk.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	newTemplate := templateJSON(t, "../templates/dev-environment.yaml", func(m map[string]any) { m["metadata"].(map[string]any)["name"] = "narrowed" })
	for _, c := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "/api/v1/audit", nil, 403},
		{"POST", "/api/v1/templates", newTemplate, 403},
		{"DELETE", "/api/v1/templates/dev-environment", nil, 403},
		{"POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "nlp"}, 403},
		{"GET", "/api/v1/templates", nil, 200},
		{"POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "vision"}, 201},
	} {
		if s := use(c.method, c.path, c.body); s != c.want {
			t.Errorf("%s %s with a token narrowed to vision: %d, want %d", c.method, c.path, s, c.want)
		}
	}
}
