package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCosts: showback answers JSON by default and CSV on request (a header
// line and one line per group), and names a bad period's field.
func TestCosts(t *testing.T) {
	e := newEnv(t, alice)
	var r struct {
		GroupBy, Currency string
		Total             float64
		Items             []struct{ Key string }
	}
	if s, _ := e.do("GET", "/api/v1/costs?groupBy=template", nil, &r); s != 200 || r.GroupBy != "template" || r.Currency != "USD" || r.Items == nil {
		t.Fatalf("costs: %d %+v", s, r)
	}
	req, _ := http.NewRequest("GET", e.url+"/api/v1/costs?format=csv&groupBy=gpuClass", nil)
	req.Header.Set("Authorization", "Bearer test.jwt.token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") || !strings.HasPrefix(string(body), "gpuClass,cost_usd,used_usd,idle_usd,unmeasured_usd,gpu_hours,workloads\n") {
		t.Fatalf("csv: %d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	// A team's month: the report's shape, and a month that is not one.
	var rep struct {
		Team, Month                      string
		Total                            float64
		ByUser, ByTemplate, ByCostCenter []struct{ Key string }
		Alerts                           []any
	}
	if s, _ := e.do("GET", "/api/v1/teams/vision/report?month=2026-11", nil, &rep); s != 200 || rep.Team != "vision" || rep.Month != "2026-11" || rep.ByUser == nil || rep.Alerts == nil {
		t.Fatalf("report: %d %+v", s, rep)
	}
	var bad struct{ Errors []struct{ Field string } }
	if s, _ := e.do("GET", "/api/v1/teams/vision/report?month=2026-13", nil, &bad); s != 422 && s != 400 {
		t.Fatalf("month 13: %d %+v", s, bad)
	}
	// A team's settings: within the templates' limits, or refused by field.
	var set struct {
		Team      string
		Templates map[string]struct{ IdleTimeout, Sleep string }
		UpdatedBy string
	}
	put := map[string]any{"templates": map[string]any{"jupyter-notebook": map[string]any{"idleTimeout": "6h"}, "dev-environment": map[string]any{"sleep": "weekdays 19:00-07:00 Europe/Paris"}}}
	if s, _ := e.do("PUT", "/api/v1/teams/vision/settings", put, &set); s != 200 || set.Templates["jupyter-notebook"].IdleTimeout != "6h" || set.UpdatedBy == "" {
		t.Fatalf("settings: %d %+v", s, set)
	}
	if s, _ := e.do("GET", "/api/v1/teams/vision/settings", nil, &set); s != 200 || set.Templates["dev-environment"].Sleep != "weekdays 19:00-07:00 Europe/Paris" {
		t.Fatalf("settings read back: %d %+v", s, set)
	}
	// Versions: the ETag of a read makes a change conditional (If-Match);
	// a change from an older version is refused with 412, and writes
	// nothing.
	_, h := e.do("GET", "/api/v1/teams/vision/settings", nil, nil)
	tag := h.Get("ETag")
	if tag != `"v1"` {
		t.Fatalf("the settings' ETag: %q, want \"v1\"", tag)
	}
	cond := func(ifMatch string, idle string) (int, http.Header) {
		req, _ := http.NewRequest("PUT", e.url+"/api/v1/teams/vision/settings", strings.NewReader(`{"templates":{"jupyter-notebook":{"idleTimeout":"`+idle+`"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer test.jwt.token")
		req.Header.Set("If-Match", ifMatch)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	if s, h := cond(tag, "5h"); s != 200 || h.Get("ETag") != `"v2"` {
		t.Fatalf("a change from the current version: %d %q", s, h.Get("ETag"))
	}
	if s, _ := cond(tag, "4h"); s != 412 {
		t.Fatalf("a change from the version before: %d, want 412", s)
	}
	if s, _ := cond("not-a-tag", "4h"); s != 422 {
		t.Fatalf("If-Match that is no ETag: %d, want 422", s)
	}
	if s, _ := e.do("GET", "/api/v1/teams/vision/settings", nil, &set); s != 200 || set.Templates["jupyter-notebook"].IdleTimeout != "5h" {
		t.Fatalf("after a refused change: %d %+v", s, set)
	}
	var refused struct{ Errors []struct{ Field string } }
	put = map[string]any{"templates": map[string]any{"jupyter-notebook": map[string]any{"idleTimeout": "72h"}, "pytorch-train": map[string]any{"sleep": "daily 19:00-07:00 UTC"}}}
	if s, _ := e.do("PUT", "/api/v1/teams/vision/settings", put, &refused); s != 422 || len(refused.Errors) != 2 ||
		refused.Errors[0].Field != "templates.jupyter-notebook.idleTimeout" || refused.Errors[1].Field != "templates.pytorch-train.sleep" {
		t.Fatalf("settings past the limits: %d %+v", s, refused)
	}
	var p struct{ Errors []struct{ Field string } }
	if s, _ := e.do("GET", "/api/v1/costs?from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z", nil, &p); s != 422 || len(p.Errors) == 0 || p.Errors[0].Field != "from" {
		t.Fatalf("a period ending before it starts: %d %+v", s, p)
	}
}
