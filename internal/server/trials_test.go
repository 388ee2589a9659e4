package server_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/trial"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestTrial runs a trial of pytorch-train on two classes and two GPU
// counts as the server wires it: each run is a launch capped in time and
// steps, its reports measure it, the step cap stops it, and the trial
// names the cheapest full run within the deadline.
func TestTrial(t *testing.T) {
	g := servertest.New(t, func(c *config.Config) { c.Runs.ReportURL = "http://gantry.gantry-system.svc:8080" })
	admin := identity.Identity{Issuer: "https://idp", Subject: "ada", Groups: []string{"gantry-admins"}, SecondFactor: true}
	ctx := identity.With(context.Background(), admin)
	before, err := g.Store.ListWorkloads(ctx, workload.Filter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}

	// A class the template does not offer refuses the whole trial, and
	// launches nothing.
	_, _, err = g.Trials.Create(ctx, admin.String(), "vision", trial.Spec{Template: "pytorch-train", Classes: []string{"H100-80GB", "L4"}, Steps: 100}, "")
	var inv *fault.Invalid
	if !errors.As(err, &inv) || len(inv.Fields) != 1 || inv.Fields[0].Path != "classes[1]" || !strings.Contains(inv.Fields[0].Message, "L4 × 1 GPUs (gpus[0]):") {
		t.Fatalf("a class the template does not offer: %v", err)
	}
	if after, _ := g.Store.ListWorkloads(ctx, workload.Filter{Limit: 500}); len(after) != len(before) {
		t.Fatalf("a refused trial launched %d workloads", len(after)-len(before))
	}

	spec := trial.Spec{Template: "pytorch-train", Classes: []string{"H100-80GB", "A100-80GB"}, GPUs: []int{1, 2}, Steps: 100, Deadline: time.Hour}
	tr, replayed, err := g.Trials.Create(ctx, admin.String(), "vision", spec, "key-1")
	if err != nil || replayed {
		t.Fatal(replayed, err)
	}
	// The same key again: the same trial, nothing new launched; with
	// another request: a conflict.
	again, replayed, err := g.Trials.Create(ctx, admin.String(), "vision", spec, "key-1")
	if err != nil || !replayed || again.ID != tr.ID {
		t.Fatalf("a repeat under the same key: %v %v %v", again.ID, replayed, err)
	}
	var keyConflict *fault.Conflict
	other := spec
	other.Steps = 50
	if _, _, err := g.Trials.Create(ctx, admin.String(), "vision", other, "key-1"); !errors.As(err, &keyConflict) || !strings.Contains(err.Error(), "was used for a different trial request") {
		t.Fatalf("the same key for another request: %v", err)
	}
	if ws, _ := g.Store.ListWorkloads(ctx, workload.Filter{Limit: 500}); len(ws) != len(before)+4 {
		t.Fatalf("%d workloads launched, want the trial's 4", len(ws)-len(before))
	}
	if len(tr.Runs) != 4 {
		t.Fatalf("runs: %+v", tr.Runs)
	}
	// Each run reports as the per-class model says: a step takes 0.4 s on
	// an H100 and 1.2 s on an A100, 6 % more on two GPUs, which share the
	// full run's 10,000 steps.
	secs := map[string]float64{"H100-80GB": 0.4, "A100-80GB": 1.2}
	t0 := time.Now().Add(-time.Hour)
	for _, r := range tr.Runs {
		w, err := g.Store.Workload(ctx, r.Workload)
		if err != nil {
			t.Fatalf("run %+v: %v", r, err)
		}
		if w.Trial == nil || w.Trial.ID != tr.ID || w.Trial.Steps != 100 || w.GPUClass != r.Class || w.GPUCount != r.GPUs {
			t.Fatalf("run %+v is workload %+v", r, w)
		}
		// The template's 72 h are capped at the trial's default 30 min.
		if got := w.ExpiresAt.Sub(w.CreatedAt); got != trial.DefaultMaxRuntime {
			t.Fatalf("run %s expires %s after its launch, want the trial's %s", w.ID, got, trial.DefaultMaxRuntime)
		}
		per := secs[r.Class] * (1 + 0.06*math.Log2(float64(r.GPUs)))
		rctx := identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: w.ID, Pod: g.Workloads.Namespace(w) + "/train-" + w.ID})
		var sum runs.Summary
		for step := int64(10); step <= 100; step += 10 {
			sum, err = g.Runs.Report(rctx, w.ID, []runs.Report{{Time: t0.Add(time.Duration(float64(step) * per * float64(time.Second))), Step: step,
				TotalSteps: 10000 / int64(r.GPUs), Epoch: math.NaN(), ResumedFrom: -1, Metrics: map[string]float64{"samples_per_s": 64 * float64(r.GPUs) / per}}})
			if err != nil {
				t.Fatal(err)
			}
			if step < 100 && sum.Verdict != nil {
				t.Fatalf("run %s stopped at step %d: %+v", w.ID, step, sum.Verdict)
			}
		}
		if sum.Verdict == nil || sum.Verdict.Rule != "maxSteps" || sum.Verdict.Action != "stop" {
			t.Fatalf("run %s at its cap of 100 steps: %+v", w.ID, sum.Verdict)
		}
		if w, _ = g.Store.Workload(ctx, w.ID); w.Status != workload.Stopped || !strings.Contains(w.Reason, "its cap of 100 steps") {
			t.Fatalf("run %s after its cap: %s (%s)", w.ID, w.Status, w.Reason)
		}
		// A trial's run is not started again on its own, nor its caps
		// silenced.
		var conflict *fault.Conflict
		if _, err := g.Workloads.Start(ctx, w.ID); !errors.As(err, &conflict) || !strings.Contains(err.Error(), "is a run of trial "+tr.ID) {
			t.Fatalf("starting a trial's run again: %v", err)
		}
		if _, err := g.Runs.Keep(ctx, w.ID); !errors.As(err, &conflict) || !strings.Contains(err.Error(), "is a run of trial "+tr.ID) {
			t.Fatalf("keeping a trial's run going: %v", err)
		}
	}

	_, res, err := g.Trials.Get(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Full runs: H100 × 1 4000 s ($7.67), × 2 2120 s ($8.13); A100 × 1
	// 12000 s, × 2 6360 s. Within the hour only H100 × 2.
	if !res.Done || res.Best < 0 || res.Runs[res.Best].Class != "H100-80GB" || res.Runs[res.Best].GPUs != 2 {
		t.Fatalf("best %d: %s", res.Best, res.Why)
	}
	h1, h2 := res.Runs[0], res.Runs[1]
	if math.Abs(h1.StepSeconds-0.4) > 1e-6 || h1.FullSteps != 10000 || h1.FullTime != 4000*time.Second || h1.FullCost != 7.67 || *h1.MeetsDeadline {
		t.Fatalf("H100 × 1: %+v", h1)
	}
	if h2.ThroughputMetric != "samples_per_s" || math.Abs(h2.Throughput-128/0.424) > 1e-6 || math.Abs(h2.Scaling-1/1.06) > 1e-3 || h2.FullCost != 8.13 {
		t.Fatalf("H100 × 2: %+v", h2)
	}
	if !strings.HasPrefix(res.Why, "H100-80GB × 2 is the cheapest of 4 measured choices that finishes within 1h0m0s: the full run (5000 steps) in 35m20s for $8.13") {
		t.Fatalf("why: %s", res.Why)
	}

	// Where the cluster's pods have no address to report to, a trial's
	// runs could be neither stopped at their steps nor measured: refused.
	bare := servertest.New(t)
	var unavailable *fault.Unavailable
	if _, _, err := bare.Trials.Create(ctx, admin.String(), "vision", trial.Spec{Template: "pytorch-train", Classes: []string{"H100-80GB"}, Steps: 100}, ""); !errors.As(err, &unavailable) {
		t.Fatalf("a trial without a report URL: %v", err)
	}

	// A team's trials are its readers': a caller who reads only nlp does
	// not see vision's.
	nlp := identity.With(context.Background(), identity.Identity{Issuer: "https://idp", Subject: "nina", Groups: []string{"ml-nlp"}})
	var nf *fault.NotFound
	if _, _, err := g.Trials.Get(nlp, tr.ID); !errors.As(err, &nf) {
		t.Fatalf("another team's trial: %v", err)
	}
	if ts, err := g.Trials.List(nlp, 50); err != nil || len(ts) != 0 {
		t.Fatalf("another team's trials listed: %v %v", ts, err)
	}
	if ts, err := g.Trials.List(ctx, 50); err != nil || len(ts) != 1 || ts[0].ID != tr.ID {
		t.Fatalf("the admin's list: %v %v", ts, err)
	}
}

// TestTrialOfMIGSlices: a trial tries MIG slices beside the whole GPU —
// each a launch of one slice, priced at its share — and measures them as
// it measures GPUs: the slice's run is named by its profile and scales
// against nothing.
func TestTrialOfMIGSlices(t *testing.T) {
	g := servertest.New(t, func(c *config.Config) { c.Runs.ReportURL = "http://gantry.gantry-system.svc:8080" })
	admin := identity.Identity{Issuer: "https://idp", Subject: "ada", Groups: []string{"gantry-admins"}, SecondFactor: true}
	ctx := identity.With(context.Background(), admin)
	spec := trial.Spec{Template: "batch-inference", Params: map[string]any{"input": "p.jsonl"}, Classes: []string{"H100-80GB", "H200-141GB"},
		MIGProfiles: []string{"3g.40gb"}, Steps: 100}
	// A class the template refuses is named once, under classes, not
	// again under the profile; a profile a class does not offer, under the
	// profile.
	_, _, err := g.Trials.Create(ctx, admin.String(), "vision", spec, "")
	var inv *fault.Invalid
	if !errors.As(err, &inv) || len(inv.Fields) != 1 || inv.Fields[0].Path != "classes[1]" {
		t.Fatalf("a class the template does not allow: %v", err)
	}
	spec.Classes = []string{"H100-80GB"}
	spec.MIGProfiles = []string{"3g.40gb", "1g.5gb"}
	if _, _, err = g.Trials.Create(ctx, admin.String(), "vision", spec, ""); !errors.As(err, &inv) || len(inv.Fields) != 1 || inv.Fields[0].Path != "migProfiles[1]" ||
		!strings.Contains(inv.Fields[0].Message, "H100-80GB with 1g.5gb (classes[0]):") {
		t.Fatalf("a profile the class does not offer: %v", err)
	}
	spec.MIGProfiles = []string{"3g.40gb"}
	tr, _, err := g.Trials.Create(ctx, admin.String(), "vision", spec, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Runs) != 2 || tr.Runs[0].MIGProfile != "" || tr.Runs[1].MIGProfile != "3g.40gb" || tr.Runs[1].GPUs != 1 {
		t.Fatalf("runs: %+v", tr.Runs)
	}
	// Per the simulated fleet's model (package devrun): 0.40 s a step on the
	// whole H100, 0.88 s on its 3g.40gb slice (3/7 of the SMs, half the
	// memory bandwidth).
	whole := 0.7*312/989 + 0.3*2039/3350.0
	slice := 0.7*312*7/(989*3.0) + 0.3*2039*2/3350.0
	t0 := time.Now().Add(-time.Hour)
	var price float64 // the whole GPU's an hour (spot: the template allows it)
	for i, r := range tr.Runs {
		w, err := g.Store.Workload(ctx, r.Workload)
		if err != nil {
			t.Fatal(err)
		}
		per := whole
		if i == 0 {
			price = w.PricePerHour
		} else {
			per = slice
			if w.MIGProfile != "3g.40gb" || w.GPUCount != 1 || price == 0 || math.Abs(w.PricePerHour-price/2) > 1e-9 {
				t.Fatalf("the slice's run is %s × %d %q at $%v/h, want one 3g.40gb at half the whole GPU's $%v", w.GPUClass, w.GPUCount, w.MIGProfile, w.PricePerHour, price)
			}
		}
		rctx := identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: w.ID, Pod: g.Workloads.Namespace(w) + "/run-" + w.ID})
		for step := int64(10); step <= 100; step += 10 {
			if _, err := g.Runs.Report(rctx, w.ID, []runs.Report{{Time: t0.Add(time.Duration(float64(step) * per * float64(time.Second))), Step: step,
				TotalSteps: 10000, Epoch: math.NaN(), ResumedFrom: -1}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, res, err := g.Trials.Get(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Runs[1]
	// Report times are kept to the microsecond: the median step may round
	// to either side of the model's, and the full run a second apart.
	if s.MIGProfile != "3g.40gb" || math.Abs(s.StepSeconds-slice) > 1e-3 || s.Scaling != 0 || math.Abs(s.FullTime.Seconds()-10000*slice) > 1 {
		t.Fatalf("the slice's run: %+v", s)
	}
	// The whole GPU: 4000 s at its price; the slice about 8805 s at half of it.
	want := math.Round(s.FullTime.Hours()*price/2*100) / 100
	if !res.Done || res.Best != 0 || !strings.HasPrefix(res.Why, "H100-80GB × 1 is the cheapest of 2 measured choices") || s.FullCost != want {
		t.Fatalf("best %d (%s); the slice's full run $%.2f, want $%.2f", res.Best, res.Why, s.FullCost, want)
	}
}
