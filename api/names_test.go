package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
)

// TestPeopleByName: answers name people as their provider does (name and
// e-mail) beside the stable issuer#subject: a workload's owner, a list's, the
// watch stream's, the audit log's actors, costs by user.
func TestPeopleByName(t *testing.T) {
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann", Name: "Ann Lee", Email: "ann@example.com", Groups: []string{"gantry-admins"}, SecondFactor: true}
	e := newEnv(t, func(*http.Request) (identity.Identity, error) { return ann, nil })
	ctx := t.Context()
	r := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d", r.StatusCode())
	}
	const want = "Ann Lee <ann@example.com>"
	w := servertest.Deref(r.JSON201)
	if w.Owner != "https://idp#ann" || servertest.Deref(w.OwnerName) != want {
		t.Errorf("launch: owner %q, ownerName %q", w.Owner, servertest.Deref(w.OwnerName))
	}
	if g := servertest.Must(e.api.GetWorkloadWithResponse(ctx, w.Id))(t); g.StatusCode() != 200 || servertest.Deref(servertest.Deref(g.JSON200).OwnerName) != want {
		t.Errorf("get: %d %s", g.StatusCode(), g.Body)
	}
	if l := servertest.Must(e.api.ListWorkloadsWithResponse(ctx, nil))(t); l.StatusCode() != 200 || len(servertest.Deref(l.JSON200).Items) == 0 || servertest.Deref(l.JSON200.Items[0].OwnerName) != want {
		t.Errorf("list: %d %s", l.StatusCode(), l.Body)
	}
	// Not WatchWorkloadWithResponse: it would read the stream to its end.
	stream, cancel := context.WithCancel(ctx)
	resp, err := e.api.WatchWorkload(stream, w.Id)
	if err != nil {
		t.Fatal(err)
	}
	var first model.Workload
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(firstEvent(t, resp.Body), &first); err != nil {
			t.Fatalf("the watch's first event: %v", err)
		}
	}
	cancel()
	resp.Body.Close()
	if resp.StatusCode != 200 || servertest.Deref(first.OwnerName) != want {
		t.Errorf("watch: %d %q", resp.StatusCode, servertest.Deref(first.OwnerName))
	}
	audit := servertest.Must(e.api.ListAuditWithResponse(ctx, nil))(t)
	if audit.StatusCode() != 200 {
		t.Fatalf("audit: %d", audit.StatusCode())
	}
	named := false
	for _, r := range audit.JSON200.Items {
		named = named || (r.Actor == "https://idp#ann" && servertest.Deref(r.ActorName) == want)
	}
	if !named {
		t.Errorf("the audit log does not name ann: %s", audit.Body)
	}
}
