package api_test

import (
	"net/http"
	"testing"

	"github.com/gantryhq/gantry/internal/identity"
)

// TestPeopleByName: answers name people as their provider does (name and
// e-mail) beside the stable issuer#subject: a workload's owner, a list's, the
// watch stream's, the audit log's actors, costs by user.
func TestPeopleByName(t *testing.T) {
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann", Name: "Ann Lee", Email: "ann@example.com", Groups: []string{"gantry-admins"}, SecondFactor: true}
	e := newEnv(t, func(*http.Request) (identity.Identity, error) { return ann, nil })
	var w struct{ ID, Owner, OwnerName string }
	if s, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "vision"}, &w); s != 201 {
		t.Fatalf("launch: %d", s)
	}
	const want = "Ann Lee <ann@example.com>"
	if w.Owner != "https://idp#ann" || w.OwnerName != want {
		t.Errorf("launch: owner %q, ownerName %q", w.Owner, w.OwnerName)
	}
	if s, _ := e.do("GET", "/api/v1/workloads/"+w.ID, nil, &w); s != 200 || w.OwnerName != want {
		t.Errorf("get: %d %q", s, w.OwnerName)
	}
	var list struct{ Items []struct{ OwnerName string } }
	if s, _ := e.do("GET", "/api/v1/workloads", nil, &list); s != 200 || len(list.Items) == 0 || list.Items[0].OwnerName != want {
		t.Errorf("list: %d %+v", s, list)
	}
	var first struct{ OwnerName string }
	if s, _ := e.do("GET", "/api/v1/workloads/"+w.ID+"/watch", nil, &first); s != 200 || first.OwnerName != want {
		t.Errorf("watch: %d %q", s, first.OwnerName)
	}
	var audit struct {
		Items []struct{ Actor, ActorName string }
	}
	if s, _ := e.do("GET", "/api/v1/audit", nil, &audit); s != 200 {
		t.Fatalf("audit: %d", s)
	}
	named := false
	for _, r := range audit.Items {
		named = named || (r.Actor == "https://idp#ann" && r.ActorName == want)
	}
	if !named {
		t.Errorf("the audit log does not name ann: %+v", audit.Items)
	}
}
