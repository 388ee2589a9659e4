package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/stores"
)

// testRuns is the runs part of the conformance suite: reports appended
// with their summary in one transaction, numbered in order across
// concurrent writers, read back as posted (epoch and metrics, or their
// absence), and pruned by age.
func testRuns(t *testing.T, s *stores.All) {
	ctx := context.Background()
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if _, err := s.RunSummary(ctx, "w1"); !isNotFound(err) {
		t.Fatalf("no reports yet: %v, want not found", err)
	}
	var rs []runs.Report
	for i := range 250 { // over one INSERT's chunk
		rs = append(rs, runs.Report{Time: base.Add(time.Duration(i) * time.Second), Step: int64(i * 10), TotalSteps: 5000, Epoch: math.NaN(),
			ResumedFrom: -1, Metrics: map[string]float64{"loss": 1 / float64(i+1)}})
	}
	rs[0].Epoch, rs[0].Metrics = 0, nil
	sum, err := appendOne(ctx, s, "w1", rs, func(old runs.Summary) runs.Summary { return runs.Apply(old, rs) })
	if err != nil || sum.Reports != 250 || sum.Step != 2490 || sum.TotalSteps != 5000 || sum.Epoch != 0 || math.Abs(sum.Rate-10) > 1e-9 {
		t.Fatalf("summary %+v %v", sum, err)
	}
	got, err := s.RunSummary(ctx, "w1")
	if err != nil || got.Reports != 250 || got.Step != 2490 || got.Epoch != 0 || got.Metrics["loss"] != 1.0/250 || !got.FirstAt.Equal(base) ||
		!got.ReportedAt.Equal(base.Add(249*time.Second)) || got.ResumedFrom != -1 || math.Abs(got.Rate-10) > 1e-9 || !got.AdvancedAt.Equal(base.Add(249*time.Second)) {
		t.Fatalf("stored summary %+v %v", got, err)
	}
	back, err := s.RunReports(ctx, "w1", base.Add(240*time.Second), 5)
	if err != nil || len(back) != 5 || back[0].Step != 2450 || back[4].Step != 2490 || !math.IsNaN(back[4].Epoch) || back[4].Metrics["loss"] != 1.0/250 {
		t.Fatalf("the newest five reports: %+v %v", back, err)
	}
	if first, err := s.RunReports(ctx, "w1", base, 1000); err != nil || len(first) != 250 || first[0].Epoch != 0 || len(first[0].Metrics) != 0 {
		t.Fatalf("all reports: %d %v", len(first), err)
	}
	// Concurrent writers for one workload: every report kept, each
	// numbered once, the summary counting them all.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := []runs.Report{{Time: base.Add(time.Hour + time.Duration(i)*time.Second), Step: 3000, Epoch: math.NaN(), ResumedFrom: -1}}
			_, err := appendOne(ctx, s, "w2", r, func(old runs.Summary) runs.Summary { return runs.Apply(old, r) })
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.RunSummary(ctx, "w2"); err != nil || got.Reports != 8 {
		t.Fatalf("concurrent appends: %+v %v", got, err)
	}
	if all, err := s.RunReports(ctx, "w2", base, 100); err != nil || len(all) != 8 {
		t.Fatalf("concurrent appends kept %d reports: %v", len(all), err)
	}
	// Early stopping's state, verdict and keeper round-trip.
	at := base.Add(2 * time.Hour)
	if _, err := appendOne(ctx, s, "w1", nil, func(old runs.Summary) runs.Summary {
		old.Watch = map[string]runs.Watch{"0": {Best: 0.25, Since: 3}}
		old.Verdict = &runs.Verdict{Rule: "plateau", Action: "stop", Reason: "flat", At: at}
		old.KeptBy, old.KeptAt = "alice", at
		return old
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.RunSummary(ctx, "w1"); err != nil || got.Watch["0"].Since != 3 || got.Verdict == nil || got.Verdict.Reason != "flat" ||
		!got.Verdict.At.Equal(at) || got.KeptBy != "alice" || !got.KeptAt.Equal(at) || got.Reports != 250 {
		t.Fatalf("early stopping's state: %+v %v", got, err)
	}
	if got, err := s.RunSummaries(ctx, []string{"w1", "w2", "w9"}); err != nil || len(got) != 2 || got["w1"].Step != 2490 || got["w2"].Reports != 8 || got["w1"].Workload != "w1" {
		t.Fatalf("summaries of a page: %+v %v", got, err)
	}
	// Retention: the reports before a time go, in batches; summaries stay.
	n, err := s.DeleteRunsBefore(ctx, base.Add(100*time.Second), 60)
	if err != nil || n != 60 {
		t.Fatalf("first batch: %d %v", n, err)
	}
	if n, err = s.DeleteRunsBefore(ctx, base.Add(100*time.Second), 60); err != nil || n != 40 {
		t.Fatalf("second batch: %d %v", n, err)
	}
	if left, _ := s.RunReports(ctx, "w1", base, 1000); len(left) != 150 {
		t.Fatalf("%d reports left, want 150", len(left))
	}
	if got, err := s.RunSummary(ctx, "w1"); err != nil || got.Reports != 250 {
		t.Fatalf("the summary after pruning: %+v %v", got, err)
	}
}

// appendOne appends one workload's reports.
func appendOne(ctx context.Context, s *stores.All, workload string, rs []runs.Report, update func(runs.Summary) runs.Summary) (runs.Summary, error) {
	sums, err := s.AppendReports(ctx, []runs.Append{{Workload: workload, Reports: rs, Update: update}})
	if err != nil {
		return runs.Summary{}, err
	}
	return sums[0], nil
}

// testRunsBatch: appends of several runs in one transaction, out of their
// workloads' order and one workload twice, each numbered after the one
// before it and answered in the order asked.
func testRunsBatch(t *testing.T, s *stores.All) {
	ctx := context.Background()
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	rep := func(step int64) []runs.Report {
		return []runs.Report{{Time: base.Add(time.Duration(step) * time.Second), Step: step, Epoch: math.NaN(), ResumedFrom: -1}}
	}
	var as []runs.Append
	for _, a := range []struct {
		w    string
		step int64
	}{{"b9", 1}, {"b1", 1}, {"b9", 2}, {"b5", 1}, {"b9", 3}} {
		rs := rep(a.step)
		as = append(as, runs.Append{Workload: a.w, Reports: rs, Update: func(old runs.Summary) runs.Summary { return runs.Apply(old, rs) }})
	}
	sums, err := s.AppendReports(ctx, as)
	if err != nil || len(sums) != 5 {
		t.Fatalf("batch: %v, %v", sums, err)
	}
	for i, want := range []struct {
		reports, step int64
	}{{1, 1}, {1, 1}, {2, 2}, {1, 1}, {3, 3}} {
		if sums[i].Reports != want.reports || sums[i].Step != want.step || sums[i].Workload != as[i].Workload {
			t.Errorf("append %d (%s): %d reports at step %d, want %d at %d", i, as[i].Workload, sums[i].Reports, sums[i].Step, want.reports, want.step)
		}
	}
	if back, err := s.RunReports(ctx, "b9", base, 10); err != nil || len(back) != 3 || back[0].Step != 1 || back[2].Step != 3 {
		t.Fatalf("b9's reports: %+v %v", back, err)
	}
	// An append's summary is its own: a later append to the same workload
	// in the batch does not change the earlier one's metrics.
	withLoss := func(w string, step int64, loss float64) runs.Append {
		rs := []runs.Report{{Time: base.Add(time.Hour + time.Duration(step)*time.Second), Step: step, Epoch: math.NaN(), ResumedFrom: -1, Metrics: map[string]float64{"loss": loss}}}
		return runs.Append{Workload: w, Reports: rs, Update: func(old runs.Summary) runs.Summary { return runs.Apply(old, rs) }}
	}
	sums, err = s.AppendReports(ctx, []runs.Append{withLoss("c1", 10, 0.9), withLoss("c1", 20, 0.5)})
	if err != nil || sums[0].Metrics["loss"] != 0.9 || sums[1].Metrics["loss"] != 0.5 {
		t.Fatalf("two appends to one workload: %+v %v", sums, err)
	}
	// More runs in one batch than one statement's parameters hold (their
	// summaries go in statements of 44; 850 runs' rows are locked in two):
	// every one written.
	for _, n := range []int{60, 850} {
		var many []runs.Append
		var ids []string
		for i := range n {
			id := fmt.Sprintf("m%d-%03d", n, i)
			many, ids = append(many, withLoss(id, 1, float64(i))), append(ids, id)
		}
		if _, err := s.AppendReports(ctx, many); err != nil {
			t.Fatal(err)
		}
		last := ids[n-1]
		if got, err := s.RunSummaries(ctx, ids); err != nil || len(got) != n || got[last].Metrics["loss"] != float64(n-1) || got[ids[0]].Reports != 1 {
			t.Fatalf("a batch of %d runs: %d summaries, %v", n, len(got), err)
		}
	}
	// Batches holding the same workloads in opposite orders, at once:
	// each locks them in one order, so none waits on another for ever.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := []string{"d1", "d2", "d3"}
			if i%2 == 1 {
				slices.Reverse(ids)
			}
			var as []runs.Append
			for _, id := range ids {
				as = append(as, withLoss(id, int64(100+i), 0.1))
			}
			_, err := s.AppendReports(ctx, as)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.RunSummaries(ctx, []string{"d1", "d2", "d3"}); err != nil || len(got) != 3 || got["d1"].Reports != 16 || got["d3"].Reports != 16 {
		t.Fatalf("after the crossed batches: %+v %v", got, err)
	}
	// A batch whose write fails (a report row already there under the
	// number the next report takes) is rolled back whole: the other run's
	// summary is as it was, and the store goes on.
	if _, err := s.ExecContext(ctx, `INSERT INTO run_reports (workload, seq, t, step, total_steps, epoch, resumed_from, metrics) VALUES ('c1', 2, 0, 0, 0, NULL, -1, '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendReports(ctx, []runs.Append{withLoss("c1", 30, 0.4), withLoss("d1", 200, 0.3)}); err == nil {
		t.Fatal("a batch whose report is there already was written")
	}
	if got, err := s.RunSummaries(ctx, []string{"c1", "d1"}); err != nil || got["c1"].Reports != 2 || got["d1"].Reports != 16 {
		t.Fatalf("after a failed batch: %+v %v", got, err)
	}
	for i := range 4 { // on every connection of the pool, as it comes
		if _, err := s.AppendReports(ctx, []runs.Append{withLoss("d1", int64(300+i), 0.2)}); err != nil {
			t.Fatalf("an append after the failed batch: %v", err)
		}
	}
	// A handle past its CrashAfter commits nothing.
	s.CrashAfter(0)
	_, err = s.AppendReports(ctx, []runs.Append{withLoss("d2", 400, 0.1)})
	s.CrashAfter(-1)
	if !errors.Is(err, store.ErrCrashed) {
		t.Fatalf("an append past CrashAfter: %v", err)
	}
	if got, err := s.RunSummaries(ctx, []string{"d1", "d2"}); err != nil || got["d1"].Reports != 20 || got["d2"].Reports != 16 {
		t.Fatalf("after the appends: %+v %v", got, err)
	}
}

// BenchmarkReportIngest measures the progress write path on both backends:
// batches of 1 (what gantry.run.report sends) and of 20 reports (three
// metrics each) through runs.Service.Report (checks, the reports and the
// summary in one transaction), from 16 runs in turn. reports/s counts
// reports.
func BenchmarkReportIngest(b *testing.B) {
	for name, open := range backends(b) {
		for _, size := range []int{1, 20} {
			b.Run(fmt.Sprintf("%s/batch=%d", name, size), func(b *testing.B) {
				s := open(b)
				clock := time.Now().Add(-time.Hour)
				svc, err := runs.New(runs.Options{Store: s.Runs, Workloads: readingWorkload{s}, Notifier: s.Governance, Now: func() time.Time { return clock }})
				if err != nil {
					b.Fatal(err)
				}
				ctxs := make([]context.Context, 16)
				for i := range ctxs {
					ctxs[i] = identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: fmt.Sprintf("run%06d", i), Pod: "ns/p"})
				}
				n, batches := 0, 0
				for b.Loop() {
					rs := make([]runs.Report, size)
					for i := range rs {
						n++
						rs[i] = runs.Report{Time: clock.Add(time.Duration(n) * time.Millisecond), Step: int64(n), Epoch: math.NaN(), ResumedFrom: -1,
							Metrics: map[string]float64{"loss": 1 / float64(n), "samples_per_s": 2048, "lr": 3e-4}}
					}
					run := batches % 16
					batches++
					if _, err := svc.Report(ctxs[run], fmt.Sprintf("run%06d", run), rs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "reports/s")
			})
		}
		// Many runs at once, one report a request each (as gantry.run
		// sends them): 16 and 64 at a time on the same database.
		for _, atOnce := range []int{16, 64} {
			// RunParallel runs a multiple of GOMAXPROCS goroutines: the
			// name says how many (16 and 64 on 2 cores).
			per := (atOnce + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
			b.Run(fmt.Sprintf("%s/batch=1,%d-at-once", name, per*runtime.GOMAXPROCS(0)), func(b *testing.B) {
				s := open(b)
				clock := time.Now().Add(-time.Hour)
				svc, err := runs.New(runs.Options{Store: s.Runs, Workloads: readingWorkload{s}, Notifier: s.Governance, Now: func() time.Time { return clock }})
				if err != nil {
					b.Fatal(err)
				}
				var next, total atomic.Int64
				b.SetParallelism(per)
				b.RunParallel(func(pb *testing.PB) {
					id := fmt.Sprintf("par%07d", next.Add(1))
					ctx := identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: id, Pod: "ns/p"})
					step := int64(0)
					for pb.Next() {
						step++
						r := []runs.Report{{Time: clock.Add(time.Duration(step) * time.Millisecond), Step: step, Epoch: math.NaN(), ResumedFrom: -1,
							Metrics: map[string]float64{"loss": 1 / float64(step), "samples_per_s": 2048, "lr": 3e-4}}}
						if _, err := svc.Report(ctx, id, r); err != nil {
							b.Error(err)
							return
						}
						total.Add(1)
					}
				})
				b.ReportMetric(float64(total.Load())/b.Elapsed().Seconds(), "reports/s")
			})
		}
	}
}

// readingWorkload lets every run report, with no rules; its ForRun makes
// the two reads the server's does (the workload's record, its template's
// version), which find no row here: an index probe each.
type readingWorkload struct{ s *stores.All }

func (readingWorkload) Visible(context.Context, string) error    { return nil }
func (readingWorkload) Manageable(context.Context, string) error { return nil }
func (r readingWorkload) ForRun(ctx context.Context, id string) (runs.RunInfo, error) {
	if _, err := r.s.Workload(ctx, id); !isNotFound(err) {
		return runs.RunInfo{}, fmt.Errorf("workload %s: %v", id, err)
	}
	if _, err := r.s.TemplateVersion(ctx, "pytorch-train", 1); !isNotFound(err) {
		return runs.RunInfo{}, fmt.Errorf("template: %v", err)
	}
	return runs.RunInfo{Namespace: "ns"}, nil
}
func (readingWorkload) EarlierRuns(context.Context, string, int) ([]string, error) { return nil, nil }
func (readingWorkload) StopForRule(context.Context, string, string) error          { return nil }
func (readingWorkload) Resume(context.Context, string) error                       { return nil }
