package runs_test

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/template"
)

// runner reports as workload w1's run, one report every 10 s on a fixed
// clock, to a service over an in-memory store.
type runner struct {
	t    *testing.T
	svc  *runs.Service
	wl   *workloads
	box  *outbox
	st   *memStore
	ctx  context.Context
	step int64
	at   time.Time
}

func newRunner(t *testing.T, rules *template.EarlyStopping, money runs.Money) *runner {
	r := &runner{t: t, wl: &workloads{visible: map[string]bool{"w1": true}, rules: rules, money: money, manageOK: true}, box: &outbox{}, st: &memStore{}, at: now}
	var err error
	r.svc, err = runs.New(runs.Options{Store: r.st, Workloads: r.wl, Notifier: r.box, Now: func() time.Time { return r.at }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.ctx = identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: "w1", Pod: "gantry-vision/train-w1-abcde"})
	return r
}

// report sends one report with the metrics, 10 s after the last.
func (r *runner) report(metrics map[string]float64, resumedFrom int64) runs.Summary {
	r.t.Helper()
	r.at = r.at.Add(10 * time.Second)
	r.step += 10
	if resumedFrom >= 0 {
		r.step = resumedFrom
	}
	sum, err := r.svc.Report(r.ctx, "w1", []runs.Report{{Time: r.at, Step: r.step, TotalSteps: 100000, Epoch: math.NaN(), ResumedFrom: resumedFrom, Metrics: metrics}})
	if err != nil {
		r.t.Fatal(err)
	}
	return sum
}

var plateau = &template.EarlyStopping{Action: template.StopRun, Rules: []template.StopRule{{Plateau: &template.Plateau{Metric: "val_loss", Delta: 0.001, Reports: 5}}}}

// TestPlateauStopsWithinOneReport: a run whose val_loss stops improving is
// stopped on the very report that makes five without improvement, with the
// rule and its numbers as the reason and a webhook; later reports do not
// stop it again.
func TestPlateauStopsWithinOneReport(t *testing.T) {
	r := newRunner(t, plateau, runs.Money{SoFar: 37.2, PerHour: 12})
	for i := range 10 {
		r.report(map[string]float64{"val_loss": 1 - 0.05*float64(i)}, -1)
	}
	for i := range 4 {
		r.report(map[string]float64{"val_loss": 0.5505 + 0.0001*float64(i%2)}, -1) // within delta of the best
		if len(r.wl.stopped) != 0 {
			t.Fatalf("stopped after %d flat reports, want 5", i+1)
		}
	}
	sum := r.report(map[string]float64{"val_loss": 0.5509}, -1)
	if len(r.wl.stopped) != 1 || sum.Verdict == nil || sum.Verdict.Rule != "plateau" || !sum.Verdict.At.Equal(r.at) {
		t.Fatalf("on the fifth flat report: stops %q, verdict %+v", r.wl.stopped, sum.Verdict)
	}
	for _, want := range []string{"val_loss has not improved on its best of 0.55 by more than 0.001 for 5 reports (step 150 of 100000)", "$37.20 so far", "to finish at this pace"} {
		if !strings.Contains(r.wl.stopped[0], want) {
			t.Errorf("reason %q lacks %q", r.wl.stopped[0], want)
		}
	}
	if len(r.box.events) != 1 || r.box.events[0] != runs.EventRunStopped {
		t.Errorf("webhooks %v", r.box.events)
	}
	r.report(map[string]float64{"val_loss": 0.56}, -1)
	if len(r.wl.stopped) != 1 {
		t.Error("stopped twice")
	}
	// Its owner keeps it: started again, and the rules judge it no more.
	person := identity.With(context.Background(), identity.Identity{Subject: "alice", Via: identity.ViaToken})
	kept, err := r.svc.Keep(person, "w1")
	if err != nil || kept.KeptBy != "alice" || r.wl.resumed != 1 {
		t.Fatalf("keep: %+v %v, resumed %d", kept, err, r.wl.resumed)
	}
	for range 10 {
		r.report(map[string]float64{"val_loss": 0.56}, -1)
	}
	if len(r.wl.stopped) != 1 {
		t.Error("stopped after its owner kept it")
	}
	r.wl.manageOK = false
	if _, err := r.svc.Keep(person, "w1"); err == nil {
		t.Error("kept by someone who may not manage it")
	}
}

// TestImprovingRunNeverStopped: a run that keeps improving by more than
// delta is never stopped, however long; one that restarts from a checkpoint
// is judged from its restart.
func TestImprovingRunNeverStopped(t *testing.T) {
	r := newRunner(t, plateau, runs.Money{})
	for i := range 200 {
		r.report(map[string]float64{"val_loss": 10 - 0.002*float64(i)}, -1)
	}
	if len(r.wl.stopped) != 0 {
		t.Fatalf("an improving run stopped: %q", r.wl.stopped)
	}
	// Small gains (half of delta each) add up: a run that improves by
	// more than delta every two reports is not on a plateau.
	slow := newRunner(t, plateau, runs.Money{})
	for i := range 200 {
		slow.report(map[string]float64{"val_loss": 1 - 0.0005*float64(i)}, -1)
	}
	if len(slow.wl.stopped) != 0 {
		t.Fatalf("a slowly improving run stopped: %q", slow.wl.stopped)
	}
	// Flat for three, then a restart, then flat for three: never five in
	// the same run.
	for range 3 {
		r.report(map[string]float64{"val_loss": 9.602}, -1)
	}
	r.report(map[string]float64{"val_loss": 9.7}, 1500)
	for range 3 {
		r.report(map[string]float64{"val_loss": 9.7}, -1)
	}
	if len(r.wl.stopped) != 0 {
		t.Fatalf("flat across a restart counted as one run: %q", r.wl.stopped)
	}
}

// TestVerdictIsPerRun: a run started again after its rules stopped it is
// judged afresh (no verdict until a rule fires in it).
func TestVerdictIsPerRun(t *testing.T) {
	r := newRunner(t, plateau, runs.Money{})
	for range 6 {
		r.report(map[string]float64{"val_loss": 0.5}, -1)
	}
	if len(r.wl.stopped) != 1 {
		t.Fatalf("stops %q", r.wl.stopped)
	}
	if sum := r.report(map[string]float64{"val_loss": 0.5}, 40); sum.Verdict != nil || sum.Restarts != 1 {
		t.Fatalf("after a restart: verdict %+v, restarts %d", sum.Verdict, sum.Restarts)
	}
	for range 5 {
		r.report(map[string]float64{"val_loss": 0.5}, -1)
	}
	if len(r.wl.stopped) != 2 {
		t.Fatalf("the new run's plateau: stops %q", r.wl.stopped)
	}
}

// TestTargetAdvisesAndCostCapStops: a target reached with action advise
// flags the run (a webhook, the verdict) without stopping it; a cost cap
// with action stop stops it.
func TestTargetAdvisesAndCostCapStops(t *testing.T) {
	target := &template.EarlyStopping{Action: template.AdviseRun, Rules: []template.StopRule{{Target: &template.Target{Metric: "accuracy", Mode: "max", Value: 0.95}}}}
	r := newRunner(t, target, runs.Money{})
	r.report(map[string]float64{"accuracy": 0.9}, -1)
	sum := r.report(map[string]float64{"accuracy": 0.951}, -1)
	if len(r.wl.stopped) != 0 || sum.Verdict == nil || sum.Verdict.Action != template.AdviseRun || !strings.Contains(sum.Verdict.Reason, "accuracy reached 0.951 (target 0.95)") ||
		len(r.box.events) != 1 || r.box.events[0] != runs.EventRunFlagged {
		t.Fatalf("target: stops %q, verdict %+v, events %v", r.wl.stopped, sum.Verdict, r.box.events)
	}
	// Advice reads it as a stalled run until its people keep it going.
	if at, v, err := r.svc.Advised(r.ctx, "w1"); err != nil || v == nil || v.Rule != "target" || !at.Equal(r.at) {
		t.Fatalf("advised: %+v at %v (%v), want the target's verdict", v, at, err)
	}
	if _, err := r.svc.Keep(r.ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if _, v, err := r.svc.Advised(r.ctx, "w1"); err != nil || v != nil {
		t.Fatalf("advised after keep: %+v (%v), want none", v, err)
	}
	capped := &template.EarlyStopping{Action: template.StopRun, Rules: []template.StopRule{{CostCap: 200}}}
	r = newRunner(t, capped, runs.Money{SoFar: 150})
	r.report(nil, -1)
	r.wl.money.SoFar = 200.4
	r.report(nil, -1)
	if len(r.wl.stopped) != 1 || !strings.Contains(r.wl.stopped[0], "the run has cost $200.40, at or over its cap of $200.00") {
		t.Fatalf("cost cap: %q", r.wl.stopped)
	}
	if _, v, err := r.svc.Advised(r.ctx, "w1"); err != nil || v != nil { // stopped, not advised
		t.Fatalf("advised after a stop: %+v (%v), want none", v, err)
	}
}

// TestMedianStopsALaggingRun: earlier runs of the template reached a loss
// of 0.5, 0.4 and 0.3 by step 100; a run whose best by then is 0.45 is
// stopped (worse than the median 0.4), one at 0.35 is not, and none is
// judged before its grace steps or with fewer earlier runs than it needs.
func TestMedianStopsALaggingRun(t *testing.T) {
	earlier := func(final float64) []runs.Report {
		var rs []runs.Report
		for step := int64(10); step <= 300; step += 10 {
			rs = append(rs, runs.Report{Step: step, Metrics: map[string]float64{"loss": 1 - (1-final)*math.Min(1, float64(step)/100)}})
		}
		return rs
	}
	median := &template.EarlyStopping{Action: template.StopRun, Rules: []template.StopRule{{Median: &template.Median{Metric: "loss", GraceSteps: 100}}}}
	for _, tc := range []struct {
		name    string
		final   float64 // the run's loss from step 100 on
		peers   []string
		stopsAt int64 // 0: never
	}{
		{"lagging", 0.45, []string{"e1", "e2", "e3"}, 100},
		{"ahead of the median", 0.35, []string{"e1", "e2", "e3"}, 0},
		{"too few earlier runs", 0.9, []string{"e1", "e2"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRunner(t, median, runs.Money{})
			r.wl.earlier = tc.peers
			r.st.others = map[string][]runs.Report{"e1": earlier(0.5), "e2": earlier(0.4), "e3": earlier(0.3)}
			var stoppedAt int64
			for range 20 {
				loss := 1 - (1-tc.final)*math.Min(1, float64(r.step+10)/100)
				if sum := r.report(map[string]float64{"loss": loss}, -1); sum.Verdict != nil && stoppedAt == 0 {
					stoppedAt = sum.Step
				}
			}
			if stoppedAt != tc.stopsAt {
				t.Fatalf("stopped at step %d, want %d (0: never); reasons %q", stoppedAt, tc.stopsAt, r.wl.stopped)
			}
			if tc.stopsAt != 0 && !strings.Contains(r.wl.stopped[0], "loss's best so far, 0.45, is worse than the median 0.4 of the best that 3 earlier runs of its template had reached by step 100 of 100000") {
				t.Errorf("reason %q", r.wl.stopped[0])
			}
		})
	}
}

// TestCurveOf: a run's best by step, over a restart that went back over
// steps; a step it never reached has none.
func TestCurveOf(t *testing.T) {
	rs := []runs.Report{
		{Step: 10, Metrics: map[string]float64{"loss": 0.9}},
		{Step: 20, Metrics: map[string]float64{"loss": 0.7}},
		{Step: 30, Metrics: map[string]float64{"acc": 0.5}},
		{Step: 20, Metrics: map[string]float64{"loss": 0.6}}, // restarted from 20
		{Step: 40, Metrics: map[string]float64{"loss": 0.8}},
	}
	c := runs.CurveOf(rs, "loss", "min")
	want := runs.Curve{Steps: []int64{10, 20, 40}, Best: []float64{0.9, 0.6, 0.6}}
	if !slices.Equal(c.Steps, want.Steps) || !slices.Equal(c.Best, want.Best) {
		t.Fatalf("curve %+v, want %+v", c, want)
	}
	if m := runs.CurveOf(rs, "loss", "max"); !slices.Equal(m.Best, []float64{0.9, 0.9, 0.9}) {
		t.Errorf("max curve %+v", m)
	}
}

// TestDeadlineStopsARunThatCannotFinish: a run that makes a step a second
// with 100,000 to go cannot finish within 8 hours of its first report: it
// is stopped once it has made its grace of reports, the reason saying when
// it would finish; given 48 hours, it runs on.
func TestDeadlineStopsARunThatCannotFinish(t *testing.T) {
	for _, tc := range []struct {
		within  string
		stopsAt int // the report, 0: never
	}{{"8h", 5}, {"48h", 0}} {
		rules := &template.EarlyStopping{Action: template.StopRun, Rules: []template.StopRule{{Deadline: &template.Deadline{Within: tc.within}}}}
		r := newRunner(t, rules, runs.Money{SoFar: 3, PerHour: 1})
		stopped := 0
		for i := range 10 {
			if sum := r.report(nil, -1); sum.Verdict != nil && stopped == 0 {
				stopped = i + 1
			}
		}
		if stopped != tc.stopsAt {
			t.Fatalf("within %s: stopped on report %d, want %d; %q", tc.within, stopped, tc.stopsAt, r.wl.stopped)
		}
		if tc.stopsAt != 0 && !strings.Contains(r.wl.stopped[0], "at 3600 steps/h it would finish at 2026-12-04 ") {
			t.Errorf("reason %q", r.wl.stopped[0])
		}
	}
}
