package runs_test

import (
	"context"
	"log/slog"
	"math"
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
	capped := &template.EarlyStopping{Action: template.StopRun, Rules: []template.StopRule{{CostCap: 200}}}
	r = newRunner(t, capped, runs.Money{SoFar: 150})
	r.report(nil, -1)
	r.wl.money.SoFar = 200.4
	r.report(nil, -1)
	if len(r.wl.stopped) != 1 || !strings.Contains(r.wl.stopped[0], "the run has cost $200.40, at or over its cap of $200.00") {
		t.Fatalf("cost cap: %q", r.wl.stopped)
	}
}
