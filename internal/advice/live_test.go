package advice

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// TestLive: the online rules on ingested readings — an idle workload is
// stopped by the fleet-aware rule, right-sized after its warm-up, and the
// stop is withdrawn once it runs again; the decisions become findings.
func TestLive(t *testing.T) {
	c := h100(t)
	classes, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	live, err := NewLive(LiveOptions{Classes: classes, Lookup: func(context.Context, string) (string, string, error) { return "jupyter-notebook", c.Name, nil }})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	reading := func(at time.Time, util float64) telemetry.Stored {
		v := telemetry.NoValues()
		v[telemetry.GPUUtil], v[telemetry.FBUsed] = util, 10*1024
		return telemetry.Stored{Series: telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-1"}, Workload: "w1"}, Time: at, Share: 1, Values: v}
	}
	var batch []telemetry.Stored
	for at := start; at.Before(start.Add(30 * time.Minute)); at = at.Add(10 * time.Second) {
		batch = append(batch, reading(at, 0))
	}
	live.Observe(context.Background(), batch)
	ds := live.Decisions("w1")
	actions := func(ds []Decision) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Action+" "+d.Profile)
		}
		slices.Sort(out)
		return out
	}
	if got := actions(ds); !slices.Equal(got, []string{"resize 1g.20gb", "stop "}) {
		t.Fatalf("decisions after 30 idle minutes: %v", got)
	}
	if got := actions(live.Decisions("w2")); len(got) != 0 {
		t.Fatalf("another workload's decisions: %v", got)
	}
	fs := withDecisions(nil, ds, Input{Class: c, Count: 1, Allowed: []string{"1g.10gb", "1g.20gb"}})
	if ks := kinds(fs); !slices.Equal(ks, []string{KindIdle, KindOverProvisioned}) && !slices.Equal(ks, []string{KindOverProvisioned, KindIdle}) {
		t.Fatalf("findings: %v", ks)
	}
	for _, f := range fs {
		if f.MonthlyUSD <= 0 || f.Reason == "" {
			t.Errorf("%s: %+v", f.Kind, f)
		}
	}
	// The online rule's stop is not said of a workload its run progressed
	// in, or a person used, within the window: neither is idle.
	for name, in := range map[string]Input{
		"progressed": {Class: c, Count: 1, Allowed: []string{"1g.10gb", "1g.20gb"}, From: start, ProgressAt: start.Add(20 * time.Minute)},
		"used":       {Class: c, Count: 1, Allowed: []string{"1g.10gb", "1g.20gb"}, From: start, UsedAt: start.Add(20 * time.Minute)},
	} {
		if ks := kinds(withDecisions(nil, ds, in)); slices.Contains(ks, KindIdle) {
			t.Errorf("%s in the window: findings %v, want no idle", name, ks)
		}
	}
	live.Observe(context.Background(), []telemetry.Stored{reading(start.Add(31*time.Minute), 80)})
	if got := actions(live.Decisions("w1")); !slices.Equal(got, []string{"resize 1g.20gb"}) {
		t.Fatalf("after it ran again the stop must be withdrawn: %v", got)
	}
}

// TestLiveLullEndsForEveryWorkload: when a quiet fleet wakes, the decision
// to move back to the whole GPU reaches every workload sized down in the
// lull, not the one whose reading woke it.
func TestLiveLullEndsForEveryWorkload(t *testing.T) {
	c := h100(t)
	classes, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	live, err := NewLive(LiveOptions{Classes: classes, Lookup: func(context.Context, string) (string, string, error) { return "vllm", c.Name, nil }})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	reading := func(wl string, at time.Time, util, memMiB float64) telemetry.Stored {
		v := telemetry.NoValues()
		v[telemetry.GPUUtil], v[telemetry.FBUsed] = util, memMiB
		return telemetry.Stored{Series: telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-" + wl}, Workload: wl}, Time: at, Share: 1, Values: v}
	}
	wls := []string{"w1", "w2", "w3"}
	resize := func(wl string) string {
		for _, d := range live.Decisions(wl) {
			if d.Action == Resize {
				return d.Profile
			}
		}
		return ""
	}
	for m := 0; m < 4*60; m++ {
		at := start.Add(time.Duration(m) * time.Minute)
		util, mem := 60.0, 20*1024.0
		if m == 12 {
			mem = 30 * 1024 // each workload's peak: it moves up to the whole GPU
		}
		if m >= 30 && m < 180 {
			util = 0 // the fleet's quiet hours
		}
		for _, wl := range wls {
			live.Observe(context.Background(), []telemetry.Stored{reading(wl, at, util, mem)})
		}
		if m == 170 {
			for _, wl := range wls {
				if got := resize(wl); got != "3g.40gb" {
					t.Fatalf("%s during the lull: resize %q, want 3g.40gb", wl, got)
				}
				var lull *Finding
				for _, f := range withDecisions(nil, live.Decisions(wl), Input{Class: c, Count: 1, Allowed: []string{"3g.40gb"}}) {
					if f.Kind == KindOverProvisioned {
						lull = &f
					}
				}
				// The fleet has been quiet for most of the time watched: the
				// dollars are most of a half GPU's month.
				half := c.Price.OnDemand * hoursPerMonth / 2
				if lull == nil || lull.Recommend != nil || !strings.Contains(lull.Action, "quiet hours") || lull.MonthlyUSD < 0.3*half || lull.MonthlyUSD > 0.6*half {
					t.Fatalf("%s during the lull: a quiet-hours finding without a one-click relaunch, worth about %.0f a month, got %+v", wl, 0.45*half, lull)
				}
			}
		}
	}
	for _, wl := range wls {
		if got := resize(wl); got != "7g.80gb" {
			t.Errorf("%s after the fleet woke: resize %q, want 7g.80gb", wl, got)
		}
	}
}
