package devrun

import (
	"context"
	"math"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

func TestModel(t *testing.T) {
	for _, tc := range []struct {
		class string
		gpus  int
		want  float64
	}{
		{"A100-80GB", 1, 1},
		{"A100-80GB", 2, 1.06},
		{"H100-80GB", 1, 0.7*312/989 + 0.3*2039/3350.0},
		{"H100-80GB", 4, (0.7*312/989 + 0.3*2039/3350.0) * 1.12},
		{"A100-40GB", 1, 0.7 + 0.3*2039/1555.0}, // less bandwidth: slower than the 80 GB
		{"L4", 2, (0.7*312/121 + 0.3*2039/300.0) * 1.2},
	} {
		got, ok := Model(tc.class, tc.gpus)
		if !ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s × %d: %v s a step, want %v", tc.class, tc.gpus, got, tc.want)
		}
	}
	if _, ok := Model("B200", 1); ok {
		t.Error("a class without figures was modelled")
	}
	classes := starterClasses(t)
	h100, _ := classes.Get("H100-80GB")
	for _, tc := range []struct {
		profile string
		want    float64
	}{
		{"3g.40gb", 0.7*312*7/(989*3.0) + 0.3*2039*2/3350.0},
		{"1g.10gb", 0.7*312*7/989.0 + 0.3*2039*8/3350.0},
		{"7g.80gb", 0.7*312/989 + 0.3*2039/3350.0}, // the whole GPU
	} {
		p, ok := h100.Profile(tc.profile)
		if !ok {
			t.Fatalf("H100-80GB offers no %s", tc.profile)
		}
		if got, ok := SliceModel("H100-80GB", p); !ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("H100-80GB %s: %v s a step, want %v", tc.profile, got, tc.want)
		}
	}
}

// starterClasses is the starter catalog's GPU classes.
func starterClasses(t *testing.T) *gpu.Catalog {
	t.Helper()
	classes, _, err := template.LoadCatalog("../../../templates")
	if err != nil {
		t.Fatal(err)
	}
	return classes
}

type fleet []workload.Workload

func (f fleet) ListWorkloads(_ context.Context, fl workload.Filter) ([]workload.Workload, error) {
	var out []workload.Workload
	for _, w := range f {
		if w.Status == fl.Status {
			out = append(out, w)
		}
	}
	return out, nil
}
func (fleet) Namespace(w workload.Workload) string { return "gantry-" + w.Team.String() }

type recorder map[string][]runs.Report

func (r recorder) Report(ctx context.Context, id string, rs []runs.Report) (runs.Summary, error) {
	if c, _ := identity.From(ctx); c.Via != identity.ViaRun || c.Workload != id || c.Pod != "gantry-vision/devrun-"+id {
		panic("reported as " + c.String())
	}
	r[id] = append(r[id], rs...)
	return runs.Summary{}, nil
}

// TestPass: only Running trial runs report, each step once, at the times
// the model gives (within the jitter), and the pace measured from them is
// the model's.
func TestPass(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0.Add(30 * time.Second))
	caps := &workload.Trial{ID: "trial1", Steps: 200}
	f := fleet{
		{ID: "h100x2", Team: "vision", GPUClass: "H100-80GB", GPUCount: 2, Status: workload.Running, RunningSince: t0, Trial: caps},
		{ID: "a100x1", Team: "vision", GPUClass: "A100-80GB", GPUCount: 1, Status: workload.Running, RunningSince: t0, Trial: caps},
		{ID: "notrial", Team: "vision", GPUClass: "H100-80GB", GPUCount: 1, Status: workload.Running, RunningSince: t0},
		{ID: "queued", Team: "vision", GPUClass: "H100-80GB", GPUCount: 1, Status: workload.Queued, Trial: caps},
		{ID: "b200", Team: "vision", GPUClass: "B200", GPUCount: 1, Status: workload.Running, RunningSince: t0, Trial: caps},
		{ID: "h100mig3g", Team: "vision", GPUClass: "H100-80GB", GPUCount: 1, MIGProfile: "3g.40gb", Status: workload.Running, RunningSince: t0, Trial: caps},
		{ID: "h100mig0g", Team: "vision", GPUClass: "H100-80GB", GPUCount: 1, MIGProfile: "0g.0gb", Status: workload.Running, RunningSince: t0, Trial: caps},
	}
	rec := recorder{}
	p := &player{o: Options{Workloads: f, Runs: rec, Clock: clk, Classes: starterClasses(t)}, last: map[string]int64{}}
	for range 3 {
		if err := p.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.Step(10 * time.Second)
	}
	if len(rec) != 3 || rec["notrial"] != nil || rec["queued"] != nil || rec["b200"] != nil || rec["h100mig0g"] != nil {
		t.Fatalf("reported for %v", keys(rec))
	}
	for id, wantStep := range map[string]float64{"h100x2": (0.7*312/989 + 0.3*2039/3350.0) * 1.06, "a100x1": 1, "h100mig3g": 0.7*312*7/(989*3.0) + 0.3*2039*2/3350.0} {
		rs := rec[id]
		for i, r := range rs {
			if r.Step != int64(i+1) || r.TotalSteps != int64(FullSteps/map[string]int{"h100x2": 2, "a100x1": 1, "h100mig3g": 1}[id]) {
				t.Fatalf("%s: report %d is step %d of %d", id, i, r.Step, r.TotalSteps)
			}
		}
		last := rs[len(rs)-1]
		pace := last.Time.Sub(t0).Seconds() / float64(last.Step)
		if math.Abs(pace-wantStep)/wantStep > 0.03 || last.Time.After(t0.Add(50*time.Second)) {
			t.Fatalf("%s: %d steps by %s, %.3f s a step; want about %.3f", id, last.Step, last.Time.Sub(t0), pace, wantStep)
		}
		if want := int64(50 / wantStep); last.Step < want-3 || last.Step > want+3 {
			t.Fatalf("%s: %d steps in 50 s, want about %d", id, last.Step, want)
		}
	}
}

func keys(m recorder) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
