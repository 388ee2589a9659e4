package api_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/accounts"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
)

// TestPersonalAccessTokens: a member makes tokens and uses them as a notebook
// would; narrowing, revocation and storage behave.
func TestPersonalAccessTokens(t *testing.T) {
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		return identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"ml-vision"}}, nil
	})
	ctx := t.Context()
	member := e.as("member")
	create := func(req model.TokenRequest) (int, string, string) {
		r := servertest.Must(member.CreateTokenWithResponse(ctx, req))(t)
		tk := servertest.Deref(r.JSON201)
		return r.StatusCode(), tk.Id, tk.Token
	}
	s, id, full := create(model.TokenRequest{Name: "notebook", ExpiresInDays: 30})
	if s != 201 || !strings.HasPrefix(full, "gnt_"+id+"_") || len(full) < 30 {
		t.Fatalf("create: %d %q", s, full)
	}
	_, _, visionOnly := create(model.TokenRequest{Name: "vision only", ExpiresInDays: 1, Team: new("vision")})
	if s, _, _ := create(model.TokenRequest{Name: "nlp only", ExpiresInDays: 1, Team: new("nlp")}); s != 422 {
		t.Errorf("a member of vision narrows a token to nlp: %d, want 422", s)
	}
	_, _, readOnly := create(model.TokenRequest{Name: "dashboards", ExpiresInDays: 1, ReadOnly: new(true)})

	// The secret is never shown again, and the database holds only its hash.
	lr := servertest.Must(member.ListTokensWithResponse(ctx))(t)
	if n := len(servertest.Deref(lr.JSON200).Items); n != 3 {
		t.Fatalf("%d tokens listed", n)
	}
	// TokenInfo has no field for a secret: the raw answer shows whether one leaked.
	var listed struct{ Items []map[string]any }
	if err := json.Unmarshal(lr.Body, &listed); err != nil {
		t.Fatal(err)
	}
	for _, it := range listed.Items {
		if _, leaked := it["token"]; leaked {
			t.Fatalf("list shows a secret: %v", it)
		}
	}
	secret := full[strings.LastIndex(full, "_")+1:]
	if dumpContains(t, e, secret) {
		t.Fatal("the database holds the token's secret")
	}

	// with is the typed client presenting a token (the X-Test-Role it also
	// sends is ignored: the token decides who this is).
	with := func(tok string) *client.ClientWithResponses { return newClient(e.url, tok, "ignored") }
	launch := model.LaunchRequest{Template: "dev-environment", Team: "vision"}
	if s := servertest.Must(with(full).CreateWorkloadWithResponse(ctx, nil, launch))(t).StatusCode(); s != 201 {
		t.Errorf("launch with a token: %d", s)
	}
	if s := servertest.Must(with(visionOnly).CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "nlp"}))(t).StatusCode(); s != 403 {
		t.Errorf("launch in nlp with a token narrowed to vision: %d, want 403", s)
	}
	if s := servertest.Must(with(readOnly).ListTemplatesWithResponse(ctx))(t).StatusCode(); s != 200 {
		t.Errorf("read with a read-only token: %d", s)
	}
	if s := servertest.Must(with(readOnly).CreateWorkloadWithResponse(ctx, nil, launch))(t).StatusCode(); s != 403 {
		t.Errorf("launch with a read-only token: %d, want 403", s)
	}
	if s := servertest.Must(with(full).CreateTokenWithResponse(ctx, model.TokenRequest{Name: "child", ExpiresInDays: 366}))(t).StatusCode(); s != 403 {
		t.Errorf("a token making a token: %d, want 403", s)
	}
	// Read-only means no token management either: neither listing its
	// owner's tokens nor revoking one (the full one, here).
	if s := servertest.Must(with(readOnly).ListTokensWithResponse(ctx))(t).StatusCode(); s != 403 {
		t.Errorf("a read-only token listing tokens: %d, want 403", s)
	}
	if s := servertest.Must(with(readOnly).RevokeTokenWithResponse(ctx, id))(t).StatusCode(); s != 403 {
		t.Errorf("a read-only token revoking a token: %d, want 403", s)
	}
	if s := servertest.Must(with(full).ListTemplatesWithResponse(ctx))(t).StatusCode(); s != 200 {
		t.Errorf("the full token after a read-only token tried to revoke it: %d, want 200", s)
	}
	for _, bad := range []string{"gnt_" + id + "_wrongsecret", "gnt_nosuchid_x", "gnt_", full + "x"} {
		if s := servertest.Must(with(bad).ListTemplatesWithResponse(ctx))(t).StatusCode(); s != 401 {
			t.Errorf("token %q: %d, want 401", bad, s)
		}
	}
	// Revoked: the very next use fails.
	if s := servertest.Must(member.RevokeTokenWithResponse(ctx, id))(t).StatusCode(); s != 204 {
		t.Fatalf("revoke: %d", s)
	}
	if s := servertest.Must(with(full).ListTemplatesWithResponse(ctx))(t).StatusCode(); s != 401 {
		t.Errorf("revoked token: %d, want 401", s)
	}
	if s := servertest.Must(member.CreateTokenWithResponse(ctx, model.TokenRequest{Name: "", ExpiresInDays: 0}))(t).StatusCode(); s != 400 {
		t.Errorf("bad token request: %d, want 400", s)
	}
	// Narrowed to a team its owner holds no role in, or to no team of the
	// policy at all, a token would grant nothing: refused, naming the team.
	for _, tc := range []struct{ role, team string }{{"member", "nlp"}, {"member", "ghost"}} {
		r := servertest.Must(e.as(tc.role).CreateTokenWithResponse(ctx, model.TokenRequest{Name: "narrow", ExpiresInDays: 1, Team: &tc.team}))(t)
		if p := problemOf(r.ApplicationproblemJSONDefault); r.StatusCode() != 422 || p.fields()["team"] == "" {
			t.Errorf("%s narrows a token to %q: %d %s, want 422 naming team", tc.role, tc.team, r.StatusCode(), r.Body)
		}
	}
}

func TestTokenExpiry(t *testing.T) {
	db, err := store.Open(context.Background(), store.SQLite, storetest.SQLitePath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := accounts.New(db)
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
	ctx := t.Context()
	tr := servertest.Must(e.api.CreateTokenWithResponse(ctx, model.TokenRequest{Name: "vision only", ExpiresInDays: 1, Team: new("vision")}))(t)
	if tr.StatusCode() != 201 {
		t.Fatalf("create: %d", tr.StatusCode())
	}
	c := newClient(e.url, tr.JSON201.Token, "")
	newTemplate := templateDoc(t, "../templates/dev-environment.yaml", func(d *model.TemplateDocument) { d.Metadata.Name = "narrowed" })
	for _, a := range []struct {
		method, path string
		send         func() (statusCoder, error)
		want         int
	}{
		{"GET", "/api/v1/audit", func() (statusCoder, error) { return c.ListAuditWithResponse(ctx, nil) }, 403},
		{"POST", "/api/v1/templates", func() (statusCoder, error) { return c.CreateTemplateWithResponse(ctx, newTemplate) }, 403},
		{"DELETE", "/api/v1/templates/dev-environment", func() (statusCoder, error) { return c.DeleteTemplateWithResponse(ctx, "dev-environment", nil) }, 403},
		{"POST", "/api/v1/workloads", func() (statusCoder, error) {
			return c.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "nlp"})
		}, 403},
		{"GET", "/api/v1/templates", func() (statusCoder, error) { return c.ListTemplatesWithResponse(ctx) }, 200},
		{"POST", "/api/v1/workloads", func() (statusCoder, error) {
			return c.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"})
		}, 201},
	} {
		if s := servertest.Must(a.send())(t).StatusCode(); s != a.want {
			t.Errorf("%s %s with a token narrowed to vision: %d, want %d", a.method, a.path, s, a.want)
		}
	}
}
