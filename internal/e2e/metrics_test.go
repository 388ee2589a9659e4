package e2e_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestOwnMetricsOnCluster: a launch that Kueue admits and the cluster runs
// shows in Gantry's /metrics as an apply, an admission wait, informer lag
// and work on the controllers' queues, and the text passes promtool. Then
// an estimate (the team's queue usage, free GPUs) and a stop of a queued
// Job (through its Kueue Workload): the calls the chart's RBAC must allow.
// The stopped Job is one that can never be admitted (two H100s in team
// tight, whose quota is one), so it is still queued when the stop comes: a
// Job on the simulated fleet completes a second after it starts.
func TestOwnMetricsOnCluster(t *testing.T) {
	alone(t)
	// This server keeps the capacity informers the others leave off (as
	// production does): its estimate below reads them, as the chart's
	// ServiceAccount (which checkRBAC sees watch the nodes).
	g := start(t, storetest.SQLitePath(t), true, func(c *config.Config) { c.CapacityInformers = true })
	one := model.LaunchRequest{Template: "pytorch-train", Team: "metrics", Gpu: &model.GPUChoice{Count: new(1)}}
	s, w := g.launch(one)
	if s != 201 {
		t.Fatalf("launch: %d", s)
	}
	g.waitStatus(w.Id, "Running")
	want := []string{
		`gantry_kube_apply_duration_seconds_count{outcome="ok"}`,
		`gantry_kueue_admission_wait_seconds_count`,
		`gantry_informer_lag_seconds_count{resource="pods"}`,
		`gantry_workqueue_adds_total{queue="workloads"}`,
		`gantry_workqueue_adds_total{queue="kueue_workloads"}`,
		`gantry_image_verifications_total{result="verified"}`,
	}
	var text string
	waitfor.Until(t, 30*time.Second, "the launch's measurements in /metrics", func() error {
		r, err := g.api.GetGantryMetricsWithResponse(t.Context())
		if err != nil {
			return err
		}
		text = string(r.Body)
		for _, m := range want {
			if v, ok := sample(text, m); !ok || v < 1 {
				return fmt.Errorf("%s is %v (found %v)", m, v, ok)
			}
		}
		return nil
	})
	if est := servertest.Must(g.api.EstimateWorkloadWithResponse(t.Context(), nil, one))(t); est.StatusCode() != 200 || !servertest.Deref(est.JSON200).Known {
		t.Errorf("estimate on the cluster: %d %s", est.StatusCode(), est.Body)
	}
	s, queued := g.launch(model.LaunchRequest{Template: "pytorch-train", Team: "tight", Gpu: &model.GPUChoice{Class: new("H100-80GB"), Count: new(2)}})
	if s != 201 {
		t.Fatalf("launch of the queued Job: %d", s)
	}
	g.waitStatus(queued.Id, "Queued")
	if s, _ := g.stop(queued.Id); s != 200 {
		t.Errorf("stop: %d", s)
	}
	g.waitStatus(queued.Id, "Stopped")
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
}

// sample is the value of the series named exactly series (name and labels)
// in Prometheus text.
func sample(text, series string) (float64, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}
