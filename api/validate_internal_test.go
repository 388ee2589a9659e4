package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/identity"
)

// TestUnknownAPIPathsStopAtTheGate: a path under /api that the spec does not
// declare never reaches a handler (whatever else might be routed there), while
// the portal's paths pass through.
func TestUnknownAPIPathsStopAtTheGate(t *testing.T) {
	mw, err := validator(gantry.OpenAPI, func(identity.Identity, access.Permission) bool { return true }, nil, nil)
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
