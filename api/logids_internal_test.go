package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/gantryhq/gantry/internal/logctx"
)

// TestLogIDs: what a handler (or the domain code it calls) logs with the
// request's context carries the request id the response names, and on a
// workload's routes the workload id.
func TestLogIDs(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(logctx.Handler(slog.NewJSONHandler(&b, nil)))
	e := echo.New()
	e.Use(middleware.RequestID(), logIDs)
	h := func(c echo.Context) error {
		log.InfoContext(c.Request().Context(), "working")
		return c.NoContent(204)
	}
	e.GET("/api/v1/workloads/:id/logs", h)
	e.GET("/api/v1/templates", h)
	for _, tc := range []struct{ path, workload string }{{"/api/v1/workloads/w123/logs", "w123"}, {"/api/v1/templates", ""}} {
		b.Reset()
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		var line map[string]any
		if err := json.Unmarshal(b.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v: %s", tc.path, err, b.String())
		}
		id := rec.Header().Get(echo.HeaderXRequestID)
		if id == "" || line["request_id"] != id {
			t.Errorf("%s: request_id %v, the response's %q", tc.path, line["request_id"], id)
		}
		if w, _ := line["workload_id"].(string); w != tc.workload {
			t.Errorf("%s: workload_id %q, want %q", tc.path, w, tc.workload)
		}
	}
}
