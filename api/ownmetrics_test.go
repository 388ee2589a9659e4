package api_test

import (
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// TestOwnMetrics: GET /metrics is public Prometheus text that counts
// requests by route template (not by path) and code and launches by
// outcome, and passes promtool check metrics (where installed; CI has it).
func TestOwnMetrics(t *testing.T) {
	e := newEnv(t, alice)
	var w struct{ ID string }
	if s, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "vision"}, &w); s != 201 {
		t.Fatalf("launch: %d", s)
	}
	if s, _ := e.do("GET", "/api/v1/workloads/"+w.ID, nil, nil); s != 200 {
		t.Fatalf("get: %d", s)
	}
	if s, _ := e.do("GET", "/api/v1/workloads/zzzzzzzzzz", nil, nil); s != 404 {
		t.Fatalf("missing workload: %d", s)
	}
	resp, err := http.Get(e.url + "/metrics") // no credentials: public
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{
		`gantry_http_requests_total{code="201",method="POST",route="/api/v1/workloads"} 1`,
		`gantry_http_requests_total{code="200",method="GET",route="/api/v1/workloads/:id"} 1`,
		`gantry_http_requests_total{code="404",method="GET",route="/api/v1/workloads/:id"} 1`,
		`gantry_launches_total{outcome="started"} 1`,
		`gantry_http_request_duration_seconds_bucket{method="POST",route="/api/v1/workloads",le="+Inf"} 1`,
		`gantry_image_verifications_total{result="verified"} `,
		`gantry_image_verifications_total{result="cache_hit"} `,
		"go_goroutines ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in /metrics", want)
		}
	}
	if resp.StatusCode != 200 || strings.Contains(text, w.ID) {
		t.Errorf("status %d; a workload id in the metrics: %v", resp.StatusCode, strings.Contains(text, w.ID))
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
}
