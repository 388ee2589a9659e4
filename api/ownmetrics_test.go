package api_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/servertest"
)

// TestOwnMetrics: GET /metrics is public Prometheus text that counts
// requests by route template (not by path) and code and launches by
// outcome, and passes promtool check metrics (where installed; CI has it).
func TestOwnMetrics(t *testing.T) {
	e := newEnv(t, alice)
	ctx := t.Context()
	r := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d", r.StatusCode())
	}
	id := r.JSON201.Id
	if s := servertest.Must(e.api.GetWorkloadWithResponse(ctx, id))(t).StatusCode(); s != 200 {
		t.Fatalf("get: %d", s)
	}
	if s := servertest.Must(e.api.GetWorkloadWithResponse(ctx, "zzzzzzzzzz"))(t).StatusCode(); s != 404 {
		t.Fatalf("missing workload: %d", s)
	}
	m := servertest.Must(newClient(e.url, "", "").GetGantryMetricsWithResponse(ctx))(t) // no credentials: public
	text := string(m.Body)
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
	if m.StatusCode() != 200 || strings.Contains(text, id) {
		t.Errorf("status %d; a workload id in the metrics: %v", m.StatusCode(), strings.Contains(text, id))
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
}
