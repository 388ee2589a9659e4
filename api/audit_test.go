package api_test

import (
	"context"
	"database/sql"
	"net/http"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/store"
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
	e.do("POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "vision"}, nil)
	e.request("member", "DELETE", "/api/v1/templates/vllm-inference", nil, nil) // denied
	e.do("GET", "/api/v1/templates", nil, nil)                                  // a read: not recorded
	var page struct {
		Items []struct {
			Seq                                             int64
			Actor, Action, Object, Decision, Reason, Source string
			Status                                          int
		}
	}
	e.do("GET", "/api/v1/audit?after=0", nil, &page) // oldest first
	if len(page.Items) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(page.Items), page.Items)
	}
	launch, denial := page.Items[0], page.Items[1]
	var newest struct {
		Items      []struct{ Seq int64 }
		NextBefore *int64
	}
	e.do("GET", "/api/v1/audit?limit=1", nil, &newest) // by default, newest first
	if len(newest.Items) != 1 || newest.Items[0].Seq != 2 || newest.NextBefore == nil || *newest.NextBefore != 2 {
		t.Fatalf("newest first: %+v", newest)
	}
	e.do("GET", "/api/v1/audit?limit=1&before=2", nil, &newest)
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
	e.request("member", "POST", "/api/v1/workloads", map[string]any{"template": "vllm-inference", "team": "nlp"}, nil)
	e.request("member", "POST", "/api/v1/templates", templateJSON(t, "../templates/vllm-inference.yaml", nil), nil)
	e.request("member", "PUT", "/api/v1/templates/vllm-inference", templateJSON(t, "../templates/vllm-inference.yaml", nil), nil)

	st, err := store.Open(context.Background(), store.SQLite, e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, problems, err := audit.Verify(context.Background(), st)
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
		_, problems, err := audit.Verify(context.Background(), st)
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
	var w struct{ ID string }
	if code, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "vision"}, &w); code != 201 {
		t.Fatalf("launch: %d", code)
	}
	path := "/api/v1/workloads/" + w.ID
	for _, a := range []struct{ method, path string }{{"GET", path}, {"POST", path + "/stop"}, {"DELETE", path}} {
		if code := e.request("nlp", a.method, a.path, nil, nil); code != 404 {
			t.Errorf("%s %s by another team: %d, want 404", a.method, a.path, code)
		}
	}
	var page struct {
		Items []struct{ Actor, Action, Decision, Reason string }
	}
	e.do("GET", "/api/v1/audit?actor=https://idp%23nils", nil, &page)
	got := map[string]string{}
	for _, r := range page.Items {
		got[r.Action] = r.Decision + ": " + r.Reason
	}
	for _, action := range []string{"GET /api/v1/workloads/:id", "POST /api/v1/workloads/:id/stop", "DELETE /api/v1/workloads/:id"} {
		if want := `deny: may not read workloads of team "vision" (answered 404)`; got[action] != want {
			t.Errorf("%s by another team audited as %q, want %q (all: %v)", action, got[action], want, got)
		}
	}
}
