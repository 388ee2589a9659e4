package advice

import (
	"context"
	"slices"
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
	live := NewLive(classes, func(context.Context, string) (string, string, error) { return "jupyter-notebook", c.Name, nil }, nil)
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
	live.Observe(context.Background(), []telemetry.Stored{reading(start.Add(31*time.Minute), 80)})
	if got := actions(live.Decisions("w1")); !slices.Equal(got, []string{"resize 1g.20gb"}) {
		t.Fatalf("after it ran again the stop must be withdrawn: %v", got)
	}
}
