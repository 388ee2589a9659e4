package store_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/store/stores"
)

// seriesWorkloads lets every caller read every workload: the series'
// reading and rolling up is what testRunSeries is about.
type seriesWorkloads struct{ runs.Workloads }

func (seriesWorkloads) Visible(context.Context, string) error { return nil }

type dropNotes struct{}

func (dropNotes) Notify(context.Context, notify.Message) error { return nil }

// testRunSeries: a run's metrics as series — every report while the
// window is within the raw retention; rolled up per minute once a minute
// has closed (an open one waits, a late report has its minute computed
// again), per hour from the minutes; read from the rollups for older
// windows with the same points; the runs taken in turn; pruned by age.
func testRunSeries(t *testing.T, s *stores.All) {
	ctx := context.Background()
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	now := base
	svc, err := runs.New(runs.Options{Store: s, Workloads: seriesWorkloads{}, Notifier: dropNotes{}, Now: func() time.Time { return now }, RawRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	post := func(w string, rs ...runs.Report) {
		t.Helper()
		if _, err := appendOne(ctx, s, w, rs, func(old runs.Summary) runs.Summary { return runs.Apply(old, rs) }); err != nil {
			t.Fatal(err)
		}
	}
	at := func(sec int, m map[string]float64) runs.Report {
		return runs.Report{Time: base.Add(time.Duration(sec) * time.Second), Step: int64(sec), Epoch: math.NaN(), ResumedFrom: -1, Metrics: m}
	}
	// r1: every 10 s for three minutes, loss i and acc 100-i; lr once.
	var rs []runs.Report
	for i := range 18 {
		m := map[string]float64{"loss": float64(i), "acc": float64(100 - i)}
		if i == 3 {
			m["lr"] = 0.01
		}
		rs = append(rs, at(10*i, m))
	}
	post("r1", rs...)
	rollUp := func(limit, want int) {
		t.Helper()
		if n, err := svc.RollUp(ctx, limit); err != nil || n != want {
			t.Fatalf("roll up at %s: %d runs, %v; want %d", now.Format(time.TimeOnly), n, err, want)
		}
	}
	type point struct {
		n             int
		avg, max, p95 float64
	}
	rollupsOf := func(w string, res time.Duration, metrics []string) map[string][]point {
		t.Helper()
		out := map[string][]point{}
		err := s.RunRollups(ctx, w, res, base, base.Add(2*time.Hour), metrics, func(r runs.MetricRollup) error {
			out[r.Metric] = append(out[r.Metric], point{r.N, r.Avg, r.Max, r.P95})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rollups := func(w string, res time.Duration) map[string][]point {
		t.Helper()
		return rollupsOf(w, res, nil)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

	// 10:03:10: minutes 0 and 1 have closed (and waited 30 s); minute 2
	// has not.
	now = base.Add(3*time.Minute + 10*time.Second)
	rollUp(10, 1)
	if due, err := s.DueRollups(ctx, "", 10); err != nil || len(due) != 1 || due[0].From != 12 || due[0].Reports != 18 {
		t.Fatalf("due after the first pass: %+v %v; want r1 from report 12 (minute 2's first) of 18", due, err)
	}
	got := rollups("r1", time.Minute)
	if l := got["loss"]; len(l) != 2 || l[0].n != 6 || !near(l[0].avg, 2.5) || l[0].max != 5 || !near(l[0].p95, 4.75) || l[1].n != 6 || !near(l[1].avg, 8.5) {
		t.Fatalf("loss's minute rollups: %+v; want minutes 0 and 1 of 6 reports, means 2.5 and 8.5", l)
	}
	if lr := got["lr"]; len(lr) != 1 || lr[0].n != 1 || lr[0].avg != 0.01 {
		t.Fatalf("lr's minute rollups: %+v", lr)
	}
	if only := rollupsOf("r1", time.Minute, []string{"lr"}); len(only) != 1 || len(only["lr"]) != 1 {
		t.Fatalf("the rollups of lr alone: %+v; want lr's one minute, no other metric", only)
	}
	if h := rollups("r1", time.Hour)["loss"]; len(h) != 1 || h[0].n != 12 || !near(h[0].avg, 5.5) || h[0].max != 11 || !near(h[0].p95, 10.75) {
		t.Fatalf("loss's hour rollup from its minutes: %+v; want 12 reports, mean 5.5, max 11, p95 the largest minute's", h)
	}

	// A replica that read the mark before another moved it writes
	// nothing: its minute may miss a report the other's has.
	if moved, err := s.WriteRunRollups(ctx, "r1", []runs.MetricRollup{{Metric: "loss", Bucket: base, N: 1, Avg: -1, Max: -1, P95: -1}}, 0, 18); err != nil || moved {
		t.Fatalf("a write from a mark that moved: %v, %v; want nothing written", moved, err)
	}
	if l := rollups("r1", time.Minute)["loss"]; len(l) != 2 || l[0].n != 6 {
		t.Fatalf("loss's minutes after a stale write: %+v", l)
	}

	// A late report in minute 0, and r2 beside r1; 10:04: minute 2 closes.
	// The last pass ended at r1: this one, one run long, takes r2, and the
	// next wraps around to r1.
	post("r1", at(30, map[string]float64{"loss": 100}))
	post("r2", at(0, map[string]float64{"loss": 1}))
	now = base.Add(4 * time.Minute)
	rollUp(1, 1)
	if due, err := s.DueRollups(ctx, "", 10); err != nil || len(due) != 1 || due[0].Workload != "r1" {
		t.Fatalf("due after one pass of one run: %+v %v; want r1 left (the pass before took it: this one r2)", due, err)
	}
	rollUp(1, 1)
	if due, err := s.DueRollups(ctx, "", 10); err != nil || len(due) != 0 {
		t.Fatalf("due after every run's minutes closed: %+v %v; want none", due, err)
	}
	// A run whose reports were all pruned before it was rolled up: its mark
	// moves to its end, nothing written.
	post("r0", runs.Report{Time: base.Add(-3 * time.Hour), Step: 1, Epoch: math.NaN(), ResumedFrom: -1, Metrics: map[string]float64{"loss": 3}})
	if n, err := s.DeleteRunsBefore(ctx, base.Add(-time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("pruning r0's report: %d %v", n, err)
	}
	rollUp(10, 1)
	if due, err := s.DueRollups(ctx, "", 10); err != nil || len(due) != 0 || len(rollups("r0", time.Minute)) != 0 {
		t.Fatalf("a run with no reports left: due %+v %v, rollups %v", due, err, rollups("r0", time.Minute))
	}
	got = rollups("r1", time.Minute)
	if l := got["loss"]; len(l) != 3 || l[0].n != 7 || l[0].max != 100 || l[2].n != 6 {
		t.Fatalf("loss's minutes after the late report: %+v; want minute 0 computed again (7 reports, max 100) and minute 2", l)
	}
	if h := rollups("r1", time.Hour)["loss"]; len(h) != 1 || h[0].n != 19 || h[0].max != 100 {
		t.Fatalf("loss's hour after the late report: %+v; want 19 reports, max 100", h)
	}
	if l := rollups("r2", time.Minute)["loss"]; len(l) != 1 || l[0].n != 1 {
		t.Fatalf("r2's rollups: %+v", l)
	}

	// The same window read from the reports (within the raw retention)
	// and, two hours later, from the rollups: the same points.
	q := runs.SeriesQuery{From: base, To: base.Add(3 * time.Minute), Step: time.Minute}
	raw, err := svc.Series(ctx, "r1", q)
	if err != nil || len(raw) != 3 || raw[0].Metric != "acc" || raw[1].Metric != "loss" || raw[2].Metric != "lr" || len(raw[1].Points) != 3 || raw[1].Points[0].N != 7 {
		t.Fatalf("series from the reports: %+v %v; want acc, loss and lr, loss's first minute of 7 reports", raw, err)
	}
	// One metric asked for, of reports that carry others: every one of
	// its reports counted (a report's other metrics come first as often
	// as not, in a map's order).
	q.Metrics = []string{"loss"}
	if one, err := svc.Series(ctx, "r1", q); err != nil || len(one) != 1 || len(one[0].Points) != 3 || one[0].Points[0].N+one[0].Points[1].N+one[0].Points[2].N != 19 {
		t.Fatalf("loss alone from the reports: %+v %v; want its 19 reports in 3 minutes", one, err)
	}
	// All the run's metrics (none named) at a step that many metrics
	// could not have: refused only by the metrics there are (3 here).
	if fine, err := svc.Series(ctx, "r1", runs.SeriesQuery{From: base, To: base.Add(time.Hour), Step: time.Second}); err != nil || len(fine) != 3 {
		t.Fatalf("3,600 steps of a run's 3 metrics: %d series, %v; want them all", len(fine), err)
	}
	q.Metrics = nil
	now = base.Add(2 * time.Hour)
	old, err := svc.Series(ctx, "r1", q)
	if err != nil || len(old) != len(raw) {
		t.Fatalf("series from the rollups: %+v %v", old, err)
	}
	for i := range raw {
		if len(old[i].Points) != len(raw[i].Points) {
			t.Fatalf("%s: %d points from the rollups, %d from the reports", raw[i].Metric, len(old[i].Points), len(raw[i].Points))
		}
		for k, p := range raw[i].Points {
			o := old[i].Points[k]
			if !o.T.Equal(p.T) || o.N != p.N || !near(o.Avg, p.Avg) || o.Max != p.Max || !near(o.P95, p.P95) {
				t.Errorf("%s at %s: %+v from the rollups, %+v from the reports", raw[i].Metric, p.T.Format(time.TimeOnly), o, p)
			}
		}
	}
	hourly, err := svc.Series(ctx, "r1", runs.SeriesQuery{From: base, To: base.Add(time.Hour), Step: time.Hour, Metrics: []string{"loss", "nothing"}})
	if err != nil || len(hourly) != 1 || hourly[0].Metric != "loss" || len(hourly[0].Points) != 1 || hourly[0].Points[0].N != 19 {
		t.Fatalf("loss at a step of an hour: %+v %v; want one point of 19 reports, no series for a metric never reported", hourly, err)
	}

	// Retention: rollups of periods that began before 10:02 go (minutes 0
	// and 1 of loss and acc, minute 0 of lr, and the 10:00 hour of each
	// metric of r1 and r2).
	n, err := s.DeleteRunRollupsBefore(ctx, base.Add(2*time.Minute), 100)
	if err != nil || n != 5+3+1+1 {
		t.Fatalf("pruned %d rollups, %v; want 10", n, err)
	}
	if got := rollups("r1", time.Minute); len(got["loss"]) != 1 || len(got["lr"]) != 0 {
		t.Fatalf("left after pruning: %+v", got)
	}
}

// testRunRollupBounds: what a run may report into one minute, or over
// many, bounds a rollup pass's memory: a minute keeps its first 256
// metrics; a metric's percentile comes from its first 4,096 values in a
// minute (its count, mean and largest from all); a pass makes about
// 32,768 metric-minutes and leaves the rest to the next.
func testRunRollupBounds(t *testing.T, s *stores.All) {
	ctx := context.Background()
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	now := base.Add(24 * time.Hour)
	svc, err := runs.New(runs.Options{Store: s, Workloads: seriesWorkloads{}, Notifier: dropNotes{}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	post := func(w string, rs []runs.Report) {
		t.Helper()
		if _, err := appendOne(ctx, s, w, rs, func(old runs.Summary) runs.Summary { return runs.Apply(old, rs) }); err != nil {
			t.Fatal(err)
		}
	}
	report := func(at time.Time, step int, m map[string]float64) runs.Report {
		return runs.Report{Time: at, Step: int64(step), Epoch: math.NaN(), ResumedFrom: -1, Metrics: m}
	}
	count := func(w string) (metrics, minutes int, x runs.MetricRollup) {
		t.Helper()
		names, buckets := map[string]bool{}, map[time.Time]bool{}
		err := s.RunRollups(ctx, w, time.Minute, base, now, nil, func(r runs.MetricRollup) error {
			names[r.Metric], buckets[r.Bucket] = true, true
			if r.Metric == "x" {
				x = r
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(names), len(buckets), x
	}

	// One minute of 5,000 reports of x (0 to 4,999), six of which carry
	// 63 other metrics each: 379 metrics in the minute.
	var rs []runs.Report
	for i := range 5000 {
		m := map[string]float64{"x": float64(i)}
		if i < 6 {
			for k := range 63 {
				m["m"+strconv.Itoa(i*63+k)] = 1
			}
		}
		rs = append(rs, report(base.Add(time.Duration(i)*time.Millisecond), i, m))
	}
	post("wide", rs)
	if _, err := svc.RollUp(ctx, 10); err != nil {
		t.Fatal(err)
	}
	metrics, _, x := count("wide")
	if metrics != 256 {
		t.Errorf("one minute of 379 metrics: %d kept; want the first 256", metrics)
	}
	// The p95 of 0..4,095 (the first 4,096) is 3,890.25.
	if x.N != 5000 || x.Avg != 2499.5 || x.Max != 4999 || x.P95 != 3890.25 {
		t.Errorf("x over 5,000 values: %+v; want n 5,000, mean 2,499.5, max 4,999 and the p95 of the first 4,096, 3,890.25", x)
	}

	// 600 minutes of one report of 64 metrics: 38,400 metric-minutes, so
	// the first pass rolls up 9 blocks of 60 minutes and moves the mark to
	// minute 540's report; the second does the rest.
	rs = rs[:0]
	for i := range 600 {
		m := map[string]float64{}
		for k := range 64 {
			m["m"+strconv.Itoa(k)] = float64(i)
		}
		rs = append(rs, report(base.Add(time.Duration(i)*time.Minute), i, m))
	}
	post("long", rs)
	if _, err := svc.RollUp(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, minutes, _ := count("long"); minutes != 540 {
		t.Errorf("after one pass: %d minutes rolled up; want 540", minutes)
	}
	if due, err := s.DueRollups(ctx, "", 10); err != nil || len(due) != 1 || due[0].Workload != "long" || due[0].From != 540 {
		t.Fatalf("due after one pass: %+v %v; want long, from report 540", due, err)
	}
	if _, err := svc.RollUp(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, minutes, _ := count("long"); minutes != 600 {
		t.Errorf("after two passes: %d minutes rolled up; want 600", minutes)
	}

	// A live report (number 0, at 20:00), then 600 minutes backfilled from
	// 10:00 (numbers 1 to 600): the first pass takes the minutes in the
	// order of their reports' numbers — 20:00 first — so the mark moves on
	// to report 541 (10:540's), rather than staying at 0 while the pass
	// rolled up the earliest times again and again.
	live := func(at time.Time, step int) runs.Report {
		m := map[string]float64{}
		for k := range 64 {
			m["m"+strconv.Itoa(k)] = 1
		}
		return report(at, step, m)
	}
	post("back", []runs.Report{live(base.Add(20*time.Hour), 0)})
	rs = rs[:0]
	for i := range 600 {
		rs = append(rs, live(base.Add(time.Duration(i)*time.Minute), i+1))
	}
	post("back", rs)
	if _, err := svc.RollUp(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if due, err := s.DueRollups(ctx, "", 10); err != nil || len(due) != 1 || due[0].Workload != "back" || due[0].From != 541 {
		t.Fatalf("due after one pass over a backfill: %+v %v; want back, from report 541", due, err)
	}
	if _, minutes, _ := count("back"); minutes != 541 {
		t.Errorf("after one pass over a backfill: %d minutes; want 20:00 and 540 backfilled", minutes)
	}
}

// BenchmarkRunRollUp: a rollup pass over 100 runs of 600 reports each (ten
// minutes at one a second, four metrics): reports rolled up a second, to
// set beside the ingest's (BenchmarkReportIngest). Every iteration marks
// every run due again, so each pass reads and rolls up all of them.
func BenchmarkRunRollUp(b *testing.B) {
	ctx := context.Background()
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	const runsN, reportsN = 100, 600
	for name, open := range backends(b) {
		b.Run(name, func(b *testing.B) {
			s := open(b)
			for w := range runsN {
				rs := make([]runs.Report, reportsN)
				for i := range rs {
					rs[i] = runs.Report{Time: base.Add(time.Duration(i) * time.Second), Step: int64(i), Epoch: math.NaN(), ResumedFrom: -1,
						Metrics: map[string]float64{"loss": 1 / float64(i+1), "val_loss": 2 / float64(i+1), "samples_per_s": 900 + float64(i%7), "lr": 1e-4}}
				}
				if _, err := appendOne(ctx, s, "w"+strconv.Itoa(w), rs, func(old runs.Summary) runs.Summary { return runs.Apply(old, rs) }); err != nil {
					b.Fatal(err)
				}
			}
			now := base.Add(time.Hour)
			svc, err := runs.New(runs.Options{Store: s, Workloads: seriesWorkloads{}, Notifier: dropNotes{}, Now: func() time.Time { return now }})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				b.StopTimer()
				if _, err := s.ExecContext(ctx, `UPDATE run_progress SET rollup_seq = 0`); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if n, err := svc.RollUp(ctx, 1000); err != nil || n != runsN {
					b.Fatalf("rolled up %d runs, %v", n, err)
				}
			}
			b.ReportMetric(float64(runsN*reportsN*b.N)/b.Elapsed().Seconds(), "reports/s")
		})
	}
}
