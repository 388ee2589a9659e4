package trial

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// reports is a run's reports every `every` steps up to last, a step taking
// secs (the first interval takes warmup seconds more), with samples_per_s
// when sps > 0.
func reports(last, every int64, secs, warmup, sps float64) []runs.Report {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var rs []runs.Report
	at := t0
	for step := every; step <= last; step += every {
		d := float64(every) * secs
		if step == 2*every {
			d += warmup
		}
		if step > every {
			at = at.Add(time.Duration(d * float64(time.Second)))
		}
		r := runs.Report{Time: at, Step: step, Epoch: math.NaN(), ResumedFrom: -1, Metrics: map[string]float64{}}
		if sps > 0 {
			r.Metrics["samples_per_s"] = sps
		}
		rs = append(rs, r)
	}
	return rs
}

func TestObserve(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rs        []runs.Report
		total     int64
		wantSecs  float64
		wantThr   float64
		wantUnit  string
		intervals int
	}{
		{"the warm-up interval is left out", reports(200, 10, 0.5, 30, 0), 10000, 0.5, 2, "steps_per_s", 18},
		{"reported samples a second are the throughput", reports(200, 10, 0.25, 0, 512), 0, 0.25, 512, "samples_per_s", 18},
		{"two reports: one interval, kept", reports(20, 10, 2, 0, 0), 0, 2, 0.5, "steps_per_s", 1},
		{"a total of the trial's own steps is not the full run's", reports(200, 10, 0.5, 0, 0), 200, 0.5, 2, "steps_per_s", 18},
		{"one report: nothing measured", reports(10, 10, 2, 0, 0), 0, 0, 0, "", 0},
		{"a restart: only the latest attempt", append(reports(100, 10, 5, 0, 0), reports(60, 10, 1, 0, 0)...), 0, 1, 1, "steps_per_s", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Measured
			m.observe(runs.Summary{Reports: int64(len(tc.rs)), Step: tc.rs[len(tc.rs)-1].Step, TotalSteps: tc.total}, tc.rs, 200)
			if math.Abs(m.StepSeconds-tc.wantSecs) > 1e-9 || math.Abs(m.Throughput-tc.wantThr) > 1e-9 || m.ThroughputMetric != tc.wantUnit || m.Intervals != tc.intervals {
				t.Fatalf("step %v s, throughput %v %s over %d intervals; want %v s, %v %s over %d", m.StepSeconds, m.Throughput, m.ThroughputMetric, m.Intervals,
					tc.wantSecs, tc.wantThr, tc.wantUnit, tc.intervals)
			}
			if want := tc.total; m.FullSteps != want && !(want <= 200 && m.FullSteps == 0) {
				t.Fatalf("full steps %d, want the reported total %d", m.FullSteps, tc.total)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	run := func(class string, gpus int, secs float64, full int64, price float64) Measured {
		return Measured{Run: Run{Class: class, GPUs: gpus, Workload: class + "x"}, Status: workload.Stopped, StepSeconds: secs, FullSteps: full, PricePerHour: price}
	}
	// A data-parallel script: twice the GPUs, half the steps, each a little slower.
	trialRuns := func() []Measured {
		return []Measured{
			run("H100-80GB", 1, 0.4, 10000, 6.9),
			run("H100-80GB", 2, 0.44, 5000, 13.8),
			run("A100-80GB", 1, 1.2, 10000, 3.5),
			run("A100-40GB", 1, 1.2, 10000, 2.7),
		}
	}
	// H100 × 1: 4000 s at $6.90/h, $7.67; H100 × 2: 2200 s at $13.80/h,
	// $8.43; the A100s 12000 s, $11.67 and $9.00.
	res := judge(Spec{}, trialRuns())
	if !res.Done || res.Best != 0 || res.Why != "H100-80GB × 1 is the cheapest of 4 measured choices: the full run (10000 steps) in 1h6m40s for $7.67; the fastest, H100-80GB × 2, takes 36m40s for $8.43" {
		t.Fatalf("best %d: %s", res.Best, res.Why)
	}
	if sc := res.Runs[1].Scaling; math.Abs(sc-4000.0/(2*2200)) > 1e-9 {
		t.Fatalf("scaling of H100 × 2: %v, want %v (4000 s on one GPU, 2200 s on two)", sc, 4000.0/(2*2200))
	}
	if res.Runs[0].Scaling != 0 {
		t.Fatalf("the class's fewest GPUs scale against nothing: %v", res.Runs[0].Scaling)
	}

	// A deadline of an hour leaves only H100 × 2; of 30 minutes none.
	res = judge(Spec{Deadline: time.Hour}, trialRuns())
	if res.Best != 1 || *res.Runs[2].MeetsDeadline || *res.Runs[0].MeetsDeadline || !*res.Runs[1].MeetsDeadline {
		t.Fatalf("within an hour: best %d (%s)", res.Best, res.Why)
	}
	res = judge(Spec{Deadline: 30 * time.Minute}, trialRuns())
	if res.Best != -1 || !strings.Contains(res.Why, "no choice measured so far finishes within the deadline of 30m0s: the fastest, H100-80GB × 2, would take 36m40s ($8.43)") {
		t.Fatalf("within 30 minutes: best %d (%s)", res.Best, res.Why)
	}

	// The trial's full steps override what the runs reported.
	res = judge(Spec{FullSteps: 1000}, trialRuns())
	if res.Runs[1].FullSteps != 1000 || res.Runs[1].FullTime != 440*time.Second || res.Best != 0 {
		t.Fatalf("with 1000 full steps: %+v, best %d (%s)", res.Runs[1], res.Best, res.Why)
	}

	// A total too large to be a plan (or to fit a duration) is no full run.
	huge := trialRuns()
	huge[2].FullSteps = 1 << 50
	if res = judge(Spec{}, huge); res.Runs[2].FullTime != 0 || res.Runs[2].FullCost != 0 || res.Best != 0 {
		t.Fatalf("a run reporting 2^50 total steps: %+v, best %d", res.Runs[2], res.Best)
	}

	// A MIG slice's run: named by its profile, chosen when cheapest, and
	// neither scaled nor a base for the whole GPUs' scaling.
	sliced := trialRuns()
	slice := run("H100-80GB", 1, 0.5, 10000, 6.9*4/8) // a small model: half the GPU, nearly its speed
	slice.MIGProfile = "3g.40gb"
	sliced = append([]Measured{slice}, sliced...)
	res = judge(Spec{}, sliced)
	if res.Best != 0 || !strings.HasPrefix(res.Why, "H100-80GB 3g.40gb is the cheapest of 5 measured choices: the full run (10000 steps) in 1h23m20s for $4.79") {
		t.Fatalf("with a slice: best %d (%s)", res.Best, res.Why)
	}
	if res.Runs[0].Scaling != 0 || math.Abs(res.Runs[2].Scaling-4000.0/(2*2200)) > 1e-9 {
		t.Fatalf("a slice's scaling %v (want none), H100 × 2's %v (want against H100 × 1)", res.Runs[0].Scaling, res.Runs[2].Scaling)
	}

	// Runs still going, nothing measured: waiting, not done.
	live := []Measured{{Run: Run{Class: "L4", GPUs: 1, Workload: "w1"}, Status: workload.Running}, {Run: Run{Class: "T4", GPUs: 1, Error: "refused"}}}
	res = judge(Spec{}, live)
	if res.Done || res.Best != -1 || res.Why != "waiting for the runs' progress reports" {
		t.Fatalf("live runs: %+v", res)
	}
	live[0].Status = workload.Failed
	if res = judge(Spec{}, live); !res.Done || !strings.Contains(res.Why, "no run measured a step time") {
		t.Fatalf("ended runs that measured nothing: %+v", res)
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		sp   Spec
		want string // "" valid
	}{
		{"valid, defaults filled", Spec{Template: "pytorch-train", Classes: []string{"H100-80GB"}, Steps: 200}, ""},
		{"everything wrong", Spec{Template: "Bad Name", Classes: []string{"A", "A"}, GPUs: []int{0, 2, 2}, Steps: 0, MaxRuntime: time.Second, MaxCost: -1, FullSteps: 10, Deadline: -time.Hour},
			"template: \"Bad Name\" is not a template name; classes[1]: \"A\" is named twice; gpus[0]: 0: want 1 to 64 GPUs; gpus[2]: 2 is named twice; steps: 0: want 1 to 100000 steps a run; maxRuntime: 1s: want 1m to 24h0m0s a run; maxCost: -1: want dollars above 0, or none; deadline: -1h0m0s: want a duration, or none"},
		{"too many runs", Spec{Template: "t", Classes: []string{"a", "b", "c", "d", "e"}, GPUs: []int{1, 2, 4}, Steps: 10}, "classes: 5 classes × 3 GPU counts are 15 runs: a trial has at most 12"},
		{"too many runs with MIG profiles", Spec{Template: "t", Classes: []string{"a", "b", "c"}, GPUs: []int{1, 2}, MIGProfiles: []string{"1g.10gb", "2g.20gb", "3g.40gb"}, Steps: 10},
			"classes: 3 classes × (2 GPU counts + 3 MIG profiles) are 15 runs"},
		{"MIG profiles unnamed or twice", Spec{Template: "t", Classes: []string{"a"}, MIGProfiles: []string{"", "3g.40gb", "3g.40gb", "none"}, Steps: 10},
			"migProfiles[0]: \"\": name a MIG profile (the whole GPUs are the gpus' runs); migProfiles[2]: \"3g.40gb\" is named twice; migProfiles[3]: \"none\": name a MIG profile"},
		{"full steps under the trial's", Spec{Template: "t", Classes: []string{"a"}, Steps: 100, FullSteps: 50}, "fullSteps: 50 is fewer than the trial's 100 steps a run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := tc.sp
			err := sp.check(team.Name("vision"))
			if tc.want == "" {
				if err != nil || sp.MaxRuntime != DefaultMaxRuntime || len(sp.GPUs) != 1 {
					t.Fatalf("err %v, runtime %s, gpus %v", err, sp.MaxRuntime, sp.GPUs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}
