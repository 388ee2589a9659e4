package api_test

import (
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/user"
)

// roles are the callers of the matrix, by the starter policy's groups.
// "narrowed" is a platform admin's personal access token narrowed to team
// nlp: it holds only what the admin holds in nlp, nothing platform-wide.
var roles = []struct {
	name      string
	groups    []string
	tokenTeam string
}{
	{"platform-admin", []string{"gantry-admins"}, ""},
	{"platform-engineer", []string{"platform-team"}, ""},
	{"team-admin", []string{"ml-vision-leads"}, ""},
	{"member", []string{"ml-vision"}, ""},
	{"viewer", []string{"auditors"}, ""},
	{"nobody", nil, ""},
	{"narrowed", []string{"gantry-admins"}, "nlp"},
}

// TestRouteRoleMatrix walks every route of openapi.yaml for every role and
// checks the outcome (status code) against the policy in policy/.
func TestRouteRoleMatrix(t *testing.T) {
	// The caller is chosen per request by a header only this test sets.
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		role := r.Header.Get("X-Test-Role")
		for _, ro := range roles {
			if ro.name == role {
				id := identity.Identity{Subject: role, Groups: ro.groups, TokenTeam: ro.tokenTeam, SecondFactor: true}
				if ro.tokenTeam != "" {
					id.TokenID, id.Via = "tok-"+role, identity.ViaToken
				}
				return id, nil
			}
		}
		return identity.Identity{Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil // setup
	})
	const (
		A = "platform-admin"
		P = "platform-engineer"
		T = "team-admin"
		M = "member"
		V = "viewer"
		N = "nobody"
		X = "narrowed"
	)
	// Setup as platform admin: per role, a template to delete and a workload
	// (owned by the admin) to stop and one to delete.
	var w struct{ ID string }
	stopIDs, delIDs := map[string]string{}, map[string]string{}
	for _, ro := range roles {
		doc := templateJSON(t, "../templates/dev-environment.yaml", func(m map[string]any) { m["metadata"].(map[string]any)["name"] = "del-" + ro.name })
		if s, _ := e.do("POST", "/api/v1/templates", doc, nil); s != 201 {
			t.Fatalf("setup template: %d", s)
		}
		for _, ids := range []map[string]string{stopIDs, delIDs} {
			if s, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "vision"}, &w); s != 201 {
				t.Fatalf("setup workload: %d", s)
			}
			ids[ro.name] = w.ID
		}
	}
	tokenIDs := map[string]string{}
	for _, ro := range roles {
		if ro.tokenTeam != "" {
			tokenIDs[ro.name] = tokenIDs[A] // a token may not manage tokens: try the admin's own
			continue
		}
		var tk struct{ ID string }
		if s := e.request(ro.name, "POST", "/api/v1/tokens", map[string]any{"name": "setup", "expiresInDays": 1}, &tk); s != 201 {
			t.Fatalf("setup token as %s: %d", ro.name, s)
		}
		tokenIDs[ro.name] = tk.ID
	}
	onlyAdmin := func(ok int) map[string]int {
		return map[string]int{A: ok, P: 403, T: 403, M: 403, V: 403, N: 403, X: 403}
	}
	aliceID := user.IDOf("alice") // the setup identity
	var aliceToken struct{ ID string }
	if s, _ := e.do("POST", "/api/v1/tokens", map[string]any{"name": "setup", "expiresInDays": 1}, &aliceToken); s != 201 {
		t.Fatalf("setup token: %d", s)
	}
	readers := map[string]int{A: 200, P: 200, T: 200, M: 200, V: 200, N: 403, X: 200}
	writers := func(ok int) map[string]int {
		return map[string]int{A: ok, P: ok, T: 403, M: 403, V: 403, N: 403, X: 403}
	}
	public := map[string]int{A: 200, P: 200, T: 200, M: 200, V: 200, N: 200, X: 200}
	// The setup workloads are vision's: to a token narrowed to nlp they do not exist.
	visionReaders := map[string]int{A: 200, P: 200, T: 200, M: 200, V: 200, N: 403, X: 404}
	newTemplate := func(role string) any {
		return templateJSON(t, "../templates/dev-environment.yaml", func(m map[string]any) { m["metadata"].(map[string]any)["name"] = "new-" + role })
	}
	sameTemplate := func(string) any { return templateJSON(t, "../templates/vllm-inference.yaml", nil) }
	render := func(string) any { return map[string]any{"team": "vision"} }
	launch := func(string) any { return map[string]any{"template": "dev-environment", "team": "vision"} }
	wid := stopIDs[A]
	decision := func(string) any { return map[string]any{"reason": "within the quarter's plan"} }
	type row struct {
		method, path string
		body         func(role string) any
		want         map[string]int
	}
	matrix := map[string]row{
		"GET /healthz":                          {"GET", "/healthz", nil, public},
		"GET /readyz":                           {"GET", "/readyz", nil, public},
		"GET /metrics":                          {"GET", "/metrics", nil, public},
		"GET /openapi.yaml":                     {"GET", "/openapi.yaml", nil, public},
		"GET /auth/config":                      {"GET", "/auth/config", nil, public},
		"GET /api/v1/me":                        {"GET", "/api/v1/me", nil, public},
		"GET /api/v1/templates":                 {"GET", "/api/v1/templates", nil, readers},
		"POST /api/v1/templates":                {"POST", "/api/v1/templates", newTemplate, writers(201)},
		"GET /api/v1/templates/{name}":          {"GET", "/api/v1/templates/vllm-inference", nil, readers},
		"PUT /api/v1/templates/{name}":          {"PUT", "/api/v1/templates/vllm-inference", sameTemplate, writers(200)},
		"DELETE /api/v1/templates/{name}":       {"DELETE", "/api/v1/templates/del-{role}", nil, writers(204)},
		"GET /api/v1/templates/{name}/versions": {"GET", "/api/v1/templates/vllm-inference/versions", nil, readers},
		"POST /api/v1/catalog/apply":            {"POST", "/api/v1/catalog/apply", func(string) any { return map[string]any{"files": []any{}, "dryRun": true} }, writers(200)},
		"PUT /api/v1/templates/{name}/versions/{version}/status": {"PUT", "/api/v1/templates/vllm-inference/versions/1/status",
			func(string) any { return map[string]any{"status": "deprecated", "reason": "use version 2"} }, writers(200)},
		// A preview refuses what a launch refuses: only those who may launch in the team.
		"POST /api/v1/templates/{name}/render": {"POST", "/api/v1/templates/dev-environment/render", render, map[string]int{A: 200, P: 403, T: 200, M: 200, V: 403, N: 403, X: 403}},
		"GET /api/v1/gpu-classes":              {"GET", "/api/v1/gpu-classes", nil, readers},
		"GET /api/v1/gpu-classes/{name}":       {"GET", "/api/v1/gpu-classes/L4", nil, readers},
		"GET /api/v1/workloads":                {"GET", "/api/v1/workloads", nil, readers},
		"POST /api/v1/workloads":               {"POST", "/api/v1/workloads", launch, map[string]int{A: 201, P: 403, T: 201, M: 201, V: 403, N: 403, X: 403}},
		"POST /api/v1/workloads/estimate":      {"POST", "/api/v1/workloads/estimate", launch, map[string]int{A: 200, P: 403, T: 200, M: 200, V: 403, N: 403, X: 403}},
		"GET /api/v1/workloads/{id}":           {"GET", "/api/v1/workloads/" + wid, nil, visionReaders},
		"GET /api/v1/workloads/{id}/events":    {"GET", "/api/v1/workloads/" + wid + "/events", nil, visionReaders},
		"GET /api/v1/workloads/{id}/watch":     {"GET", "/api/v1/workloads/" + wid + "/watch", nil, visionReaders},
		// No cluster here: whoever may read the workload learns it has no log.
		"GET /api/v1/workloads/{id}/logs":       {"GET", "/api/v1/workloads/" + wid + "/logs", nil, map[string]int{A: 409, P: 409, T: 409, M: 409, V: 409, N: 403, X: 404}},
		"POST /api/v1/workloads/{id}/stop":      {"POST", "/api/v1/workloads/{stop}/stop", nil, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		"POST /api/v1/workloads/{id}/keepalive": {"POST", "/api/v1/workloads/" + wid + "/keepalive", nil, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		// Every kind starts again; the admin's service is running, so starting it changes nothing.
		"POST /api/v1/workloads/{id}/start":  {"POST", "/api/v1/workloads/" + wid + "/start", nil, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		"DELETE /api/v1/workloads/{id}":      {"DELETE", "/api/v1/workloads/{delete}", nil, map[string]int{A: 204, P: 403, T: 204, M: 403, V: 403, N: 403, X: 404}},
		"GET /api/v1/workloads/{id}/metrics": {"GET", "/api/v1/workloads/" + wid + "/metrics", nil, visionReaders},
		"GET /api/v1/workloads/{id}/advice":  {"GET", "/api/v1/workloads/" + wid + "/advice", nil, visionReaders},
		// No telemetry here: whoever may manage the workload learns there is nothing to apply.
		"POST /api/v1/workloads/{id}/advice/apply": {"POST", "/api/v1/workloads/" + wid + "/advice/apply", func(string) any { return map[string]any{} }, map[string]int{A: 409, P: 403, T: 409, M: 403, V: 403, N: 403, X: 404}},
		"GET /api/v1/advice":                       {"GET", "/api/v1/advice", nil, readers},
		"GET /api/v1/costs":                        {"GET", "/api/v1/costs", nil, readers},
		"GET /api/v1/budgets":                      {"GET", "/api/v1/budgets", nil, readers},
		"GET /api/v1/teams/{team}/report":          {"GET", "/api/v1/teams/vision/report", nil, visionReaders},
		"GET /api/v1/teams/{team}/settings":        {"GET", "/api/v1/teams/vision/settings", nil, visionReaders},
		// Prices, quotas and budgets over the files: the platform's.
		"GET /api/v1/platform/edits":              {"GET", "/api/v1/platform/edits", nil, writers(200)},
		"PUT /api/v1/gpu-classes/{name}/price":    {"PUT", "/api/v1/gpu-classes/L4/price", func(string) any { return map[string]any{"onDemand": 0.9} }, writers(200)},
		"DELETE /api/v1/gpu-classes/{name}/price": {"DELETE", "/api/v1/gpu-classes/L4/price", nil, writers(200)},
		"PUT /api/v1/teams/{team}/quota":          {"PUT", "/api/v1/teams/vision/quota", func(string) any { return map[string]any{"gpus": map[string]any{"L4": 8}} }, writers(200)},
		"DELETE /api/v1/teams/{team}/quota":       {"DELETE", "/api/v1/teams/vision/quota", nil, writers(200)},
		"PUT /api/v1/teams/{team}/budget":         {"PUT", "/api/v1/teams/vision/budget", func(string) any { return map[string]any{"amount": 5000} }, writers(200)},
		"DELETE /api/v1/teams/{team}/budget":      {"DELETE", "/api/v1/teams/vision/budget", nil, writers(200)},
		// A team-admin's: the platform team sets the limits in the templates.
		"PUT /api/v1/teams/{team}/settings": {"PUT", "/api/v1/teams/vision/settings", func(string) any {
			return map[string]any{"templates": map[string]any{"jupyter-notebook": map[string]any{"idleTimeout": "4h"}}}
		}, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		// The workload needs no approval: who may decide learns it is not waiting.
		"POST /api/v1/workloads/{id}/approve": {"POST", "/api/v1/workloads/" + wid + "/approve", decision, map[string]int{A: 409, P: 403, T: 409, M: 403, V: 403, N: 403, X: 404}},
		"POST /api/v1/workloads/{id}/deny":    {"POST", "/api/v1/workloads/" + wid + "/deny", decision, map[string]int{A: 409, P: 403, T: 409, M: 403, V: 403, N: 403, X: 404}},
		"GET /api/v1/templates/{name}/advice": {"GET", "/api/v1/templates/vllm-inference/advice", nil, writers(200)},
		// GPU nodes are the platform's; the test server has no agents, so no node is known.
		"GET /api/v1/nodes":        {"GET", "/api/v1/nodes", nil, map[string]int{A: 200, P: 200, T: 403, M: 403, V: 403, N: 403, X: 403}},
		"GET /api/v1/nodes/{name}": {"GET", "/api/v1/nodes/gpu-node-1", nil, map[string]int{A: 404, P: 404, T: 403, M: 403, V: 403, N: 403, X: 403}},
		// Only a node's agent pushes telemetry, by its ServiceAccount token: no person's credentials count.
		"POST /api/v1/telemetry":            {"POST", "/api/v1/telemetry", func(string) any { return map[string]any{"node": "n1", "readings": []any{}} }, map[string]int{A: 401, P: 401, T: 401, M: 401, V: 401, N: 401, X: 401}},
		"GET /api/v1/images":                {"GET", "/api/v1/images", nil, readers},
		"GET /api/v1/images/{name}":         {"GET", "/api/v1/images/pytorch", nil, readers},
		"POST /api/v1/images/{name}/verify": {"POST", "/api/v1/images/pytorch/verify", func(string) any { return map[string]any{"tag": "25.01-py3"} }, readers},
		// Users are the platform admin's: anyone else, and any narrowed token, is refused.
		"GET /api/v1/users":                       {"GET", "/api/v1/users", nil, onlyAdmin(200)},
		"POST /api/v1/users/{user}/deactivate":    {"POST", "/api/v1/users/" + aliceID + "/deactivate", nil, onlyAdmin(200)},
		"POST /api/v1/users/{user}/reactivate":    {"POST", "/api/v1/users/" + aliceID + "/reactivate", nil, onlyAdmin(200)},
		"GET /api/v1/users/{user}/tokens":         {"GET", "/api/v1/users/" + aliceID + "/tokens", nil, onlyAdmin(200)},
		"DELETE /api/v1/users/{user}/tokens/{id}": {"DELETE", "/api/v1/users/" + aliceID + "/tokens/" + aliceToken.ID, nil, onlyAdmin(204)},
		"GET /api/v1/audit":                       {"GET", "/api/v1/audit", nil, map[string]int{A: 200, P: 403, T: 403, M: 403, V: 403, N: 403, X: 403}},
		// Anyone signed in manages their own tokens; a narrowed token manages none.
		"GET /api/v1/tokens":         {"GET", "/api/v1/tokens", nil, map[string]int{A: 200, P: 200, T: 200, M: 200, V: 200, N: 200, X: 403}},
		"POST /api/v1/tokens":        {"POST", "/api/v1/tokens", func(string) any { return map[string]any{"name": "nb", "expiresInDays": 30} }, map[string]int{A: 201, P: 201, T: 201, M: 201, V: 201, N: 201, X: 403}},
		"DELETE /api/v1/tokens/{id}": {"DELETE", "/api/v1/tokens/{token}", nil, map[string]int{A: 204, P: 204, T: 204, M: 204, V: 204, N: 204, X: 403}},
	}
	// Every route of the spec has a row.
	doc, err := openapi3.NewLoader().LoadFromData(gantry.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			routes = append(routes, method+" "+path)
		}
	}
	sort.Strings(routes)
	for _, r := range routes {
		if _, ok := matrix[r]; !ok {
			t.Errorf("route %s has no row in the role matrix", r)
		}
	}
	if len(matrix) != len(routes) {
		t.Errorf("%d rows for %d routes", len(matrix), len(routes))
	}
	for _, r := range routes {
		row := matrix[r]
		for _, ro := range roles {
			path := strings.NewReplacer("{role}", ro.name, "{stop}", stopIDs[ro.name], "{delete}", delIDs[ro.name], "{token}", tokenIDs[ro.name]).Replace(row.path)
			var body any
			if row.body != nil {
				body = row.body(ro.name)
			}
			got := e.doAs(ro.name, row.method, path, body)
			if want := row.want[ro.name]; got != want {
				t.Errorf("%s as %s: %d, want %d", r, ro.name, got, want)
			}
		}
	}
}

// TestTeamScopes: a member sees and manages what is theirs in their team, and
// another team's workload does not exist for them.
func TestTeamScopes(t *testing.T) {
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		if r.Header.Get("X-Test-Role") == "member" {
			return identity.Identity{Subject: "ann", Groups: []string{"ml-vision"}}, nil
		}
		return identity.Identity{Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
	})
	var nlp, own struct{ ID string }
	e.do("POST", "/api/v1/workloads", map[string]any{"template": "vllm-inference", "team": "nlp"}, &nlp)
	if s := e.doAs("member", "POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "vision"}); s != 201 {
		t.Fatalf("member launch: %d", s)
	}
	var list struct{ Items []struct{ ID, Team string } }
	e.doAsInto("member", "GET", "/api/v1/workloads", &list)
	if len(list.Items) != 1 || list.Items[0].Team != "vision" {
		t.Fatalf("member lists %+v, want only their team's", list.Items)
	}
	own.ID = list.Items[0].ID
	if s := e.doAs("member", "GET", "/api/v1/workloads/"+nlp.ID, nil); s != 404 {
		t.Errorf("another team's workload: %d, want 404", s)
	}
	if s := e.doAs("member", "GET", "/api/v1/workloads?team=nlp", nil); s != 200 {
		t.Errorf("listing another team: %d", s)
	}
	if s := e.doAs("member", "POST", "/api/v1/workloads", map[string]any{"template": "vllm-inference", "team": "nlp"}); s != 403 {
		t.Errorf("launch in another team: %d, want 403", s)
	}
	if s := e.doAs("member", "POST", "/api/v1/workloads", map[string]any{"template": "vllm-inference", "team": "vision", "gpu": map[string]any{"class": "H200-141GB"}}); s != 403 {
		t.Errorf("a GPU class the team may not use: %d, want 403", s)
	}
	if s := e.doAs("member", "POST", "/api/v1/workloads/"+own.ID+"/stop", nil); s != 200 {
		t.Errorf("member stopping their own workload: %d, want 200", s)
	}
}

// doAs sends a request as a role of the matrix and returns the status.
func (e *env) doAs(role, method, path string, body any) int {
	e.t.Helper()
	return e.request(role, method, path, body, nil)
}

func (e *env) doAsInto(role, method, path string, out any) int {
	e.t.Helper()
	return e.request(role, method, path, nil, out)
}
