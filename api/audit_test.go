package api_test

import (
	"context"
	"database/sql"
	"net/http"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/auditlog"
)

// TestAuditLog: changes and denials are recorded with who, what and why, the
// chain verifies, and editing, deleting or inserting a row directly in the
// database is caught and named.
func TestAuditLog(t *testing.T) {
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		if r.Header.Get("X-Test-Role") == "member" {
			return identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"ml-vision"}}, nil
		}
		return identity.Identity{Issuer: "https://idp", Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
	})
	ctx := t.Context()
	member := e.as("member")
	servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	servertest.Must(member.DeleteTemplateWithResponse(ctx, "vllm-inference", nil))(t)                                                    // denied
	servertest.Must(e.api.ListTemplatesWithResponse(ctx))(t)                                                                             // a read: not recorded
	page := servertest.Deref(servertest.Must(e.api.ListAuditWithResponse(ctx, &model.ListAuditParams{After: new(int64(0))}))(t).JSON200) // oldest first
	if len(page.Items) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(page.Items), page.Items)
	}
	launch, denial := page.Items[0], page.Items[1]
	newest := servertest.Deref(servertest.Must(e.api.ListAuditWithResponse(ctx, &model.ListAuditParams{Limit: new(1)}))(t).JSON200) // by default, newest first
	if len(newest.Items) != 1 || newest.Items[0].Seq != 2 || newest.NextBefore == nil || *newest.NextBefore != 2 {
		t.Fatalf("newest first: %+v", newest)
	}
	newest = servertest.Deref(servertest.Must(e.api.ListAuditWithResponse(ctx, &model.ListAuditParams{Limit: new(1), Before: new(int64(2))}))(t).JSON200)
	if len(newest.Items) != 1 || newest.Items[0].Seq != 1 {
		t.Fatalf("the next page, before 2: %+v", newest)
	}
	if launch.Actor != "https://idp#alice" || launch.Action != "POST /api/v1/workloads" || launch.Decision != "allow" || launch.Status != 201 || launch.Source != "127.0.0.1" {
		t.Errorf("launch record %+v", launch)
	}
	if denial.Actor != "https://idp#ann" || denial.Decision != "deny" || denial.Status != 403 || !strings.Contains(denial.Reason, "templates:write") || denial.Object != "/api/v1/templates/vllm-inference" {
		t.Errorf("denial record %+v", denial)
	}
	// Three more denials, of three kinds (repeats of one kind are counted,
	// not written: TestAnonymousFlood).
	vllm := templateDoc(t, "../templates/vllm-inference.yaml", nil)
	servertest.Must(member.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "vllm-inference", Team: "nlp"}))(t)
	servertest.Must(member.CreateTemplateWithResponse(ctx, vllm))(t)
	servertest.Must(member.UpdateTemplateWithResponse(ctx, "vllm-inference", nil, vllm))(t)

	st, err := store.Open(context.Background(), store.SQLite, e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	records := auditlog.New(st)
	n, problems, err := audit.Verify(context.Background(), records)
	if err != nil || n != 5 || len(problems) != 0 {
		t.Fatalf("intact log: %d records, problems %v, %v", n, problems, err)
	}
	db, err := sql.Open("sqlite", "file:"+e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tamper := []struct {
		name, sql string
		seq       int64
		want      string
	}{
		{"edited", `UPDATE audit SET decision = 'allow' WHERE seq = 2`, 2, "changed after it was written"},
		{"deleted", `DELETE FROM audit WHERE seq = 4`, 5, "records 4 to 4 were deleted"},
		{"inserted", `INSERT INTO audit SELECT 99, at, actor, action, object, decision, status, reason, request_id, source, prev_hash, hash FROM audit WHERE seq = 3`, 99, "expected record 6 here"},
	}
	for _, tc := range tamper {
		if _, err := db.Exec(tc.sql); err != nil {
			t.Fatal(err)
		}
		_, problems, err := audit.Verify(context.Background(), records)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range problems {
			if p.Seq == tc.seq && strings.Contains(p.Message, tc.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: problems %v lack record %d: %q", tc.name, problems, tc.seq, tc.want)
		}
	}
}

// Attempts on another team's workload are answered 404 (its existence does
// not leak) and audited as what they were: denials, under the real caller.
func TestAuditHiddenDenials(t *testing.T) {
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		if r.Header.Get("X-Test-Role") == "nlp" {
			return identity.Identity{Issuer: "https://idp", Subject: "nils", Groups: []string{"ml-nlp"}}, nil
		}
		return identity.Identity{Issuer: "https://idp", Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
	})
	ctx := t.Context()
	r := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d", r.StatusCode())
	}
	id, path := r.JSON201.Id, "/api/v1/workloads/"+r.JSON201.Id
	nlp := e.as("nlp")
	for _, a := range []struct {
		method, path string
		send         func() (answer, error)
	}{
		{"GET", path, func() (answer, error) { return nlp.GetWorkloadWithResponse(ctx, id) }},
		{"POST", path + "/stop", func() (answer, error) { return nlp.StopWorkloadWithResponse(ctx, id) }},
		{"DELETE", path, func() (answer, error) { return nlp.DeleteWorkloadWithResponse(ctx, id) }},
	} {
		if code := servertest.Must(a.send())(t).StatusCode(); code != 404 {
			t.Errorf("%s %s by another team: %d, want 404", a.method, a.path, code)
		}
	}
	page := servertest.Deref(servertest.Must(e.api.ListAuditWithResponse(ctx, &model.ListAuditParams{Actor: new("https://idp#nils")}))(t).JSON200)
	got := map[string]string{}
	for _, r := range page.Items {
		got[r.Action] = string(r.Decision) + ": " + r.Reason
	}
	for _, action := range []string{"GET /api/v1/workloads/:id", "POST /api/v1/workloads/:id/stop", "DELETE /api/v1/workloads/:id"} {
		if want := `deny: may not read workloads of team "vision" (answered 404)`; got[action] != want {
			t.Errorf("%s by another team audited as %q, want %q (all: %v)", action, got[action], want, got)
		}
	}
}
