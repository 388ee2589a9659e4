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
	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
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
	api    *client.ClientWithResponses // the typed client as the setup identity
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
	g := servertest.WithOverrides(t, ov, func(c *config.Config) {
		c.MaxBodyBytes = 64 << 10
		c.Runs.ReportURL = "http://gantry.gantry-system.svc:8080" // how pods reach it: trials need it
	})
	return envAt(t, g.URL, files, string(g.Config.Database.DSN))
}

// envAt is the env of a Gantry serving at url.
func envAt(t *testing.T, url string, files []template.File, dbPath string) *env {
	e := &env{t: t, url: url, files: files, dbPath: dbPath}
	e.api = e.as("")
	return e
}

// alice is a platform admin.
func alice(*http.Request) (identity.Identity, error) {
	return identity.Identity{Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
}

// standIn is the bearer JWT the tests present: their Identify decides who
// it is.
const standIn = "test.jwt.token"

// newClient is the typed client (api/client) of the API at url: every
// request presents bearer (none when empty) and, when role is set,
// X-Test-Role, which the tests' Identify reads to choose the caller.
func newClient(url, bearer, role string) *client.ClientWithResponses {
	var opts []client.ClientOption
	if role != "" {
		opts = append(opts, client.WithRequestEditorFn(servertest.Header("X-Test-Role", role)))
	}
	return servertest.Client(url, bearer, opts...)
}

// as is the typed client of e's server as role ("" for the setup identity),
// with the stand-in bearer JWT.
func (e *env) as(role string) *client.ClientWithResponses {
	return newClient(e.url, standIn, role)
}

// answer is what every generated response of the API's routes has.
type answer interface {
	StatusCode() int
	ContentType() string
	GetBody() []byte
	GetApplicationproblemJSONDefault() *model.Problem
}

// call is one request of a table: a typed call, or raw where the typed
// client cannot send it.
type call func(ctx context.Context, c *client.ClientWithResponses) (answer, error)

// rawAnswer is the answer to a request sent by hand, read as the generated
// responses are.
type rawAnswer struct {
	resp *http.Response
	body []byte
}

func (r rawAnswer) StatusCode() int     { return r.resp.StatusCode }
func (r rawAnswer) ContentType() string { return r.resp.Header.Get("Content-Type") }
func (r rawAnswer) GetBody() []byte     { return r.body }
func (r rawAnswer) GetApplicationproblemJSONDefault() *model.Problem {
	var p model.Problem
	if !strings.Contains(r.ContentType(), "json") || json.Unmarshal(r.body, &p) != nil {
		return nil
	}
	return &p
}

// raw sends a request by hand, as the setup identity, with a JSON body
// (none when empty). It is only for what the typed client cannot send: a
// route or a method the spec lacks. (A body no generated type can hold
// goes through the typed operation's WithBody variant.)
func (e *env) raw(method, path, body string) rawAnswer {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.url+path, r)
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+standIn)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return rawAnswer{resp: resp, body: data}
}

// rawCall is raw as a table's call.
func (e *env) rawCall(method, path, body string) call {
	return func(context.Context, *client.ClientWithResponses) (answer, error) {
		return e.raw(method, path, body), nil
	}
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

// problem is a problem document (model.Problem) with its optional fields
// flattened, as the assertions read it.
type problem struct {
	Type, Title, Detail, Instance string
	Status                        int
	Errors                        []model.FieldError
}

// problemOf flattens a typed answer's problem document (zero when none).
func problemOf(p *model.Problem) problem {
	if p == nil {
		return problem{}
	}
	return problem{Type: p.Type, Title: p.Title, Detail: servertest.Deref(p.Detail), Instance: servertest.Deref(p.Instance), Status: p.Status, Errors: servertest.Deref(p.Errors)}
}

func (p problem) fields() map[string]string {
	m := map[string]string{}
	for _, e := range p.Errors {
		m[e.Field] = e.Detail
	}
	return m
}

// templateDoc reads a template file as the API's TemplateDocument, strictly
// (a field the type lacks fails the test), changed by edit.
func templateDoc(t *testing.T, path string, edit func(*model.TemplateDocument)) model.TemplateDocument {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc model.TemplateDocument
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		t.Fatalf("%s as a TemplateDocument: %v", path, err)
	}
	if edit != nil {
		edit(&doc)
	}
	return doc
}

// rawJSON is v as JSON changed by edit on its generic form: a body with
// what no generated type can hold (an unknown field).
func rawJSON(t *testing.T, v any, edit func(map[string]any)) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, _ = json.Marshal(m)
	return string(b)
}

func TestProblemResponses(t *testing.T) {
	e := newEnv(t, alice)
	ctx := t.Context()
	vllm := templateDoc(t, "../templates/vllm-inference.yaml", nil)
	launchBody := func(body string) call {
		return func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.CreateWorkloadWithBodyWithResponse(ctx, nil, "application/json", strings.NewReader(body))
		}
	}
	tests := []struct {
		name   string
		send   call
		status int
		fields []string // field paths that must be reported
	}{
		// raw body: an unknown field and a string for a number, which no generated type can hold
		{"unknown field and wrong type at once", launchBody(`{"template":"vllm-inference","team":"vision","color":"red","gpu":{"count":"two"}}`), 400, []string{"color", "gpu.count"}},
		// raw body: malformed on purpose
		{"malformed JSON", launchBody(`{"template":`), 400, []string{"body"}},
		{"odd team name", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "vllm-inference", Team: "../../etc"})
		}, 400, []string{"team"}},
		{"over-long template name", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.GetTemplateWithResponse(ctx, strings.Repeat("a", 41), nil)
		}, 400, []string{"path.name"}},
		{"path traversal", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.GetTemplateWithResponse(ctx, "../../etc/passwd", nil) // sent escaped: ..%2F..%2Fetc%2Fpasswd
		}, 400, []string{"path.name"}},
		{"bad query", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Limit: new(9999), Status: new(model.WorkloadStatus("Nope"))})
		}, 400, []string{"query.limit", "query.status"}},
		{"domain checks, all at once", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "jupyter-notebook", Team: "vision",
				Gpu: &model.GPUChoice{Class: new("L4"), MigProfile: new("1g.10gb"), Count: new(2)}, Parameters: &model.Parameters{"memory": "1Ti", "x": 1}})
		}, 422, []string{"gpu.migProfile", "gpu.count", "parameters.memory", "parameters.x"}},
		{"missing template", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "nope", Team: "vision"})
		}, 404, nil},
		{"missing workload", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.GetWorkloadWithResponse(ctx, "abcdefghij")
		}, 404, nil},
		{"missing GPU class", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.GetGPUClassWithResponse(ctx, "V100")
		}, 404, nil},
		{"template exists", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.CreateTemplateWithResponse(ctx, vllm)
		}, 409, nil},
		{"invalid template: same checks as files", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.CreateTemplateWithResponse(ctx, templateDoc(t, "../templates/vllm-inference.yaml", func(d *model.TemplateDocument) {
				d.Metadata.Name = "vllm-2"
				d.Spec.Gpu.Classes = []string{"H100-80GB", "V100"}
				d.Spec.Args = &[]string{"{{nope}}"}
			}))
		}, 422, []string{"spec.gpu.classes[1]", "spec.args[0]"}},
		// raw body: a field TemplateDocument does not have
		{"unknown field in template", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.CreateTemplateWithBodyWithResponse(ctx, "application/json", strings.NewReader(rawJSON(t, vllm, func(m map[string]any) {
				m["spec"].(map[string]any)["replicas"] = 3
			})))
		}, 400, []string{"spec.replicas"}},
		{"name mismatch on update", func(ctx context.Context, c *client.ClientWithResponses) (answer, error) {
			return c.UpdateTemplateWithResponse(ctx, "pytorch-train", nil, vllm)
		}, 422, []string{"metadata.name"}},
		// raw body: past the limit (64 KiB here)
		{"body too large", launchBody(`{"template":"` + strings.Repeat("a", 70<<10) + `"}`), 413, nil},
		// raw: a route and a method the spec does not have
		{"no such route", e.rawCall("GET", "/api/v1/nothing", ""), 404, nil},
		{"wrong method", e.rawCall("PATCH", "/api/v1/workloads", ""), 405, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := servertest.Must(tc.send(t.Context(), e.api))(t)
			status, p := r.StatusCode(), problemOf(r.GetApplicationproblemJSONDefault())
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, r.GetBody())
			}
			if ct := r.ContentType(); ct != "application/problem+json" {
				t.Errorf("content type %q", ct)
			}
			if p.Status != status || p.Title == "" || p.Type == "" || !strings.HasPrefix(p.Instance, "urn:gantry:request:") {
				t.Errorf("not a problem document: %s", r.GetBody())
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
	if list := servertest.Deref(servertest.Must(e.api.ListWorkloadsWithResponse(ctx, nil))(t).JSON200); len(list.Items) != 0 {
		t.Fatalf("%d workloads after refused requests", len(list.Items))
	}
	if tl := servertest.Deref(servertest.Must(e.api.ListTemplatesWithResponse(ctx))(t).JSON200); len(tl.Items) != len(e.files) {
		t.Fatalf("%d templates after refused requests, want %d", len(tl.Items), len(e.files))
	}
}

func TestTemplateLifecycle(t *testing.T) {
	e := newEnv(t, alice)
	ctx := t.Context()
	doc := templateDoc(t, "../templates/dev-environment.yaml", func(d *model.TemplateDocument) {
		d.Metadata.Name = "dev-h100"
		d.Spec.Gpu.DefaultClass = "H100-80GB"
	})
	created := servertest.Must(e.api.CreateTemplateWithResponse(ctx, doc))(t)
	if v := servertest.Deref(created.JSON201); created.StatusCode() != 201 || v.Version != 1 || v.CreatedBy != "alice" {
		t.Fatalf("create: %d %s", created.StatusCode(), created.Body)
	}
	doc.Metadata.Title = "Dev box on H100"
	updated := servertest.Must(e.api.UpdateTemplateWithResponse(ctx, "dev-h100", &model.UpdateTemplateParams{IfMatch: new(`"v1"`)}, doc))(t)
	if updated.StatusCode() != 200 || servertest.Deref(updated.JSON200).Version != 2 {
		t.Fatalf("update: %d %s", updated.StatusCode(), updated.Body)
	}
	if g := servertest.Must(e.api.GetTemplateWithResponse(ctx, "dev-h100", nil))(t); g.HTTPResponse.Header.Get("ETag") != `"v2"` {
		t.Fatalf("the live version's ETag: %q, want \"v2\"", g.HTTPResponse.Header.Get("ETag"))
	}
	// Another editor's save made from version 1, now that version 2 is
	// live: 412, nothing stored (nor through the editor's apply, nor a delete).
	other := doc
	other.Metadata.Title = "Someone else's title"
	if r := servertest.Must(e.api.UpdateTemplateWithResponse(ctx, "dev-h100", &model.UpdateTemplateParams{IfMatch: new("1")}, other))(t); r.StatusCode() != 412 {
		t.Fatalf("a stale update: %d %s", r.StatusCode(), r.Body)
	}
	src, err := yaml.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	apply := model.TemplateSetRequest{Files: []struct {
		Content string `json:"content"`
		Path    string `json:"path"`
	}{{Content: string(src), Path: "dev-h100.yaml"}}, Expect: &map[string]int{"dev-h100": 1}}
	if r := servertest.Must(e.api.ApplyTemplatesWithResponse(ctx, apply))(t); r.StatusCode() != 412 {
		t.Fatalf("a stale apply: %d %s", r.StatusCode(), r.Body)
	}
	if r := servertest.Must(e.api.DeleteTemplateWithResponse(ctx, "dev-h100", &model.DeleteTemplateParams{IfMatch: new(`"v1"`)}))(t); r.StatusCode() != 412 {
		t.Fatalf("a stale delete: %d %s", r.StatusCode(), r.Body)
	}
	if r := servertest.Must(e.api.UpdateTemplateWithResponse(ctx, "dev-h100", &model.UpdateTemplateParams{IfMatch: new("yesterday")}, other))(t); r.StatusCode() != 422 {
		t.Fatalf("an If-Match that names no version: %d %s", r.StatusCode(), r.Body)
	}
	updated = servertest.Must(e.api.UpdateTemplateWithResponse(ctx, "dev-h100", nil, doc))(t)
	if updated.StatusCode() != 200 || servertest.Deref(updated.JSON200).Version != 2 {
		t.Fatalf("unchanged update made a version: %d %s", updated.StatusCode(), updated.Body)
	}
	h := servertest.Must(e.api.ListTemplateVersionsWithResponse(ctx, "dev-h100"))(t)
	if h.StatusCode() != 200 || len(servertest.Deref(h.JSON200).Items) != 2 {
		t.Fatalf("history: %d %s", h.StatusCode(), h.Body)
	}
	one := model.LaunchRequest{Template: "dev-h100", Team: "vision", TemplateVersion: new(1)}
	w := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, one))(t)
	if w.StatusCode() != 201 || servertest.Deref(w.JSON201).TemplateVersion != 1 {
		t.Fatalf("launch of version 1: %d %s", w.StatusCode(), w.Body)
	}
	if s := servertest.Must(e.api.DeleteTemplateWithResponse(ctx, "dev-h100", nil))(t).StatusCode(); s != 204 {
		t.Fatalf("delete: %d", s)
	}
	if s := servertest.Must(e.api.GetTemplateWithResponse(ctx, "dev-h100", nil))(t).StatusCode(); s != 404 {
		t.Fatalf("get after delete: %d", s)
	}
	old := servertest.Must(e.api.GetTemplateWithResponse(ctx, "dev-h100", &model.GetTemplateParams{Version: new(1)}))(t)
	if old.StatusCode() != 200 || servertest.Deref(old.JSON200).Version != 1 {
		t.Fatalf("old version after delete: %d", old.StatusCode())
	}
	if s := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, one))(t).StatusCode(); s != 404 {
		t.Fatalf("launch of a deleted template: %d, want 404", s)
	}
}

func TestWorkloadsAndPreview(t *testing.T) {
	e := newEnv(t, alice)
	ctx := t.Context()
	choice := &model.GPUChoice{Class: new("H100-80GB"), MigProfile: new("3g.40gb")}
	params := &model.Parameters{"input": "p.jsonl"}
	rr := servertest.Must(e.api.RenderTemplateWithResponse(ctx, "batch-inference", model.RenderRequest{Team: "vision", Gpu: choice, Parameters: params}))(t)
	if rr.StatusCode() != 200 {
		t.Fatalf("render: %d %s", rr.StatusCode(), rr.Body)
	}
	r := servertest.Deref(rr.JSON200)
	if len(r.Objects) != 3 || r.Objects[1]["kind"] != "Job" || r.Objects[2]["kind"] != "NetworkPolicy" || r.Hash == "" {
		t.Fatalf("render result: %+v", r)
	}
	j, _ := json.Marshal(r.Objects[1])
	if !strings.Contains(string(j), `"nvidia.com/mig-3g.40gb":"1"`) {
		t.Errorf("MIG resource missing: %s", j)
	}
	launched := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "batch-inference", Team: "vision", Gpu: choice, Parameters: params}))(t)
	if launched.StatusCode() != 201 {
		t.Fatalf("launch: %d %s", launched.StatusCode(), launched.Body)
	}
	w := servertest.Deref(launched.JSON201)
	if w.Owner != "alice" || w.Status != model.Pending || servertest.Deref(w.Gpu.MigProfile) != "3g.40gb" || w.Parameters["input"] != "p.jsonl" || w.Parameters["model"] == "" || w.Name != "batch-inference-"+w.Id {
		t.Fatalf("workload: %s", launched.Body)
	}
	for range 4 {
		servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "vllm-inference", Team: "nlp"}))(t)
	}
	page := servertest.Deref(servertest.Must(e.api.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Limit: new(3)}))(t).JSON200)
	if len(page.Items) != 3 || servertest.Deref(page.NextCursor) == "" {
		t.Fatalf("page 1: %+v", page)
	}
	page = servertest.Deref(servertest.Must(e.api.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Limit: new(3), Cursor: page.NextCursor}))(t).JSON200)
	if len(page.Items) != 2 || page.NextCursor != nil {
		t.Fatalf("page 2: %+v", page)
	}
	page = servertest.Deref(servertest.Must(e.api.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Team: new("nlp")}))(t).JSON200)
	if len(page.Items) != 4 {
		t.Fatalf("team filter: %d", len(page.Items))
	}
	if s := servertest.Must(e.api.DeleteWorkloadWithResponse(ctx, w.Id))(t).StatusCode(); s != 204 {
		t.Fatalf("delete: %d", s)
	}
	if got := servertest.Deref(servertest.Must(e.api.GetWorkloadWithResponse(ctx, w.Id))(t).JSON200); got.Status != model.Deleted {
		t.Fatalf("status after delete: %s", got.Status)
	}
}

func TestGPUClassesAndOperations(t *testing.T) {
	e := newEnv(t, alice)
	ctx := t.Context()
	cr := servertest.Must(e.api.GetGPUClassWithResponse(ctx, "H100-80GB"))(t)
	c := servertest.Deref(cr.JSON200)
	if cr.StatusCode() != 200 || len(c.MigProfiles) != 6 {
		t.Fatalf("%d %s", cr.StatusCode(), cr.Body)
	}
	// The price as it stood when Gantry started is its history's first row.
	history := servertest.Deref(c.PriceHistory)
	if c.Price.Currency != "USD" || c.Price.Unit != "gpu-hour" || len(history) != 1 || history[0].Price.OnDemand != c.Price.OnDemand || history[0].Since.IsZero() {
		t.Errorf("price %+v, history %+v", c.Price, history)
	}
	p := c.MigProfiles[0]
	if p.Name != "1g.10gb" || p.Resource != "nvidia.com/mig-1g.10gb" || p.ComputeShare != 1.0/7 || p.MemoryShare != 1.0/8 {
		t.Errorf("profile %+v", p)
	}
	if ready := servertest.Must(e.api.GetReadyWithResponse(ctx))(t); ready.StatusCode() != 200 || servertest.Deref(ready.JSON200).Status != model.Ready {
		t.Fatalf("readyz: %d %s", ready.StatusCode(), ready.Body)
	}
	// Not GetOpenAPIWithResponse: it decodes the YAML as one string.
	resp, err := newClient(e.url, "", "").GetOpenAPI(ctx)
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
	r := servertest.Must(newClient(e.url, "", "").GetReadyWithResponse(t.Context()))(t)
	body := string(r.Body)
	if r.StatusCode() != 503 || servertest.Deref(r.JSON503).Status != model.NotReady || !strings.Contains(body, `"not ready"`) || !strings.Contains(body, "database does not answer") {
		t.Fatalf("%d %s", r.StatusCode(), body)
	}
	if strings.Contains(body, "10.0.0.5") {
		t.Errorf("readiness leaks the database address: %s", body)
	}
}

func TestUnauthenticated(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, func(*http.Request) (identity.Identity, error) { return identity.Identity{}, authn.ErrNoCredentials })
	for _, read := range []struct {
		path string
		send func() (int, http.Header)
	}{
		{"/api/v1/templates", func() (int, http.Header) {
			r := servertest.Must(e.api.ListTemplatesWithResponse(ctx))(t)
			return r.StatusCode(), r.HTTPResponse.Header
		}},
		{"/api/v1/workloads", func() (int, http.Header) {
			r := servertest.Must(e.api.ListWorkloadsWithResponse(ctx, nil))(t)
			return r.StatusCode(), r.HTTPResponse.Header
		}},
		{"/api/v1/gpu-classes", func() (int, http.Header) {
			r := servertest.Must(e.api.ListGPUClassesWithResponse(ctx))(t)
			return r.StatusCode(), r.HTTPResponse.Header
		}},
	} {
		if s, h := read.send(); s != 401 || h.Get("WWW-Authenticate") != `Bearer realm="gantry"` {
			t.Errorf("GET %s: %d %q, want 401 with a Bearer challenge", read.path, s, h.Get("WWW-Authenticate"))
		}
	}
	e2 := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{}, errors.New("signature by key k9 does not verify")
	})
	var p problem
	for range 2 { // the same answer every time: no state carried between requests
		r := servertest.Must(e2.api.ListTemplatesWithResponse(ctx))(t)
		if p = problemOf(r.ApplicationproblemJSONDefault); r.StatusCode() != 401 || r.HTTPResponse.Header.Get("WWW-Authenticate") != `Bearer realm="gantry", error="invalid_token"` {
			t.Errorf("bad token: %d %q", r.StatusCode(), r.HTTPResponse.Header.Get("WWW-Authenticate"))
		}
	}
	if strings.Contains(p.Detail+p.Title, "k9") {
		t.Errorf("internal detail in the answer: %+v", p)
	}
	e3 := newEnv(t, func(*http.Request) (identity.Identity, error) { return identity.Identity{}, authn.ErrNoCredentials })
	if r := servertest.Must(e3.api.ListTemplatesWithResponse(ctx))(t); r.StatusCode() != 401 || r.HTTPResponse.Header.Get("WWW-Authenticate") != `Bearer realm="gantry"` {
		t.Errorf("no token: %d %q", r.StatusCode(), r.HTTPResponse.Header.Get("WWW-Authenticate"))
	}
	if s := servertest.Must(e.api.GetHealthWithResponse(ctx))(t).StatusCode(); s != 200 {
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
		resp, err := http.Get(e.url + path) // raw: the portal's pages are not routes of the API
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
	ctx := t.Context()
	for _, c := range []struct {
		name, team string
		gpu        *model.GPUChoice
		want       int
	}{
		{"own team", "vision", nil, 0},
		{"another team", "nlp", nil, 403},
		{"a class the team may not use", "vision", &model.GPUChoice{Class: new("H200-141GB")}, 403},
	} {
		ls := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "pytorch-train", Team: c.team, Gpu: c.gpu}))(t).StatusCode()
		ps := servertest.Must(e.api.RenderTemplateWithResponse(ctx, "pytorch-train", model.RenderRequest{Team: c.team, Gpu: c.gpu}))(t).StatusCode()
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
	ctx := t.Context()
	doc := templateDoc(t, "../templates/dev-environment.yaml", func(d *model.TemplateDocument) { d.Metadata.Name = "ide" })
	if s := servertest.Must(e.api.CreateTemplateWithResponse(ctx, doc))(t).StatusCode(); s != 201 {
		t.Fatalf("create: %d", s)
	}
	doc.Metadata.Title = "IDE, fixed"
	if s := servertest.Must(e.api.UpdateTemplateWithResponse(ctx, "ide", nil, doc))(t).StatusCode(); s != 200 {
		t.Fatalf("update: %d", s)
	}
	launch := model.LaunchRequest{Template: "ide", TemplateVersion: new(1), Team: "vision"}
	r := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, launch))(t)
	w := servertest.Deref(r.JSON201)
	if r.StatusCode() != 201 || w.TemplateStatus != nil {
		t.Fatalf("launch of an active version: %d %s", r.StatusCode(), r.Body)
	}
	status := func(version int, s model.SetTemplateVersionStatusJSONBodyStatus, reason string) *client.SetTemplateVersionStatusResponse {
		body := model.SetTemplateVersionStatusJSONRequestBody{Status: s}
		if reason != "" {
			body.Reason = &reason
		}
		return servertest.Must(e.api.SetTemplateVersionStatusWithResponse(ctx, "ide", version, body))(t)
	}
	if v := status(1, "deprecated", ""); v.StatusCode() != 422 || problemOf(v.ApplicationproblemJSONDefault).fields()["reason"] == "" {
		t.Fatalf("deprecation without a reason: %d %s", v.StatusCode(), v.Body)
	}
	if v := status(1, "deprecated", "use version 2"); v.StatusCode() != 200 || servertest.Deref(servertest.Deref(v.JSON200).Status) != model.TemplateVersionStatusDeprecated {
		t.Fatalf("deprecate: %d %s", v.StatusCode(), v.Body)
	}
	r = servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, launch))(t)
	if w2 := servertest.Deref(r.JSON201); r.StatusCode() != 201 || servertest.Deref(w2.TemplateStatus) != model.WorkloadTemplateStatusDeprecated || servertest.Deref(w2.TemplateStatusReason) != "use version 2" {
		t.Fatalf("launch of a deprecated version: %d %s", r.StatusCode(), r.Body)
	}
	if s := servertest.Must(e.api.StopWorkloadWithResponse(ctx, w.Id))(t).StatusCode(); s != 200 {
		t.Fatalf("stop: %d", s)
	}
	if v := status(1, "revoked", "CVE-2026-0001 in the image"); v.StatusCode() != 200 || servertest.Deref(servertest.Deref(v.JSON200).Status) != model.TemplateVersionStatusRevoked {
		t.Fatalf("revoke: %d %s", v.StatusCode(), v.Body)
	}
	r = servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, launch))(t)
	if p := problemOf(r.ApplicationproblemJSONDefault); r.StatusCode() != 422 || !strings.Contains(p.fields()["templateVersion"], "revoked (CVE-2026-0001 in the image)") {
		t.Fatalf("launch of a revoked version: %d %s", r.StatusCode(), r.Body)
	}
	if s := servertest.Must(e.api.RenderTemplateWithResponse(ctx, "ide", model.RenderRequest{Team: "vision", TemplateVersion: new(1)}))(t).StatusCode(); s != 422 {
		t.Fatalf("preview of a revoked version: %d, want 422 as its launch", s)
	}
	if s := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "ide", Team: "vision"}))(t).StatusCode(); s != 201 {
		t.Fatalf("launch of the live (fixed) version: %d", s)
	}
	got := servertest.Must(e.api.GetWorkloadWithResponse(ctx, w.Id))(t)
	if got.StatusCode() != 200 || servertest.Deref(servertest.Deref(got.JSON200).TemplateStatus) != model.WorkloadTemplateStatusRevoked {
		t.Fatalf("a workload of the revoked version is not flagged: %d %s", got.StatusCode(), got.Body)
	}
	list := servertest.Deref(servertest.Must(e.api.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Template: new("ide")}))(t).JSON200)
	flagged := 0
	for _, it := range list.Items {
		if servertest.Deref(it.TemplateStatus) == model.WorkloadTemplateStatusRevoked {
			flagged++
		}
	}
	if flagged != 2 {
		t.Errorf("%d of the listed workloads flagged revoked, want 2: %+v", flagged, list.Items)
	}
	start := servertest.Must(e.api.StartWorkloadWithResponse(ctx, w.Id))(t)
	if p := problemOf(start.ApplicationproblemJSONDefault); start.StatusCode() != 409 || !strings.Contains(p.Detail, "revoked") {
		t.Fatalf("start of a workload of a revoked version: %d %s", start.StatusCode(), start.Body)
	}
	if s := status(1, "active", "").StatusCode(); s != 409 {
		t.Fatalf("un-revoking: %d, want 409", s)
	}
	if s := status(9, "deprecated", "x").StatusCode(); s != 404 {
		t.Fatalf("no such version: %d, want 404", s)
	}
}
