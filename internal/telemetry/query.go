package telemetry

import (
	"context"
	"fmt"

	"math"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// MaxPoints is the most points one series of a query may have;
// MaxTotalPoints the most all its series together may have.
const (
	MaxPoints      = 11000
	MaxTotalPoints = 200000
)

// CheckQuery names what is wrong with a query's window and step.
func CheckQuery(q Query) error {
	switch {
	case !q.From.Before(q.To):
		return fmt.Errorf("from (%s) must be before to (%s)", q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339))
	case q.Step <= 0:
		return fmt.Errorf("step must be positive")
	case q.To.Sub(q.From)/q.Step > MaxPoints:
		return fmt.Errorf("%s at a step of %s is %d points; at most %d: choose a larger step", q.To.Sub(q.From), q.Step, q.To.Sub(q.From)/q.Step, MaxPoints)
	}
	return nil
}

// Series implements Source from Gantry's own store: raw samples while the
// window lies within the raw retention, exact; older windows from the
// one-minute rollups, or the one-hour rollups for steps of an hour or more.
func (s *Service) Series(ctx context.Context, q Query) ([]Series, error) {
	if err := CheckQuery(q); err != nil {
		return nil, err
	}
	recs, err := s.o.Store.WorkloadSeries(ctx, q.Target.ID)
	if err != nil {
		return nil, fmt.Errorf("series of workload %s: %w", q.Target.ID, err)
	}
	if len(recs) == 0 {
		return []Series{}, nil
	}
	want := q.Metrics
	if len(want) == 0 {
		want = AllMetrics()
	}
	if n := int(q.To.Sub(q.From)/q.Step) * len(recs) * len(want); n > MaxTotalPoints {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "step", Message: fmt.Sprintf("%d series over %d steps is %d points; at most %d: choose a larger step, fewer series or a shorter window",
			len(recs)*len(want), int(q.To.Sub(q.From)/q.Step), n, MaxTotalPoints)}}}
	}
	ids := make([]int64, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	steps := q.Steps()
	// Per series and step: the accumulated samples or rollups.
	type cell struct {
		acc  accumulator
		rs   []Rollup
		used bool
	}
	cells := map[int64][]cell{}
	slot := func(series int64, t time.Time) *cell {
		k := int(t.Sub(q.From) / q.Step)
		if t.Before(q.From) || k >= steps {
			return nil
		}
		cs, ok := cells[series]
		if !ok {
			cs = make([]cell, steps)
			cells[series] = cs
		}
		cs[k].used = true
		return &cs[k]
	}
	res := Resolution(q, s.o.Now(), s.o.RawRetention)
	if res == 0 {
		err = s.o.Store.Samples(ctx, ids, q.From, q.To, func(sm Sample) error {
			if c := slot(sm.Series, sm.Time); c != nil {
				c.acc.add(sm.Values)
			}
			return nil
		})
	} else {
		err = s.o.Store.Rollups(ctx, res, ids, q.From, q.To, func(r Rollup) error {
			if c := slot(r.Series, r.Bucket); c != nil {
				c.rs = append(c.rs, r)
			}
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("read series of workload %s: %w", q.Target.ID, err)
	}
	var out []Series
	for _, rec := range recs {
		cs, ok := cells[rec.ID]
		if !ok {
			continue
		}
		// Summarise each step once, then cut it into one series per metric.
		sums := make([]Rollup, steps)
		for k := range cs {
			if !cs[k].used {
				continue
			}
			if res == 0 {
				sums[k] = cs[k].acc.rollup()
			} else {
				sums[k] = merge(cs[k].rs)
			}
		}
		for _, m := range want {
			se := Series{Metric: m, Device: rec.Key.Device, Pod: rec.Key.Pod, Points: []Point{}}
			for k := range sums {
				r := sums[k]
				if r.N == 0 || math.IsNaN(r.Avg[m]) {
					continue
				}
				se.Points = append(se.Points, Point{T: q.From.Add(time.Duration(k) * q.Step), Avg: r.Avg[m], Max: r.Max[m], P95: r.P95[m], N: r.N})
			}
			if len(se.Points) > 0 {
				out = append(out, se)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Device.ID() != b.Device.ID() {
			return a.Device.ID() < b.Device.ID()
		}
		if a.Pod != b.Pod {
			return a.Pod.Namespace+"/"+a.Pod.Name+"/"+a.Pod.Container < b.Pod.Namespace+"/"+b.Pod.Name+"/"+b.Pod.Container
		}
		return a.Metric < b.Metric
	})
	if out == nil {
		out = []Series{}
	}
	return out, nil
}

// Steps is how many steps of q.Step the window [q.From, q.To) holds (the
// last may be cut short).
func (q Query) Steps() int {
	n := int(q.To.Sub(q.From) / q.Step)
	if q.To.Sub(q.From)%q.Step != 0 {
		n++
	}
	return n
}

// Resolution is what a query's window is read from at now: 0, the raw
// samples, while it starts within the raw retention (exact); else the
// one-minute rollups, or the one-hour ones for steps of an hour or more.
func Resolution(q Query, now time.Time, raw time.Duration) time.Duration {
	switch {
	case q.From.After(now.Add(-raw)):
		return 0
	case q.Step >= Hour:
		return Hour
	default:
		return Minute
	}
}

// merge combines rollups of one series into one: the mean weighted by
// sample count, the largest max, and the largest p95 (an upper bound of the
// p95 of all their samples).
func merge(rs []Rollup) Rollup {
	out := Rollup{Avg: NoValues(), Max: NoValues(), P95: NoValues()}
	for m := Metric(0); m < NumMetrics; m++ {
		sum, n := 0.0, 0
		for _, r := range rs {
			if math.IsNaN(r.Avg[m]) {
				continue
			}
			sum += r.Avg[m] * float64(r.N)
			n += r.N
			if math.IsNaN(out.Max[m]) || r.Max[m] > out.Max[m] {
				out.Max[m] = r.Max[m]
			}
			if math.IsNaN(out.P95[m]) || r.P95[m] > out.P95[m] {
				out.P95[m] = r.P95[m]
			}
		}
		if n > 0 {
			out.Avg[m] = sum / float64(n)
		}
	}
	for _, r := range rs {
		out.N += r.N
	}
	return out
}
