package security

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/servertest"
)

// 4. A preview answers exactly what the launch would: a caller may not learn
// from the preview what they may not launch.
func testPreviewRefusesWhatLaunchRefuses(t *testing.T, w *world) {
	admin := w.api["ada"]
	before := admin.workloadCount(t)
	h200 := &model.GPUChoice{Class: new("H200-141GB")}
	for _, c := range []struct {
		name, who, template, team string
		gpu                       *model.GPUChoice
		want                      int
	}{
		{"a team the caller is not in", "alice", "dev-environment", "nlp", nil, http.StatusForbidden},
		{"a template the team may not use", "nina", "pytorch-train", "nlp", nil, http.StatusForbidden},
		{"a GPU class the team may not use", "alice", "vllm-inference", "vision", h200, http.StatusForbidden},
		{"another team's member", "nina", "dev-environment", "vision", nil, http.StatusForbidden},
		{"an auditor", "vic", "dev-environment", "vision", nil, http.StatusForbidden},
		{"a platform engineer", "pat", "dev-environment", "vision", nil, http.StatusForbidden},
		{"a team that does not exist", "alice", "dev-environment", "nosuchteam", nil, http.StatusForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			as := w.api[c.who]
			preview := servertest.Must(as.RenderTemplateWithResponse(t.Context(), c.template, model.RenderRequest{Team: c.team, Gpu: c.gpu}))(t)
			launch := servertest.Must(as.CreateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: c.template, Team: c.team, Gpu: c.gpu}))(t)
			wantStatus(t, c.who+" previews "+c.template, preview, c.want)
			wantStatus(t, c.who+" launches "+c.template, launch, c.want)
			if strings.Contains(string(preview.Body), `"objects"`) {
				t.Errorf("the refused preview carries objects: %s", show(preview))
			}
		})
	}
	// The same preview in a team the caller may launch in renders.
	r := servertest.Must(w.api["alice"].RenderTemplateWithResponse(t.Context(), "dev-environment", model.RenderRequest{Team: "vision"}))(t)
	if wantStatus(t, "alice previews dev-environment in vision", r, http.StatusOK); len(servertest.Deref(r.JSON200).Objects) == 0 || !strings.Contains(string(r.Body), `"objects"`) {
		t.Errorf("alice's own preview has no objects: %s", show(r))
	}
	if after := admin.workloadCount(t); after != before {
		t.Errorf("%d workloads before, %d after the refused launches", before, after)
	}
}

// 10. Another team's workload: its members neither see nor touch it (404,
// as if it did not exist), those who may read it by policy may not stop or
// delete it (403), and the audit log records each denial under its actor.
func testAnotherTeamsWorkload(t *testing.T, w *world) {
	admin, nb := w.api["ada"], w.notebook
	const missing = "zzzzzzzzzz" // a well-formed id no workload has
	head := admin.auditHead(t)
	// The operations on one workload, by method and path suffix.
	op := map[string]func(ctx context.Context, c *client, id string) (answer, error){
		"GET": func(ctx context.Context, c *client, id string) (answer, error) {
			return c.GetWorkloadWithResponse(ctx, id)
		},
		"GET /events": func(ctx context.Context, c *client, id string) (answer, error) {
			return c.ListWorkloadEventsWithResponse(ctx, id)
		},
		"GET /logs": func(ctx context.Context, c *client, id string) (answer, error) {
			return c.GetWorkloadLogsWithResponse(ctx, id, nil)
		},
		"POST /stop": func(ctx context.Context, c *client, id string) (answer, error) {
			return c.StopWorkloadWithResponse(ctx, id)
		},
		"POST /start": func(ctx context.Context, c *client, id string) (answer, error) {
			return c.StartWorkloadWithResponse(ctx, id)
		},
		"DELETE": func(ctx context.Context, c *client, id string) (answer, error) {
			return c.DeleteWorkloadWithResponse(ctx, id)
		},
	}
	for _, c := range []struct {
		who, method, suffix string
		want                int
		id                  string // default alice's notebook
	}{
		{"alice", "GET", "", http.StatusNotFound, w.nlp},
		{"alice", "POST", "/stop", http.StatusNotFound, w.nlp},
		{"alice", "DELETE", "", http.StatusNotFound, w.nlp},
		{"nina", "GET", "", http.StatusNotFound, ""},
		{"nina", "GET", "/events", http.StatusNotFound, ""},
		{"nina", "GET", "/logs", http.StatusNotFound, ""},
		{"nina", "POST", "/stop", http.StatusNotFound, ""},
		{"nina", "POST", "/start", http.StatusNotFound, ""},
		{"nina", "DELETE", "", http.StatusNotFound, ""},
		{"pat", "POST", "/stop", http.StatusForbidden, ""},
		{"pat", "POST", "/start", http.StatusForbidden, ""},
		{"pat", "DELETE", "", http.StatusForbidden, ""},
		{"vic", "POST", "/stop", http.StatusForbidden, ""},
		{"vic", "DELETE", "", http.StatusForbidden, ""},
	} {
		id, whose := c.id, "alice's"
		if id == "" {
			id = nb
		} else {
			whose = "nina's"
		}
		t.Run(c.who+" "+c.method+" "+whose+" workload"+c.suffix, func(t *testing.T) {
			as, send := w.api[c.who], op[strings.TrimSpace(c.method+" "+c.suffix)]
			r := servertest.Must(send(t.Context(), as, id))(t)
			p := wantStatus(t, c.method+" "+whose+" workload"+c.suffix, r, c.want)
			if c.want != http.StatusNotFound || r.StatusCode() != http.StatusNotFound {
				return
			}
			// Indistinguishable from a workload that does not exist.
			q := problemOf(t, servertest.Must(send(t.Context(), as, missing))(t))
			if p.Type != q.Type || p.Title != q.Title || strings.ReplaceAll(p.Detail, id, missing) != q.Detail {
				t.Errorf("the 404 differs from a missing workload's:\n %+v\n %+v", p, q)
			}
		})
	}
	t.Run("nina's listings", func(t *testing.T) {
		for _, q := range []model.ListWorkloadsParams{{}, {Team: new("vision")}, {Owner: new(w.issuer + "#dev-alice")}, {Template: new("dev-environment")}} {
			r := servertest.Must(w.api["nina"].ListWorkloadsWithResponse(t.Context(), &q))(t)
			if r.StatusCode() >= 500 || strings.Contains(string(r.Body), nb) {
				t.Errorf("GET /api/v1/workloads with %+v: %s; want alice's workload absent", q, show(r))
			}
		}
	})
	// By policy, platform engineers and auditors read every team's workloads.
	wantStatus(t, "pat reads it", servertest.Must(w.api["pat"].GetWorkloadWithResponse(t.Context(), nb))(t), http.StatusOK)
	wantStatus(t, "vic reads it", servertest.Must(w.api["vic"].GetWorkloadWithResponse(t.Context(), nb))(t), http.StatusOK)
	if st := workloadStatus(t, w.api["alice"], nb); st != "Pending" {
		t.Errorf("alice's workload is %s after the refused stops and deletes; want Pending", st)
	}
	if st := workloadStatus(t, w.api["nina"], w.nlp); st != "Pending" {
		t.Errorf("nina's workload is %s after alice's refused stop and delete; want Pending", st)
	}

	recs := admin.audit(t, head)
	for _, want := range []struct {
		who, method, suffix string
		status              int
		reason              string
	}{
		{"nina", "POST", "/stop", http.StatusNotFound, "answered 404"},
		{"nina", "DELETE", "", http.StatusNotFound, "answered 404"},
		{"nina", "GET", "", http.StatusNotFound, "answered 404"},
		{"pat", "POST", "/stop", http.StatusForbidden, "own-workloads:manage"},
		{"vic", "DELETE", "", http.StatusForbidden, "own-workloads:manage"},
	} {
		actor := w.issuer + "#dev-" + want.who + " (token " + w.tok[want.who].Id + ")"
		object := "/api/v1/workloads/" + nb + want.suffix
		found := false
		for _, r := range recs {
			if r.Actor == actor && r.Object == object && strings.HasPrefix(r.Action, want.method+" ") && r.Decision == "deny" &&
				r.Status == want.status && strings.Contains(r.Reason, want.reason) {
				found = true
			}
		}
		if !found {
			t.Errorf("no audit record of %s's %s %s denied %d (%q); records since the attack:\n%v", want.who, want.method, object, want.status, want.reason, recs)
		}
	}
}

// 11. /w/{id}/ opens a notebook for its owner only, and only while it runs.
func testNotebookProxy(t *testing.T, w *world) {
	g := w.g
	path := "/w/" + w.notebook + "/"
	anonymous := g.newClient(t).noRedirects()
	for _, c := range []struct {
		name    string
		as      *client
		method  string
		path    string
		headers []string
		want    int
	}{
		{"anonymous", anonymous, "GET", path, nil, http.StatusUnauthorized},
		{"another team's member", w.api["nina"], "GET", path, nil, http.StatusNotFound},
		{"a platform engineer", w.api["pat"], "GET", path, nil, http.StatusForbidden},
		{"an auditor", w.api["vic"], "GET", path, nil, http.StatusForbidden},
		{"a platform admin", w.api["ada"], "GET", path, nil, http.StatusForbidden},
		{"the team's admin", w.api["lee"], "GET", path, nil, http.StatusForbidden},
		{"the owner's read-only token", w.g.bearerClient(t, w.readOnly.Token), "GET", path, nil, http.StatusForbidden},
		{"the owner's session, a change from another origin", w.ses["alice"], "POST", path + "api", []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"the owner's session, a change without an Origin", w.ses["alice"], "POST", path + "api", nil, http.StatusForbidden},
		{"the owner's session, a change from another site", w.ses["alice"], "POST", path + "api", []string{"Origin", w.g.URL, "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"the owner's session, a websocket from another origin", w.ses["alice"], "GET", path + "socket",
			[]string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==", "Origin", "http://evil.example"}, http.StatusForbidden},
		{"the owner, not Running", w.api["alice"], "GET", path, nil, http.StatusConflict},
		{"the owner without the slash, not Running", w.api["alice"], "GET", "/w/" + w.notebook, nil, http.StatusConflict},
		{"the owner's session, not Running", w.ses["alice"], "GET", path + "lab?x=1", nil, http.StatusConflict},
		{"a workload that does not exist", w.api["alice"], "GET", "/w/zzzzzzzzzz/", nil, http.StatusNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.as.raw(t, c.method, c.path, "", c.headers...) // raw: a notebook's /w/ path is not the API
			p := wantStatus(t, c.method+" "+c.path, r, c.want)
			switch c.want {
			case http.StatusUnauthorized:
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("401 without a Bearer challenge: %v", r.header)
				}
			case http.StatusConflict:
				if !strings.Contains(p.Detail, "Running") {
					t.Errorf("the owner's 409 does not say it opens once Running: %q", p.Detail)
				}
			}
		})
	}
	t.Run("a path without a workload id", func(t *testing.T) {
		for _, p := range []string{"/w/", "/w//x"} {
			r := w.api["alice"].raw(t, "GET", p, "")
			wantStatus(t, "GET "+p, r, http.StatusNotFound)
		}
	})
	t.Run("anonymous browser is sent to sign in, on this origin", func(t *testing.T) {
		r := anonymous.raw(t, "GET", path, "", "Accept", "text/html")
		if want := "/auth/login?return=" + qe(path); r.status != http.StatusFound || r.header.Get("Location") != want {
			t.Errorf("%s, Location %q; want 302 to %q", r, r.header.Get("Location"), want)
		}
	})
}

// 17. A parameter value is the text of the one field it is placed in: it
// cannot add objects, fields or kinds, nor reference other parameters.
func testTemplateInjection(t *testing.T, w *world) {
	alice := w.api["alice"]
	preview := func(t *testing.T, params model.Parameters) (answer, []map[string]any) {
		t.Helper()
		req := model.RenderRequest{Team: "vision"}
		if params != nil {
			req.Parameters = &params
		}
		r := servertest.Must(alice.RenderTemplateWithResponse(t.Context(), "sec-probe", req))(t)
		return r, servertest.Deref(r.JSON200).Objects
	}
	r, base := preview(t, nil)
	wantStatus(t, "the probe's preview", r, http.StatusOK)
	baseKinds := kinds(base)
	if len(baseKinds) == 0 {
		t.Fatalf("the probe renders no objects: %s", show(r))
	}
	for _, c := range []struct {
		name   string
		params model.Parameters
		field  string // "" for a value taken as text
	}{
		{"JSON breaking out of the env value", model.Parameters{"note": `"}},{"kind":"Secret","metadata":{"name":"pwn"}}`}, ""},
		{"JSON adding a field", model.Parameters{"note": `x","privileged":true,"y":"`}, ""},
		{"a second YAML document", model.Parameters{"note": "x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: pwn\n"}, ""},
		{"YAML keys on new lines", model.Parameters{"note": "x\n  securityContext:\n    privileged: true"}, ""},
		{"shell", model.Parameters{"note": "$(cat /var/run/secrets/kubernetes.io/serviceaccount/token)"}, ""},
		{"a reference to another parameter", model.Parameters{"note": "{{mem}}"}, "parameters.note"},
		{"a reference to a builtin", model.Parameters{"note": "{{gantry.owner}}"}, "parameters.note"},
		{"a NUL byte", model.Parameters{"note": "a\x00b"}, "parameters.note"},
		{"YAML in a quantity", model.Parameters{"mem": "1Gi\nkind: Secret"}, "spec.resources.memory"},
		{"a parameter the template lacks", model.Parameters{"privileged": "true"}, "parameters.privileged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, objs := preview(t, c.params)
			if c.field != "" || r.StatusCode() != http.StatusOK {
				p := wantStatus(t, "preview", r, http.StatusUnprocessableEntity)
				if c.field != "" && !slices.Contains(p.fields(), c.field) {
					t.Errorf("problem fields %v; want %q", p.fields(), c.field)
				}
				return
			}
			if got := kinds(objs); !slices.Equal(got, baseKinds) {
				t.Errorf("objects %v; want the probe's %v", got, baseKinds)
			}
			note := c.params["note"].(string)
			main := mainContainer(t, objs)
			env, _ := main["env"].([]any)
			baseEnv, _ := mainContainer(t, base)["env"].([]any)
			var values []any
			for _, e := range env {
				if e.(map[string]any)["name"] == "NOTE" {
					values = append(values, e.(map[string]any)["value"])
				}
			}
			if len(env) != len(baseEnv) || len(values) != 1 || values[0] != note {
				t.Errorf("env %v; want the probe's variables, NOTE once with the value as given", env)
			}
			if args, _ := main["args"].([]any); len(args) != 1 || args[0] != note {
				t.Errorf("args %v; want the value as the one argument", main["args"])
			}
			if sc, _ := main["securityContext"].(map[string]any); sc["privileged"] == true {
				t.Errorf("the container became privileged: %v", sc)
			}
		})
	}
}

// kinds lists the objects' kinds.
func kinds(objs []map[string]any) []string {
	var out []string
	for _, o := range objs {
		k, _ := o["kind"].(string)
		out = append(out, k)
	}
	return out
}

// mainContainer finds the container named main in rendered objects.
func mainContainer(t *testing.T, objs []map[string]any) map[string]any {
	t.Helper()
	var found map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if cs, ok := x["containers"].([]any); ok {
				for _, c := range cs {
					if m, ok := c.(map[string]any); ok && m["name"] == "main" {
						found = m
					}
				}
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	for _, o := range objs {
		walk(o)
	}
	if found == nil {
		t.Fatalf("no container named main in %v", kinds(objs))
	}
	return found
}

// 14. A revoked template version is refused at launch and preview; the
// revocation is final.
func testRevokedVersion(t *testing.T, w *world) {
	admin, alice := w.api["ada"], w.api["alice"]
	ctx := t.Context()
	status := func(c *client, version int, s model.SetTemplateVersionStatusJSONBodyStatus, reason string) answer {
		body := model.SetTemplateVersionStatusJSONRequestBody{Status: s}
		if reason != "" {
			body.Reason = &reason
		}
		return servertest.Must(c.SetTemplateVersionStatusWithResponse(ctx, "sec-revoke", version, body))(t)
	}
	wantStatus(t, "create sec-revoke", servertest.Must(admin.CreateTemplateWithResponse(ctx, probeTemplate("sec-revoke")))(t), http.StatusCreated)
	fixed := probeTemplate("sec-revoke")
	fixed.Metadata.Title = "Security probe, fixed"
	r := servertest.Must(admin.UpdateTemplateWithResponse(ctx, "sec-revoke", nil, fixed))(t)
	if wantStatus(t, "update sec-revoke", r, http.StatusOK); r.StatusCode() == http.StatusOK {
		if v := r.JSON200.Version; v != 2 {
			t.Fatalf("the update made version %d; want 2", v)
		}
	}
	wantStatus(t, "alice may not revoke", status(alice, 1, "revoked", "CVE"), http.StatusForbidden)
	wantStatus(t, "ada revokes version 1", status(admin, 1, "revoked", "CVE-2026-0001"), http.StatusOK)
	before := admin.workloadCount(t)
	for _, c := range []struct {
		name string
		send func(ctx context.Context) (answer, error)
	}{
		{"launch version 1", func(ctx context.Context) (answer, error) {
			return alice.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "sec-revoke", Team: "vision", TemplateVersion: new(1)})
		}},
		{"preview version 1", func(ctx context.Context) (answer, error) {
			return alice.RenderTemplateWithResponse(ctx, "sec-revoke", model.RenderRequest{Team: "vision", TemplateVersion: new(1)})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := wantStatus(t, c.name, servertest.Must(c.send(t.Context()))(t), http.StatusUnprocessableEntity)
			if !slices.Contains(p.fields(), "templateVersion") || !strings.Contains(fmt.Sprint(p.Errors), "revoked") {
				t.Errorf("the refusal does not name templateVersion as revoked: %+v", p)
			}
		})
	}
	if after := admin.workloadCount(t); after != before {
		t.Errorf("%d workloads before, %d after launching a revoked version", before, after)
	}
	wantStatus(t, "un-revoke version 1", status(admin, 1, "active", ""), http.StatusConflict)
	if st := templateStatus(t, admin, "sec-revoke", 1); st != "revoked" {
		t.Errorf("version 1 is %q; want revoked for good", st)
	}
	wantStatus(t, "launch the live version 2", servertest.Must(alice.CreateWorkloadWithResponse(ctx, nil,
		model.LaunchRequest{Template: "sec-revoke", Team: "vision"}))(t), http.StatusCreated)
}
