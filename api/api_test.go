package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/template"
)

type env struct {
	t      *testing.T
	url    string
	files  []template.File
	dbPath string
}

// newEnv serves Gantry, whole, through the one test harness (servertest, on
// server.New) with a fresh SQLite database and the starter catalog; identify
// stands for the OpenID provider: it decides who each bearer token is.
func newEnv(t *testing.T, identify func(*http.Request) (identity.Identity, error)) *env {
	t.Helper()
	return newEnvWith(t, server.Overrides{Identify: identify})
}

// newEnvWith is newEnv with any of the parts outside Gantry stood in for.
func newEnvWith(t *testing.T, ov server.Overrides) *env {
	t.Helper()
	_, files, err := template.LoadCatalog("../templates")
	if err != nil {
		t.Fatal(err)
	}
	g := servertest.WithOverrides(t, ov, func(c *config.Config) { c.MaxBodyBytes = 64 << 10 })
	return &env{t: t, url: g.URL, files: files, dbPath: string(g.Config.Database.DSN)}
}

// alice is a platform admin.
func alice(*http.Request) (identity.Identity, error) {
	return identity.Identity{Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
}

// do sends a request (as the setup identity) and decodes a JSON answer into
// out (when not nil).
func (e *env) do(method, path string, body any, out any) (int, http.Header) {
	e.t.Helper()
	var h http.Header
	status := e.send("", method, path, body, out, &h)
	return status, h
}

func (e *env) request(role, method, path string, body, out any) int {
	e.t.Helper()
	var h http.Header
	return e.send(role, method, path, body, out, &h)
}

// bodyReader encodes a request body: nil, a raw string, or JSON.
func bodyReader(body any) io.Reader {
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		return bytes.NewReader(j)
	}
}

func (e *env) send(role, method, path string, body, out any, header *http.Header) int {
	e.t.Helper()
	r := bodyReader(body)
	req, _ := http.NewRequest(method, e.url+path, r)
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if role != "" {
		req.Header.Set("X-Test-Role", role)
	}
	// A stand-in bearer JWT: the test's Identify decides who it is.
	req.Header.Set("Authorization", "Bearer test.jwt.token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A stream stays open: its first event's data is the answer.
		data := firstEvent(e.t, resp.Body)
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				e.t.Fatalf("%s %s: %v in %s", method, path, err, data)
			}
		}
		*header = resp.Header
		return resp.StatusCode
	}
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	*header = resp.Header
	return resp.StatusCode
}

// firstEvent reads a server-sent event stream up to its first event and
// returns that event's data.
func firstEvent(t *testing.T, r io.Reader) []byte {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return []byte(d)
		}
	}
	t.Fatalf("the stream ended without an event: %v", sc.Err())
	return nil
}

type problem struct {
	Type, Title, Detail, Instance string
	Status                        int
	Errors                        []struct{ Field, Detail string }
}

func (p problem) fields() map[string]string {
	m := map[string]string{}
	for _, e := range p.Errors {
		m[e.Field] = e.Detail
	}
	return m
}

func templateJSON(t *testing.T, path string, edit func(map[string]any)) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	return m
}

func TestProblemResponses(t *testing.T) {
	e := newEnv(t, alice)
	tests := []struct {
		name, method, path string
		body               any
		status             int
		fields             []string // field paths that must be reported
	}{
		{"unknown field and wrong type at once", "POST", "/api/v1/workloads",
			`{"template":"vllm-inference","team":"vision","color":"red","gpu":{"count":"two"}}`, 400, []string{"color", "gpu.count"}},
		{"malformed JSON", "POST", "/api/v1/workloads", `{"template":`, 400, []string{"body"}},
		{"odd team name", "POST", "/api/v1/workloads", map[string]any{"template": "vllm-inference", "team": "../../etc"}, 400, []string{"team"}},
		{"over-long template name", "GET", "/api/v1/templates/" + strings.Repeat("a", 41), nil, 400, []string{"path.name"}},
		{"path traversal", "GET", "/api/v1/templates/..%2F..%2Fetc%2Fpasswd", nil, 400, []string{"path.name"}},
		{"bad query", "GET", "/api/v1/workloads?limit=9999&status=Nope", nil, 400, []string{"query.limit", "query.status"}},
		{"domain checks, all at once", "POST", "/api/v1/workloads",
			map[string]any{"template": "jupyter-notebook", "team": "vision", "gpu": map[string]any{"class": "L4", "migProfile": "1g.10gb", "count": 2}, "parameters": map[string]any{"memory": "1Ti", "x": 1}},
			422, []string{"gpu.migProfile", "gpu.count", "parameters.memory", "parameters.x"}},
		{"missing template", "POST", "/api/v1/workloads", map[string]any{"template": "nope", "team": "vision"}, 404, nil},
		{"missing workload", "GET", "/api/v1/workloads/abcdefghij", nil, 404, nil},
		{"missing GPU class", "GET", "/api/v1/gpu-classes/V100", nil, 404, nil},
		{"template exists", "POST", "/api/v1/templates", templateJSON(t, "../templates/vllm-inference.yaml", nil), 409, nil},
		{"invalid template: same checks as files", "POST", "/api/v1/templates", templateJSON(t, "../templates/vllm-inference.yaml", func(m map[string]any) {
			m["metadata"].(map[string]any)["name"] = "vllm-2"
			spec := m["spec"].(map[string]any)
			spec["gpu"].(map[string]any)["classes"] = []any{"H100-80GB", "V100"}
			spec["args"] = []any{"{{nope}}"}
		}), 422, []string{"spec.gpu.classes[1]", "spec.args[0]"}},
		{"unknown field in template", "POST", "/api/v1/templates", templateJSON(t, "../templates/vllm-inference.yaml", func(m map[string]any) {
			m["spec"].(map[string]any)["replicas"] = 3
		}), 400, []string{"spec.replicas"}},
		{"name mismatch on update", "PUT", "/api/v1/templates/pytorch-train", templateJSON(t, "../templates/vllm-inference.yaml", nil), 422, []string{"metadata.name"}},
		{"body too large", "POST", "/api/v1/workloads", `{"template":"` + strings.Repeat("a", 70<<10) + `"}`, 413, nil},
		{"no such route", "GET", "/api/v1/nothing", nil, 404, nil},
		{"wrong method", "PATCH", "/api/v1/workloads", nil, 405, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p problem
			status, h := e.do(tc.method, tc.path, tc.body, &p)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %+v", status, tc.status, p)
			}
			if ct := h.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("content type %q", ct)
			}
			if p.Status != status || p.Title == "" || p.Type == "" || !strings.HasPrefix(p.Instance, "urn:gantry:request:") {
				t.Errorf("not a problem document: %+v", p)
			}
			got := p.fields()
			for _, f := range tc.fields {
				if _, ok := got[f]; !ok {
					t.Errorf("no error for field %q in %+v", f, p.Errors)
				}
			}
			for _, fe := range p.Errors {
				if strings.Contains(fe.Detail, "Schema:") || strings.Contains(fe.Detail, "goroutine") {
					t.Errorf("internals leaked: %q", fe.Detail)
				}
			}
		})
	}
	// Nothing above wrote anything.
	var list struct{ Items []any }
	e.do("GET", "/api/v1/workloads", nil, &list)
	if len(list.Items) != 0 {
		t.Fatalf("%d workloads after refused requests", len(list.Items))
	}
	var tl struct{ Items []struct{ Name string } }
	e.do("GET", "/api/v1/templates", nil, &tl)
	if len(tl.Items) != len(e.files) {
		t.Fatalf("%d templates after refused requests, want %d", len(tl.Items), len(e.files))
	}
}

func TestTemplateLifecycle(t *testing.T) {
	e := newEnv(t, alice)
	doc := templateJSON(t, "../templates/dev-environment.yaml", func(m map[string]any) {
		m["metadata"].(map[string]any)["name"] = "dev-h100"
		m["spec"].(map[string]any)["gpu"].(map[string]any)["defaultClass"] = "H100-80GB"
	})
	var v struct {
		Name, Digest, CreatedBy string
		Version                 int
		Template                map[string]any
	}
	if s, _ := e.do("POST", "/api/v1/templates", doc, &v); s != 201 || v.Version != 1 || v.CreatedBy != "alice" {
		t.Fatalf("create: %d %+v", s, v)
	}
	doc["metadata"].(map[string]any)["title"] = "Dev box on H100"
	if s, _ := e.do("PUT", "/api/v1/templates/dev-h100", doc, &v); s != 200 || v.Version != 2 {
		t.Fatalf("update: %d %+v", s, v)
	}
	if s, _ := e.do("PUT", "/api/v1/templates/dev-h100", doc, &v); s != 200 || v.Version != 2 {
		t.Fatalf("unchanged update made a version: %d %+v", s, v)
	}
	var h struct{ Items []struct{ Version int } }
	if s, _ := e.do("GET", "/api/v1/templates/dev-h100/versions", nil, &h); s != 200 || len(h.Items) != 2 {
		t.Fatalf("history: %d %+v", s, h)
	}
	var w struct {
		ID, Status      string
		TemplateVersion int
	}
	if s, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "dev-h100", "team": "vision", "templateVersion": 1}, &w); s != 201 || w.TemplateVersion != 1 {
		t.Fatalf("launch of version 1: %d %+v", s, w)
	}
	if s, _ := e.do("DELETE", "/api/v1/templates/dev-h100", nil, nil); s != 204 {
		t.Fatalf("delete: %d", s)
	}
	if s, _ := e.do("GET", "/api/v1/templates/dev-h100", nil, nil); s != 404 {
		t.Fatalf("get after delete: %d", s)
	}
	if s, _ := e.do("GET", "/api/v1/templates/dev-h100?version=1", nil, &v); s != 200 || v.Version != 1 {
		t.Fatalf("old version after delete: %d", s)
	}
	if s, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "dev-h100", "team": "vision", "templateVersion": 1}, nil); s != 404 {
		t.Fatalf("launch of a deleted template: %d, want 404", s)
	}
}

func TestWorkloadsAndPreview(t *testing.T) {
	e := newEnv(t, alice)
	var r struct {
		Template        string
		TemplateVersion int
		Hash            string
		Objects         []map[string]any
	}
	req := map[string]any{"team": "vision", "gpu": map[string]any{"class": "H100-80GB", "migProfile": "3g.40gb"}, "parameters": map[string]any{"input": "p.jsonl"}}
	if s, _ := e.do("POST", "/api/v1/templates/batch-inference/render", req, &r); s != 200 {
		t.Fatalf("render: %d", s)
	}
	if len(r.Objects) != 3 || r.Objects[1]["kind"] != "Job" || r.Objects[2]["kind"] != "NetworkPolicy" || r.Hash == "" {
		t.Fatalf("render result: %+v", r)
	}
	j, _ := json.Marshal(r.Objects[1])
	if !strings.Contains(string(j), `"nvidia.com/mig-3g.40gb":"1"`) {
		t.Errorf("MIG resource missing: %s", j)
	}
	var w struct {
		ID, Name, Owner, Status, ObjectsHash string
		Gpu                                  struct {
			Class      string
			Count      int
			MigProfile string
		}
		Parameters map[string]string
	}
	launch := map[string]any{"template": "batch-inference", "team": "vision", "gpu": req["gpu"], "parameters": req["parameters"]}
	if s, _ := e.do("POST", "/api/v1/workloads", launch, &w); s != 201 {
		t.Fatalf("launch: %d", s)
	}
	if w.Owner != "alice" || w.Status != "Pending" || w.Gpu.MigProfile != "3g.40gb" || w.Parameters["input"] != "p.jsonl" || w.Parameters["model"] == "" || w.Name != "batch-inference-"+w.ID {
		t.Fatalf("workload: %+v", w)
	}
	for range 4 {
		e.do("POST", "/api/v1/workloads", map[string]any{"template": "vllm-inference", "team": "nlp"}, nil)
	}
	var page struct {
		Items      []struct{ ID, Team string }
		NextCursor string
	}
	e.do("GET", "/api/v1/workloads?limit=3", nil, &page)
	if len(page.Items) != 3 || page.NextCursor == "" {
		t.Fatalf("page 1: %+v", page)
	}
	cursor := page.NextCursor
	page.NextCursor = ""
	e.do("GET", "/api/v1/workloads?limit=3&cursor="+cursor, nil, &page)
	if len(page.Items) != 2 || page.NextCursor != "" {
		t.Fatalf("page 2: %+v", page)
	}
	e.do("GET", "/api/v1/workloads?team=nlp", nil, &page)
	if len(page.Items) != 4 {
		t.Fatalf("team filter: %d", len(page.Items))
	}
	if s, _ := e.do("DELETE", "/api/v1/workloads/"+w.ID, nil, nil); s != 204 {
		t.Fatalf("delete: %d", s)
	}
	e.do("GET", "/api/v1/workloads/"+w.ID, nil, &w)
	if w.Status != "Deleted" {
		t.Fatalf("status after delete: %s", w.Status)
	}
}

func TestGPUClassesAndOperations(t *testing.T) {
	e := newEnv(t, alice)
	var c struct {
		Name        string
		MigProfiles []struct {
			Name, Resource            string
			ComputeShare, MemoryShare float64
		}
		Price struct {
			OnDemand       float64
			Currency, Unit string
		}
		PriceHistory []struct {
			Since string
			Price struct{ OnDemand float64 }
		}
	}
	if s, _ := e.do("GET", "/api/v1/gpu-classes/H100-80GB", nil, &c); s != 200 || len(c.MigProfiles) != 6 {
		t.Fatalf("%d %+v", s, c)
	}
	// The price as it stood when Gantry started is its history's first row.
	if c.Price.Currency != "USD" || c.Price.Unit != "gpu-hour" || len(c.PriceHistory) != 1 || c.PriceHistory[0].Price.OnDemand != c.Price.OnDemand || c.PriceHistory[0].Since == "" {
		t.Errorf("price %+v, history %+v", c.Price, c.PriceHistory)
	}
	p := c.MigProfiles[0]
	if p.Name != "1g.10gb" || p.Resource != "nvidia.com/mig-1g.10gb" || p.ComputeShare != 1.0/7 || p.MemoryShare != 1.0/8 {
		t.Errorf("profile %+v", p)
	}
	var ready struct{ Status string }
	if s, _ := e.do("GET", "/readyz", nil, &ready); s != 200 || ready.Status != "ready" {
		t.Fatalf("readyz: %d %+v", s, ready)
	}
	resp, err := http.Get(e.url + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(body, gantry.OpenAPI) {
		t.Error("served spec differs from openapi.yaml")
	}
}

type downDB struct{}

func (downDB) Ping(context.Context) error {
	return errors.New("dial tcp 10.0.0.5:5432: connection refused")
}

func TestNotReady(t *testing.T) {
	e := newEnvWith(t, server.Overrides{Checks: []api.Check{{Name: "database", Pinger: downDB{}}}})
	resp, err := http.Get(e.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"not ready"`) || !strings.Contains(string(body), "database does not answer") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), "10.0.0.5") {
		t.Errorf("readiness leaks the database address: %s", body)
	}
}

func TestUnauthenticated(t *testing.T) {
	e := newEnv(t, func(*http.Request) (identity.Identity, error) { return identity.Identity{}, authn.ErrNoCredentials })
	for _, path := range []string{"/api/v1/templates", "/api/v1/workloads", "/api/v1/gpu-classes"} {
		if s, h := e.do("GET", path, nil, nil); s != 401 || h.Get("WWW-Authenticate") != `Bearer realm="gantry"` {
			t.Errorf("GET %s: %d %q, want 401 with a Bearer challenge", path, s, h.Get("WWW-Authenticate"))
		}
	}
	e2 := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{}, errors.New("signature by key k9 does not verify")
	})
	var p problem
	for range 2 { // the same answer every time: no state carried between requests
		s, h := e2.do("GET", "/api/v1/templates", nil, &p)
		if s != 401 || h.Get("WWW-Authenticate") != `Bearer realm="gantry", error="invalid_token"` {
			t.Errorf("bad token: %d %q", s, h.Get("WWW-Authenticate"))
		}
	}
	if strings.Contains(p.Detail+p.Title, "k9") {
		t.Errorf("internal detail in the answer: %+v", p)
	}
	e3 := newEnv(t, func(*http.Request) (identity.Identity, error) { return identity.Identity{}, authn.ErrNoCredentials })
	if s, h := e3.do("GET", "/api/v1/templates", nil, nil); s != 401 || h.Get("WWW-Authenticate") != `Bearer realm="gantry"` {
		t.Errorf("no token: %d %q", s, h.Get("WWW-Authenticate"))
	}
	if s, _ := e.do("GET", "/healthz", nil, nil); s != 200 {
		t.Errorf("healthz needs no identity: %d", s)
	}
}

// TestSpecDescribesTemplates: every starter template, as the Go structs write it,
// validates against the spec's TemplateDocument schema, so the spec and the
// template package cannot drift apart.
func TestSpecDescribesTemplates(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(gantry.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	schema := doc.Components.Schemas["TemplateDocument"].Value
	classes, _ := gpu.LoadFile("../templates/gpu-classes.yaml")
	files, _ := template.LoadDir("../templates", classes, nil)
	for _, f := range files {
		j, _ := json.Marshal(f.Template)
		var v any
		json.Unmarshal(j, &v)
		if err := schema.VisitJSON(v); err != nil {
			t.Errorf("%s: %v", f.Path, err)
		}
	}
}

func TestPortalServed(t *testing.T) {
	e := newEnv(t, alice)
	for path, want := range map[string]string{"/": `id="sign-in"`, "/portal.js": "textContent"} {
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
		if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: no CSP", path)
		}
	}
}

// TestPreviewRefusesWhatLaunchRefuses: for a member of team vision, a preview
// in another team, or of a GPU class the team may not use, is refused as the
// launch is; what the launch allows, the preview allows.
func TestPreviewRefusesWhatLaunchRefuses(t *testing.T) {
	e := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"ml-vision"}}, nil
	})
	for _, c := range []struct {
		name string
		body map[string]any
		want int
	}{
		{"own team", map[string]any{"team": "vision"}, 0},
		{"another team", map[string]any{"team": "nlp"}, 403},
		{"a class the team may not use", map[string]any{"team": "vision", "gpu": map[string]any{"class": "H200-141GB"}}, 403},
	} {
		launch := map[string]any{"template": "pytorch-train"}
		for k, v := range c.body {
			launch[k] = v
		}
		ls := e.request("", "POST", "/api/v1/workloads", launch, nil)
		ps := e.request("", "POST", "/api/v1/templates/pytorch-train/render", c.body, nil)
		if (ls == 201) != (ps == 200) || (c.want != 0 && (ls != c.want || ps != c.want)) {
			t.Errorf("%s: launch %d, preview %d; want the same answer (%d)", c.name, ls, ps, c.want)
		}
	}
}

// TestTemplateVersionStatus: the platform team deprecates a version (launches
// warned) and revokes it (launches, previews and starts refused, its
// workloads flagged); a revocation is final.
func TestTemplateVersionStatus(t *testing.T) {
	e := newEnv(t, alice)
	doc := templateJSON(t, "../templates/dev-environment.yaml", func(m map[string]any) { m["metadata"].(map[string]any)["name"] = "ide" })
	if s, _ := e.do("POST", "/api/v1/templates", doc, nil); s != 201 {
		t.Fatalf("create: %d", s)
	}
	doc["metadata"].(map[string]any)["title"] = "IDE, fixed"
	if s, _ := e.do("PUT", "/api/v1/templates/ide", doc, nil); s != 200 {
		t.Fatalf("update: %d", s)
	}
	launch := map[string]any{"template": "ide", "templateVersion": 1, "team": "vision"}
	var w struct {
		ID, TemplateStatus, TemplateStatusReason string
	}
	if s, _ := e.do("POST", "/api/v1/workloads", launch, &w); s != 201 || w.TemplateStatus != "" {
		t.Fatalf("launch of an active version: %d %+v", s, w)
	}
	var p problem
	if s, _ := e.do("PUT", "/api/v1/templates/ide/versions/1/status", map[string]any{"status": "deprecated"}, &p); s != 422 || p.fields()["reason"] == "" {
		t.Fatalf("deprecation without a reason: %d %+v", s, p)
	}
	var v struct{ Status, StatusReason string }
	if s, _ := e.do("PUT", "/api/v1/templates/ide/versions/1/status", map[string]any{"status": "deprecated", "reason": "use version 2"}, &v); s != 200 || v.Status != "deprecated" {
		t.Fatalf("deprecate: %d %+v", s, v)
	}
	var w2 struct{ ID, TemplateStatus, TemplateStatusReason string }
	if s, _ := e.do("POST", "/api/v1/workloads", launch, &w2); s != 201 || w2.TemplateStatus != "deprecated" || w2.TemplateStatusReason != "use version 2" {
		t.Fatalf("launch of a deprecated version: %d %+v", s, w2)
	}
	if s, _ := e.do("POST", "/api/v1/workloads/"+w.ID+"/stop", nil, nil); s != 200 {
		t.Fatalf("stop: %d", s)
	}
	if s, _ := e.do("PUT", "/api/v1/templates/ide/versions/1/status", map[string]any{"status": "revoked", "reason": "CVE-2026-0001 in the image"}, &v); s != 200 || v.Status != "revoked" {
		t.Fatalf("revoke: %d %+v", s, v)
	}
	p = problem{}
	if s, _ := e.do("POST", "/api/v1/workloads", launch, &p); s != 422 || !strings.Contains(p.fields()["templateVersion"], "revoked (CVE-2026-0001 in the image)") {
		t.Fatalf("launch of a revoked version: %d %+v", s, p)
	}
	if s, _ := e.do("POST", "/api/v1/templates/ide/render", map[string]any{"team": "vision", "templateVersion": 1}, nil); s != 422 {
		t.Fatalf("preview of a revoked version: %d, want 422 as its launch", s)
	}
	if s, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "ide", "team": "vision"}, nil); s != 201 {
		t.Fatalf("launch of the live (fixed) version: %d", s)
	}
	if s, _ := e.do("GET", "/api/v1/workloads/"+w.ID, nil, &w); s != 200 || w.TemplateStatus != "revoked" {
		t.Fatalf("a workload of the revoked version is not flagged: %d %+v", s, w)
	}
	var list struct {
		Items []struct{ ID, TemplateStatus string }
	}
	e.do("GET", "/api/v1/workloads?template=ide", nil, &list)
	flagged := 0
	for _, it := range list.Items {
		if it.TemplateStatus == "revoked" {
			flagged++
		}
	}
	if flagged != 2 {
		t.Errorf("%d of the listed workloads flagged revoked, want 2: %+v", flagged, list.Items)
	}
	p = problem{}
	if s, _ := e.do("POST", "/api/v1/workloads/"+w.ID+"/start", nil, &p); s != 409 || !strings.Contains(p.Detail, "revoked") {
		t.Fatalf("start of a workload of a revoked version: %d %+v", s, p)
	}
	if s, _ := e.do("PUT", "/api/v1/templates/ide/versions/1/status", map[string]any{"status": "active"}, nil); s != 409 {
		t.Fatalf("un-revoking: %d, want 409", s)
	}
	if s, _ := e.do("PUT", "/api/v1/templates/ide/versions/9/status", map[string]any{"status": "deprecated", "reason": "x"}, nil); s != 404 {
		t.Fatalf("no such version: %d, want 404", s)
	}
}
