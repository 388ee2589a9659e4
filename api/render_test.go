package api_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
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
	ctx := t.Context()
	render := func(c *client.ClientWithResponses, source *string) (*client.RenderTemplateResponse, problem) {
		r := servertest.Must(c.RenderTemplateWithResponse(ctx, "dev-environment", model.RenderRequest{Team: "vision", Source: source}))(t)
		return r, problemOf(r.ApplicationproblemJSONDefault)
	}
	if r, _ := render(e.api, &draft); r.StatusCode() != 200 || servertest.Deref(r.JSON200).TemplateVersion != 0 || len(servertest.Deref(r.JSON200).Objects) == 0 {
		t.Fatalf("a platform engineer's draft: %d %s", r.StatusCode(), r.Body)
	}
	if r, p := render(e.api, nil); r.StatusCode() != 403 || !strings.Contains(p.Detail, "launch") {
		t.Errorf("a platform engineer rendering the stored template (a launch preview): %d %q", r.StatusCode(), p.Detail)
	}
	broken := strings.Replace(string(src), "max: ", "max: two-", 1)
	if r, p := render(e.api, &broken); r.StatusCode() != 422 || len(p.Errors) == 0 || !strings.Contains(p.Errors[0].Field, "spec.gpu.count.max") {
		t.Errorf("a broken draft: %d %s", r.StatusCode(), r.Body)
	}
	if r, p := render(e.as("member"), &draft); r.StatusCode() != 403 || !strings.Contains(p.Detail, "templates:write") {
		t.Errorf("a member's draft: %d %q", r.StatusCode(), p.Detail)
	}
	// A draft of thousands of unknown keys: a member is refused before it
	// is parsed (the answer is the same short refusal, not its problems);
	// the platform engineer hears of the first 100, and how many in all.
	var huge strings.Builder
	huge.WriteString(string(src))
	for i := range 3000 {
		fmt.Fprintf(&huge, "key%d: 1\n", i) // each an unknown field of its own
	}
	hugeDraft := huge.String()
	if r, p := render(e.as("member"), &hugeDraft); r.StatusCode() != 403 || len(p.Errors) != 0 || len(r.Body) > 2048 {
		t.Errorf("a member's huge draft: %d, %d errors, %d bytes", r.StatusCode(), len(p.Errors), len(r.Body))
	}
	if r, p := render(e.api, &hugeDraft); r.StatusCode() != 422 && r.StatusCode() != 400 || len(p.Errors) != 100 || !strings.Contains(p.Detail, "the first 100 are listed") {
		t.Errorf("a platform engineer's huge draft: %d, %d errors, %q %.300s", r.StatusCode(), len(p.Errors), p.Detail, r.Body)
	}
}
