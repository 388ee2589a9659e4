package server_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestMedianAgainstTheTeamsEarlierRuns: the cpu-train template's median
// rule compares a run with the earlier runs of the template in its own
// team, read from the store as the server wires it. Three earlier vision
// runs reached a loss of 0.5, 0.4 and 0.3 by step 100; an nlp run reached
// 0.01. A vision run at 0.38 is not flagged (the vision median is 0.4;
// with the nlp run counted it would be 0.35), and the next at 0.45 is.
func TestMedianAgainstTheTeamsEarlierRuns(t *testing.T) {
	// A policy in which nlp may launch cpu-train too.
	dir := t.TempDir()
	for _, f := range []string{"model.conf", "roles.csv", "bindings.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "policy", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "bindings.yaml" {
			b = []byte(strings.Replace(string(b), "templates: [vllm-inference, batch-inference,", "templates: [cpu-train, vllm-inference, batch-inference,", 1))
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := servertest.New(t, func(c *config.Config) { c.PolicyDir = dir })
	admin := identity.Identity{Issuer: "https://idp", Subject: "ada", Groups: []string{"gantry-admins"}, SecondFactor: true}
	launch := func(tm team.Name) workload.Workload {
		w, _, err := g.Workloads.Create(identity.With(context.Background(), admin), admin.String(),
			workload.Request{Template: "cpu-train", Team: tm, Choice: template.Choice{CPUOnly: true}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// train reports steps 10 to 200 of a run whose loss falls to final by
	// step 100, and returns the verdict, if any.
	at := time.Now().Add(-time.Hour)
	train := func(w workload.Workload, final float64) *runs.Verdict {
		ctx := identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: w.ID, Pod: g.Workloads.Namespace(w) + "/train-" + w.ID})
		var sum runs.Summary
		for step := int64(10); step <= 200; step += 10 {
			at = at.Add(time.Second)
			loss := 1 - (1-final)*math.Min(1, float64(step)/100)
			var err error
			sum, err = g.Runs.Report(ctx, w.ID, []runs.Report{{Time: at, Step: step, TotalSteps: 1000, Epoch: math.NaN(), ResumedFrom: -1,
				Metrics: map[string]float64{"loss": loss}}})
			if err != nil {
				t.Fatal(err)
			}
		}
		return sum.Verdict
	}
	for _, final := range []float64{0.5, 0.4, 0.3} {
		if v := train(launch("vision"), final); v != nil {
			t.Fatalf("an earlier run (final loss %v) was judged with fewer than three before it: %+v", final, v)
		}
	}
	train(launch("nlp"), 0.01)
	if v := train(launch("vision"), 0.38); v != nil {
		t.Fatalf("a run better than its team's median was flagged: %+v", v)
	}
	v := train(launch("vision"), 0.45)
	if v == nil || v.Rule != "median" || v.Action != template.AdviseRun || !strings.Contains(v.Reason, "loss's best so far, 0.45, is worse than the median 0.39 of the best that 4 earlier runs") {
		t.Fatalf("a run worse than its team's median: %+v", v)
	}
}
