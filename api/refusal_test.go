package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
)

// TestRefusalSaysWhomToAsk: a 403 names the permission the caller lacks and
// the roles that grant it, so a person knows whom to ask.
func TestRefusalSaysWhomToAsk(t *testing.T) {
	e := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{Subject: "mia", Groups: []string{"ml-vision"}}, nil // a member of vision
	})
	r := servertest.Must(e.api.ListAuditWithResponse(t.Context(), nil))(t)
	if r.StatusCode() != 403 {
		t.Fatalf("audit as a member: %d", r.StatusCode())
	}
	p := problemOf(r.ApplicationproblemJSONDefault)
	if !strings.Contains(p.Detail, "you need the audit:read permission") || !strings.Contains(p.Detail, "platform-admin") ||
		!strings.Contains(p.Detail, "policy/bindings.yaml") || strings.Contains(p.Detail, "member") {
		t.Errorf("the refusal: %q", p.Detail)
	}
	if !strings.Contains(p.Detail, "ask someone with the platform-admin or platform-engineer role (who may change the policy)") {
		t.Errorf("the refusal does not name who may change the policy: %q", p.Detail)
	}
	t.Log(p.Detail)
}

// TestRefusalToAPolicyEditor: a platform engineer refused the audit log is
// not told to ask a platform engineer: they may bind their group themselves.
func TestRefusalToAPolicyEditor(t *testing.T) {
	e := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{Subject: "pat", Groups: []string{"platform-team"}, SecondFactor: true}, nil
	})
	r := servertest.Must(e.api.ListAuditWithResponse(t.Context(), nil))(t)
	if r.StatusCode() != 403 {
		t.Fatalf("audit as a platform engineer: %d", r.StatusCode())
	}
	p := problemOf(r.ApplicationproblemJSONDefault)
	if !strings.Contains(p.Detail, "you may change the policy yourself") || strings.Contains(p.Detail, "ask someone") {
		t.Errorf("the refusal to a policy editor: %q", p.Detail)
	}
}
