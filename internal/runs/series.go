package runs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// A run's named metrics are kept as series beside its GPU series: every
// report for the raw retention's windows (exact), and rollups per metric —
// one minute and one hour, the GPU series' resolutions — for older windows,
// kept as long as the GPU rollups. The rollups are made after the fact from
// the reports (RollUp), so taking a report writes nothing more.

// MetricRollup is one metric of one run summarised over one period: the
// reports that carried it, their mean, largest value and 95th percentile.
type MetricRollup struct {
	Metric        string
	Bucket        time.Time
	N             int
	Avg, Max, P95 float64
}

// RollupDue is a run whose newest reports may not be in its rollups yet:
// From is the first such report's number, Reports how many it has.
type RollupDue struct {
	Workload      string
	From, Reports int64
}

// Stamp is a report's number and time.
type Stamp struct {
	Seq  int64
	Time time.Time
}

// RollupStore keeps the rollups of runs' metrics.
type RollupStore interface {
	// DueRollups are up to limit runs, after the workload id after in id
	// order, with reports numbered from their rollup mark on.
	DueRollups(ctx context.Context, after string, limit int) ([]RollupDue, error)
	// ReportStamps are up to limit of a run's reports from number from on,
	// in their order.
	ReportStamps(ctx context.Context, workload string, from int64, limit int) ([]Stamp, error)
	// ReportsBetween calls fn with each of a run's reports timed in
	// [from, to).
	ReportsBetween(ctx context.Context, workload string, from, to time.Time, fn func(Report) error) error
	// WriteRunRollups moves a run's rollup mark from from to next, writes
	// its minute rollups and computes again from them the hours they fall
	// in, in one transaction — or writes nothing and says false when the
	// mark is no longer at from (another replica rolled the run up since
	// it was read: what it wrote may be newer).
	WriteRunRollups(ctx context.Context, workload string, minutes []MetricRollup, from, next int64) (bool, error)
	// RunRollups calls fn with a run's rollups of resolution res whose
	// period starts in [from, to), of the metrics named (nil: all), by
	// metric then period.
	RunRollups(ctx context.Context, workload string, res time.Duration, from, to time.Time, metrics []string, fn func(MetricRollup) error) error
	// DeleteRunRollupsBefore deletes at most limit rollups of periods that
	// began before before and says how many.
	DeleteRunRollupsBefore(ctx context.Context, before time.Time, limit int) (int64, error)
}

const (
	// rollupGrace is how long after a minute ends its rollup waits for
	// reports still on their way (the reporter sends every few seconds).
	rollupGrace = 30 * time.Second
	// rollupBatch is the most reports of one run a pass reads the numbers
	// of (a run with more is rolled up over several passes).
	rollupBatch = 20000
	// rollupBlock is the most minutes one read of a pass covers.
	rollupBlock = 60
	// rollupMetrics is the most metrics one minute's rollups keep: the
	// first reported; the others are left out of the rollups (logged).
	rollupMetrics = 4 * MaxRunSeries
	// rollupSample is the most values of one metric in one minute its 95th
	// percentile is taken from (the first, in time order); its count, mean
	// and largest value take every one. rollupPassValues is the most values
	// one pass keeps for percentiles in all; past it each metric-minute
	// keeps rollupFloor. rollupPassCells is how many metric-minutes a pass
	// makes before it writes them and leaves the rest to the next pass.
	// Together they bound a pass's memory (about 30 MB) whatever the run
	// reported: reports are timed by the reporter, and a million of them
	// may fall in one minute.
	rollupSample     = 4096
	rollupPassValues = 1 << 21
	rollupFloor      = 16
	rollupPassCells  = 1 << 15
)

// RollUp makes the rollups of up to limit runs' reports whose minutes have
// closed, taking the runs in turn across passes; it returns how many runs
// it rolled up. A report that arrives late marks its run again and its
// minute is computed again from all its reports; every replica may run it
// (a period rolled up twice is written alike).
func (s *Service) RollUp(ctx context.Context, limit int) (int, error) {
	s.rollMu.Lock()
	after := s.rollAfter
	s.rollMu.Unlock()
	due, err := s.o.Store.DueRollups(ctx, after, limit)
	if err != nil {
		return 0, fmt.Errorf("runs to roll up: %w", err)
	}
	if len(due) < limit && after != "" {
		// The end of the ids: on from the first, up to where this began.
		more, err := s.o.Store.DueRollups(ctx, "", limit-len(due))
		if err != nil {
			return 0, fmt.Errorf("runs to roll up: %w", err)
		}
		for _, d := range more {
			if d.Workload > after {
				break
			}
			due = append(due, d)
		}
	}
	closed := s.o.Now().Add(-rollupGrace)
	done := 0
	var errs []error
	for _, d := range due {
		// A run that fails is passed over, not retried first: it cannot
		// hold up the runs after it.
		if err := s.rollUp(ctx, d, closed); err != nil {
			errs = append(errs, err)
		} else {
			done++
		}
		s.rollMu.Lock()
		s.rollAfter = d.Workload
		s.rollMu.Unlock()
		if ctx.Err() != nil {
			break
		}
	}
	return done, errors.Join(errs...)
}

// rollUp rolls up one run's reports from its mark on: the minutes they
// fall in that have closed, each from all of its reports, in blocks of
// minutes next to each other in the order of their first reports, until
// rollupPassCells metric-minutes are made; the mark moves to the first
// report in a minute not rolled up (still open, or left to the next pass).
func (s *Service) rollUp(ctx context.Context, d RollupDue, closed time.Time) error {
	stamps, err := s.o.Store.ReportStamps(ctx, d.Workload, d.From, rollupBatch)
	if err != nil {
		return fmt.Errorf("reports of run %s: %w", d.Workload, err)
	}
	// The closed minutes, in the order of their first report: a pass that
	// stops early has rolled up those of the lowest numbers, so the mark
	// moves on whatever times the reporter gave (a backfill timed before
	// what came first would otherwise be rolled up again and again).
	var minutes []time.Time
	seen := map[time.Time]bool{}
	for _, st := range stamps {
		if b := telemetry.Bucket(st.Time, telemetry.Minute); !b.Add(telemetry.Minute).After(closed) && !seen[b] {
			seen[b] = true
			minutes = append(minutes, b)
		}
	}
	var out []MetricRollup
	budget, dropped := rollupPassValues, 0
	done := 0 // minutes[:done] are rolled up
	for done < len(minutes) && len(out) < rollupPassCells {
		j := done + 1
		for j < len(minutes) && j-done < rollupBlock && minutes[j].Equal(minutes[j-1].Add(telemetry.Minute)) {
			j++
		}
		accs := map[time.Time]map[string]*rollupAcc{}
		err := s.o.Store.ReportsBetween(ctx, d.Workload, minutes[done], minutes[j-1].Add(telemetry.Minute), func(r Report) error {
			b := telemetry.Bucket(r.Time, telemetry.Minute)
			m := accs[b]
			if m == nil {
				m = map[string]*rollupAcc{}
				accs[b] = m
			}
			names := maps.Keys(r.Metrics)
			if len(m)+len(r.Metrics) > rollupMetrics {
				// Which are kept is decided by name, whatever a map's order.
				names = slices.Values(slices.Sorted(names))
			}
			for name := range names {
				v := r.Metrics[name]
				if !usable(v) {
					continue
				}
				a := m[name]
				if a == nil {
					if len(m) == rollupMetrics {
						dropped++
						continue
					}
					a = &rollupAcc{}
					m[name] = a
				}
				budget -= a.add(v, budget > 0)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("reports of run %s: %w", d.Workload, err)
		}
		for _, b := range minutes[done:j] {
			for _, name := range slices.Sorted(maps.Keys(accs[b])) {
				out = append(out, accs[b][name].rollup(name, b))
			}
		}
		done = j
	}
	if dropped > 0 {
		s.o.Log.Warn("run metrics left out of the rollups: a minute holds more metrics than they keep",
			"workload", d.Workload, "values", dropped, "metrics_kept", rollupMetrics)
	}
	next := d.Reports // none left: the reports were pruned
	if len(stamps) > 0 {
		next = stamps[len(stamps)-1].Seq + 1
	}
	rolled := map[time.Time]bool{}
	for _, b := range minutes[:done] {
		rolled[b] = true
	}
	for _, st := range stamps {
		if !rolled[telemetry.Bucket(st.Time, telemetry.Minute)] {
			next = min(next, st.Seq)
		}
	}
	if _, err := s.o.Store.WriteRunRollups(ctx, d.Workload, out, d.From, next); err != nil {
		return fmt.Errorf("rollups of run %s: %w", d.Workload, err)
	}
	return nil
}

// usable reports whether a stored value can be summed with others (values
// stored before runs.MaxMetricValue bounded them may not be).
func usable(v float64) bool { return !math.IsNaN(v) && math.Abs(v) <= MaxMetricValue }

// rollupAcc gathers one metric's values in one minute: their count, sum
// and largest exactly, and a sample for the 95th percentile.
type rollupAcc struct {
	n      int
	sum    float64
	max    float64
	sample []float64
}

// add counts v and keeps it for the percentile while the sample is short
// (more than rollupFloor only while keep); it returns how many it kept.
func (a *rollupAcc) add(v float64, keep bool) int {
	if a.n == 0 || v > a.max {
		a.max = v
	}
	a.n++
	a.sum += v
	if len(a.sample) < rollupSample && (keep || len(a.sample) < rollupFloor) {
		a.sample = append(a.sample, v)
		return 1
	}
	return 0
}

func (a *rollupAcc) rollup(name string, bucket time.Time) MetricRollup {
	_, _, p95 := telemetry.Summarise(a.sample)
	return MetricRollup{Metric: name, Bucket: bucket, N: a.n, Avg: a.sum / float64(a.n), Max: a.max, P95: min(p95, a.max)}
}

// Series is one metric of a run over a query's window.
type Series struct {
	Metric string
	Points []telemetry.Point
}

// SeriesQuery is what a reader asks of a run's metrics: the window and
// step (already checked: telemetry.CheckQuery) and the metrics (nil: all).
type SeriesQuery struct {
	From, To time.Time
	Step     time.Duration
	Metrics  []string
}

// Bounds of one series query: the most run metrics it returns, the most
// reports it reads (raw) and values it keeps from them, and the most
// rollups it reads. A window of a run that reports very often is read from
// the rollups, older than the raw retention, or asked for in shorter
// windows.
const (
	MaxRunSeries   = 64
	maxRawReports  = 1 << 20
	maxRawValues   = 4 << 20
	maxRollupsRead = 4 << 20
)

// Series are the metrics workload id's run reported, over q's window at
// its step, as the GPU series are: each point the mean, largest value and
// 95th percentile of the reports in [t, t+step) — exact within the raw
// retention, from the minute rollups before it (the hour rollups for steps
// of an hour or more). Metrics named in q that the run never reported have
// no series. Refused (*fault.Invalid) rather than cut: more than
// MaxRunSeries metrics named or found, more points than
// telemetry.MaxTotalPoints in the series found, more than maxRawReports
// reports or maxRawValues values read, more than maxRollupsRead rollups.
func (s *Service) Series(ctx context.Context, id string, q SeriesQuery) ([]Series, error) {
	if err := s.o.Workloads.Visible(ctx, id); err != nil {
		return nil, err
	}
	tq := telemetry.Query{From: q.From, To: q.To, Step: q.Step}
	if err := telemetry.CheckQuery(tq); err != nil {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "from", Message: err.Error()}}}
	}
	if len(q.Metrics) > MaxRunSeries {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "series", Message: fmt.Sprintf("%d run metrics named; at most %d", len(q.Metrics), MaxRunSeries)}}}
	}
	steps := tq.Steps()
	tooManyPoints := func(metrics int) error {
		return &fault.Invalid{Fields: []fault.Field{{Path: "step", Message: fmt.Sprintf("%d steps of %d run metrics is %d points; at most %d: choose a larger step, fewer run metrics or a shorter window",
			steps, metrics, steps*metrics, telemetry.MaxTotalPoints)}}}
	}
	// Those named are refused before anything is read; all of them (nil)
	// as they are found.
	if steps*len(q.Metrics) > telemetry.MaxTotalPoints {
		return nil, tooManyPoints(len(q.Metrics))
	}
	tooMany := &fault.Invalid{Fields: []fault.Field{{Path: "series", Message: fmt.Sprintf("the run reported more than %d metrics in this window: name the ones to read (run:NAME)", MaxRunSeries)}}}
	want := func(name string) bool { return q.Metrics == nil || slices.Contains(q.Metrics, name) }
	// A cell is one step of one metric: the values read (raw), or the
	// rollups merged as they come (the mean weighted by count, the largest
	// max, the largest p95: an upper bound of the p95 of their reports).
	type cell struct {
		vals []float64
		n    int
		sum  float64
		max  float64
		p95  float64
	}
	cells := map[string][]cell{}
	slot := func(name string, t time.Time) (*cell, error) {
		k := int(t.Sub(q.From) / q.Step)
		if t.Before(q.From) || k >= steps || !want(name) {
			return nil, nil
		}
		cs, ok := cells[name]
		if !ok {
			if len(cells) == MaxRunSeries {
				return nil, tooMany
			}
			if steps*(len(cells)+1) > telemetry.MaxTotalPoints {
				return nil, tooManyPoints(len(cells) + 1)
			}
			cs = make([]cell, steps)
			cells[name] = cs
		}
		return &cs[k], nil
	}
	var err error
	if res := telemetry.Resolution(tq, s.o.Now(), s.o.RawRetention); res == 0 {
		reports, values := 0, 0
		err = s.o.Store.ReportsBetween(ctx, id, q.From, q.To, func(r Report) error {
			if reports++; reports > maxRawReports {
				return &fault.Invalid{Fields: []fault.Field{{Path: "from", Message: fmt.Sprintf("the window holds more than %d reports: choose a shorter window", maxRawReports)}}}
			}
			for name, v := range r.Metrics {
				c, err := slot(name, r.Time)
				if err != nil {
					return err
				}
				if c == nil || !usable(v) {
					continue // a metric not asked for, or a value stored before they were bounded
				}
				if values++; values > maxRawValues {
					return &fault.Invalid{Fields: []fault.Field{{Path: "from", Message: fmt.Sprintf("the window holds more than %d reported values: choose a shorter window or name the run metrics", maxRawValues)}}}
				}
				c.vals = append(c.vals, v)
			}
			return nil
		})
	} else {
		read := 0
		err = s.o.Store.RunRollups(ctx, id, res, q.From, q.To, q.Metrics, func(r MetricRollup) error {
			if read++; read > maxRollupsRead {
				return &fault.Invalid{Fields: []fault.Field{{Path: "from", Message: fmt.Sprintf("the window holds more than %d rollups: choose a shorter window or name the run metrics", maxRollupsRead)}}}
			}
			c, err := slot(r.Metric, r.Bucket)
			if err != nil || c == nil {
				return err
			}
			if c.n == 0 {
				c.max, c.p95 = r.Max, r.P95
			}
			c.n += r.N
			c.sum += r.Avg * float64(r.N)
			c.max, c.p95 = max(c.max, r.Max), max(c.p95, r.P95)
			return nil
		})
	}
	var invalid *fault.Invalid
	if errors.As(err, &invalid) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("run metrics of workload %s: %w", id, err)
	}
	out := []Series{}
	for _, name := range slices.Sorted(maps.Keys(cells)) {
		se := Series{Metric: name, Points: []telemetry.Point{}}
		for k, c := range cells[name] {
			p := telemetry.Point{T: q.From.Add(time.Duration(k) * q.Step)}
			switch {
			case len(c.vals) > 0:
				p.N = len(c.vals)
				p.Avg, p.Max, p.P95 = telemetry.Summarise(c.vals)
			case c.n > 0:
				p.N, p.Avg, p.Max, p.P95 = c.n, c.sum/float64(c.n), c.max, c.p95
			default:
				continue
			}
			se.Points = append(se.Points, p)
		}
		if len(se.Points) > 0 {
			out = append(out, se)
		}
	}
	return out, nil
}
