package advice

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/replay"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// played runs replay profiles on devices for d at 10 s samples and returns
// their series as a Source returns them at step 10 s (one point a sample).
func played(t *testing.T, d time.Duration, gpus []replay.GPU, profiles map[string]string) []telemetry.Series {
	t.Helper()
	n := replay.NewNode(gpus)
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for dev, name := range profiles {
		p, err := replay.Lookup(name, dev)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Play(dev, p, start, 1); err != nil {
			t.Fatal(err)
		}
	}
	series := map[string]*telemetry.Series{}
	var order []string
	for at := start; at.Before(start.Add(d)); at = at.Add(10 * time.Second) {
		ss, err := n.Sample(context.Background(), at)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			if _, held := profiles[s.Device.ID()]; !held {
				continue
			}
			for _, m := range telemetry.AllMetrics() {
				v := s.Values[m]
				if math.IsNaN(v) {
					continue
				}
				k := s.Device.ID() + "/" + m.String()
				if series[k] == nil {
					series[k] = &telemetry.Series{Metric: m, Device: s.Device}
					order = append(order, k)
				}
				series[k].Points = append(series[k].Points, telemetry.Point{T: at, Avg: v, Max: v, P95: v, N: 1})
			}
		}
	}
	out := make([]telemetry.Series, len(order))
	for i, k := range order {
		out[i] = *series[k]
	}
	return out
}

var (
	h100GPU  = replay.GPU{UUID: "GPU-1", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}
	h100GPU2 = replay.GPU{UUID: "GPU-2", Index: 1, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}
	l4GPU    = replay.GPU{UUID: "GPU-3", Index: 0, Model: "NVIDIA L4", MemoryMiB: 23034}
)

func kinds(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Kind)
	}
	return out
}

// TestRecommendOnlyWhatTheTemplateAllows: a smaller profile the template
// does not list is advice for the platform team, not a choice to apply.
func TestRecommendOnlyWhatTheTemplateAllows(t *testing.T) {
	series := played(t, 4*time.Hour, []replay.GPU{h100GPU}, map[string]string{"GPU-1": "trace:1"})
	in := Input{Workload: "w1", Class: h100(t), Count: 1, Template: "vllm-inference", Series: series, Step: 10 * time.Second,
		From: series[0].Points[0].T, To: series[0].Points[len(series[0].Points)-1].T}
	for _, f := range Advise(in) {
		if f.Kind == KindOverProvisioned {
			if f.Recommend != nil || !strings.Contains(f.Action, "ask the platform team") || !strings.Contains(f.Action, "vllm-inference") || f.MonthlyUSD <= 0 {
				t.Fatalf("%+v", f)
			}
			return
		}
	}
	t.Fatal("no over-provisioned finding")
}

// TestFindings: each pattern the replay profiles make gets its finding, and
// not the findings of other patterns.
func TestFindings(t *testing.T) {
	c := h100(t)
	for _, tc := range []struct {
		name      string
		gpus      []replay.GPU
		profiles  map[string]string
		profile   string // the MIG profile launched with
		count     int
		d         time.Duration
		unhealthy []string
		noTensor  bool // the tensor pipes never ran
		// progressAgo: its run's reports last went forward this long
		// before the window's end (0: it reports none)
		progressAgo time.Duration
		stalled     *Stalled
		usedAgo     time.Duration
		want        []string
		not         []string
	}{
		{name: "compute-bound", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "compute-bound"}, d: 3 * time.Hour,
			want: []string{KindWellUsed}, not: []string{KindIdle, KindOverProvisioned, KindMemoryBound, KindInputStarved, KindTensorUnused}},
		{name: "memory-bound", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "memory-bound"}, d: time.Hour,
			want: []string{KindMemoryBound}, not: []string{KindWellUsed, KindIdle, KindTensorUnused}},
		{name: "memory-bound without tensor cores", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "memory-bound"}, d: time.Hour, noTensor: true,
			want: []string{KindMemoryBound, KindTensorUnused}},
		{name: "input-starved", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "input-starved"}, d: time.Hour,
			want: []string{KindInputStarved}, not: []string{KindIdle, KindMemoryBound}},
		{name: "pcie-bound", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "pcie-bound"}, d: time.Hour,
			want: []string{KindInterconnect}, not: []string{KindIdle, KindWellUsed}},
		{name: "idle", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "idle"}, d: time.Hour,
			want: []string{KindIdle}, not: []string{KindOverProvisioned}},
		// A run that progressed in the window waited on data: not idle.
		{name: "idle GPU, its run progressing", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "idle"}, d: time.Hour, progressAgo: 5 * time.Minute,
			not: []string{KindIdle}},
		// A notebook a person used in the window (a page, a cell, a kernel
		// executing) is not idle either; one last used before it is.
		{name: "idle GPU, a person used it", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "idle"}, d: time.Hour, usedAgo: 10 * time.Minute,
			not: []string{KindIdle}},
		{name: "idle GPU, last used before the window", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "idle"}, d: time.Hour, usedAgo: 3 * time.Hour,
			want: []string{KindIdle}},
		{name: "idle GPU, its run's progress before the window", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "idle"}, d: time.Hour, progressAgo: 2 * time.Hour,
			want: []string{KindIdle}},
		// Its run's rule (action advise) found it stalled: said whatever
		// its GPU did.
		{name: "a stalled run", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "compute-bound"}, d: time.Hour,
			stalled: &Stalled{Rule: "plateau", Reason: "val_loss not better by 0.01 for 5 reports; $37.00 so far, $120.00 to finish"},
			want:    []string{KindStalledRun, KindWellUsed}},
		{name: "near OOM", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "near-oom"}, d: time.Hour,
			want: []string{KindNearOOM}, not: []string{KindOverProvisioned}},
		{name: "throttled", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "power-throttled"}, d: time.Hour,
			want: []string{KindThrottled}},
		{name: "two GPUs, one used", gpus: []replay.GPU{h100GPU, h100GPU2}, profiles: map[string]string{"GPU-1": "compute-bound", "GPU-2": "idle"}, count: 2, d: time.Hour,
			want: []string{KindFewerGPUs}},
		{name: "too little data", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "compute-bound"}, d: 5 * time.Minute,
			want: []string{KindTooLittleSamples}, not: []string{KindWellUsed}},
		{name: "unhealthy GPU", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "compute-bound"}, d: time.Hour, unhealthy: []string{"critical XID 79"},
			want: []string{KindUnhealthy, KindWellUsed}},
		{name: "a trace pod on a whole H100: smaller profile", gpus: []replay.GPU{h100GPU}, profiles: map[string]string{"GPU-1": "trace:1"}, d: 4 * time.Hour,
			want: []string{KindOverProvisioned}, not: []string{KindNearOOM}},
		{name: "an L4 has no SM activity: utilization stands in", gpus: []replay.GPU{l4GPU}, profiles: map[string]string{"GPU-3": "idle"}, d: time.Hour,
			want: []string{KindIdle}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			series := played(t, tc.d, tc.gpus, tc.profiles)
			for _, s := range series {
				if tc.noTensor && s.Metric == telemetry.TensorActive {
					for i := range s.Points {
						s.Points[i] = telemetry.Point{T: s.Points[i].T, N: 1}
					}
				}
			}
			in := Input{Workload: "w1", Class: c, Allowed: []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb"}, Count: max(1, tc.count), Profile: tc.profile, Series: series, Step: 10 * time.Second,
				From: series[0].Points[0].T, To: series[0].Points[len(series[0].Points)-1].T, Unhealthy: tc.unhealthy}
			if tc.progressAgo > 0 {
				in.ProgressAt = in.To.Add(-tc.progressAgo)
			}
			in.Stalled = tc.stalled
			if tc.usedAgo > 0 {
				in.UsedAt = in.To.Add(-tc.usedAgo)
			}
			fs := Advise(in)
			got := kinds(fs)
			for _, k := range tc.want {
				if !slices.Contains(got, k) {
					t.Errorf("no %s finding: %v", k, got)
				}
			}
			for _, k := range tc.not {
				if slices.Contains(got, k) {
					t.Errorf("a %s finding it should not have: %v", k, got)
				}
			}
			for _, f := range fs {
				if f.Reason == "" || f.Action == "" || (f.Kind != KindTooLittleSamples && f.Kind != KindUnhealthy && len(f.Evidence) == 0) || len(f.Series) == 0 && f.Kind != KindUnhealthy && f.Kind != KindTooLittleSamples && f.Kind != KindStalledRun {
					t.Errorf("%s: reason, action, evidence and series are required: %+v", f.Kind, f)
				}
				if f.Kind == KindStalledRun && (!strings.Contains(f.Reason, "stalled run (plateau): val_loss") || !strings.Contains(f.Reason, "$120.00 to finish") || !strings.Contains(f.Action, "/api/v1/workloads/w1/progress/keep")) {
					t.Errorf("%s: reason, action, evidence and series are required: %+v", f.Kind, f)
				}
				if f.Kind == KindOverProvisioned && (f.Recommend == nil || f.MonthlyUSD <= 0 || !strings.Contains(f.Reason, f.Recommend.Profile)) {
					t.Errorf("over-provisioned without a choice and its dollars: %+v", f)
				}
				if f.Kind == KindIdle && f.MonthlyUSD != math.Round(c.Price.OnDemand*730*100)/100 {
					t.Errorf("idle: %v $/month, want the whole GPU's %v", f.MonthlyUSD, c.Price.OnDemand*730)
				}
			}
		})
	}
}
