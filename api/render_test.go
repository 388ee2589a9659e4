package api_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/identity"
)

// TestRenderDraft: the editor's preview renders an unsaved draft for whoever
// may write templates (not only those who may launch), names a draft's
// problems by line, and refuses drafts to those who may only launch.
func TestRenderDraft(t *testing.T) {
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		if r.Header.Get("X-Test-Role") == "member" {
			return identity.Identity{Subject: "mia", Groups: []string{"ml-vision"}}, nil
		}
		return identity.Identity{Subject: "pat", Groups: []string{"platform-team"}, SecondFactor: true}, nil // a platform engineer
	})
	src, err := os.ReadFile("../templates/dev-environment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	draft := strings.Replace(string(src), "title: ", "title: Draft ", 1)
	var out struct {
		TemplateVersion int
		Objects         []map[string]any
	}
	if s := e.request("", "POST", "/api/v1/templates/dev-environment/render", map[string]any{"team": "vision", "source": draft}, &out); s != 200 || out.TemplateVersion != 0 || len(out.Objects) == 0 {
		t.Fatalf("a platform engineer's draft: %d %+v", s, out)
	}
	var p problem
	if s := e.request("", "POST", "/api/v1/templates/dev-environment/render", map[string]any{"team": "vision"}, &p); s != 403 || !strings.Contains(p.Detail, "launch") {
		t.Errorf("a platform engineer rendering the stored template (a launch preview): %d %q", s, p.Detail)
	}
	broken := strings.Replace(string(src), "max: ", "max: two-", 1)
	p = problem{}
	if s := e.request("", "POST", "/api/v1/templates/dev-environment/render", map[string]any{"team": "vision", "source": broken}, &p); s != 422 || len(p.Errors) == 0 || !strings.Contains(p.Errors[0].Field, "spec.gpu.count.max") {
		t.Errorf("a broken draft: %d %+v", s, p)
	}
	p = problem{}
	if s := e.request("member", "POST", "/api/v1/templates/dev-environment/render", map[string]any{"team": "vision", "source": draft}, &p); s != 403 || !strings.Contains(p.Detail, "templates:write") {
		t.Errorf("a member's draft: %d %q", s, p.Detail)
	}
}
