package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/identity"
)

// TestUnknownAPIPathsStopAtTheGate: a path under /api that the spec does not
// declare never reaches a handler (whatever else might be routed there), while
// the portal's paths pass through.
func TestUnknownAPIPathsStopAtTheGate(t *testing.T) {
	mw, err := validator(gantry.OpenAPI, func(identity.Identity, access.Permission) bool { return true }, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	for _, path := range []string{"/api/v1/nosuch", "/api/v1/workloads/abc/def/ghi", "/api/v2/templates", "/", "/portal.js"} {
		reached := false
		h := mw(func(echo.Context) error { reached = true; return nil })
		c := e.NewContext(httptest.NewRequest(http.MethodGet, path, nil), httptest.NewRecorder())
		err := h(c)
		api := strings.HasPrefix(path, "/api/")
		if api && (reached || err != echo.ErrNotFound) {
			t.Errorf("GET %s: reached a handler %v, err %v; want 404 at the gate", path, reached, err)
		}
		if !api && !reached {
			t.Errorf("GET %s: a portal path did not pass (%v)", path, err)
		}
	}
}

// BenchmarkDuplicateKeyScan: what the duplicate-key check costs every JSON
// body (a launch request, and a template document, the largest bodies), next
// to decoding the same body.
func BenchmarkDuplicateKeyScan(b *testing.B) {
	launch := []byte(`{"template":"pytorch-train","team":"vision","gpu":{"class":"H100-80GB","count":4},"parameters":{"epochs":3,"script":"train.py"}}`)
	tmpl, err := os.ReadFile("../templates/pytorch-train.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(tmpl, &doc); err != nil {
		b.Fatal(err)
	}
	tmplJSON, _ := json.Marshal(doc)
	for name, body := range map[string][]byte{"launch": launch, "template": tmplJSON} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, dup := duplicateKey(body); dup {
					b.Fatal("duplicate")
				}
			}
		})
		// The baseline: decoding the same body, as the handler does anyway.
		b.Run(name+"/baseline-decode", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var v any
				if err := json.Unmarshal(body, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
