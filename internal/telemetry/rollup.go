package telemetry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// The rollup resolutions.
const (
	Minute = time.Minute
	Hour   = time.Hour
)

// Resolutions are the rollup periods, finest first.
var Resolutions = []time.Duration{Minute, Hour}

// rollupGrace is how long after a period ends its rollup waits for samples
// still on their way (an agent pushes every interval).
const rollupGrace = 30 * time.Second

// Bucket is the start of the period of res that t falls in.
func Bucket(t time.Time, res time.Duration) time.Time { return t.Truncate(res) }

// RollUp computes the rollups of every period that received samples and has
// closed, oldest first, at most limit periods per resolution; it returns how
// many periods it rolled up. Late samples mark their period again, and it is
// computed again from all its samples.
func (s *Service) RollUp(ctx context.Context, limit int) (int, error) {
	now := s.o.Now()
	done := 0
	for _, res := range Resolutions {
		buckets, err := s.o.Store.PendingRollups(ctx, res, now.Add(-rollupGrace), limit)
		if err != nil {
			return done, fmt.Errorf("pending %s rollups: %w", res, err)
		}
		for _, p := range buckets {
			rs, err := s.rollupOf(ctx, res, p.Bucket)
			if err != nil {
				return done, err
			}
			if err := s.o.Store.WriteRollups(ctx, res, p, rs); err != nil {
				return done, fmt.Errorf("write %s rollups of %s: %w", res, p.Bucket.UTC().Format(time.RFC3339), err)
			}
			done++
		}
	}
	return done, nil
}

// rollupOf summarises every series' samples in one period, with the energy
// each used in it: the samples from EnergyGap before the period are read
// too, so that the interval from a series' last sample before the period to
// its first in it is counted here (and each interval is counted once, in
// the period where it ends).
func (s *Service) rollupOf(ctx context.Context, res time.Duration, bucket time.Time) ([]Rollup, error) {
	var out []Rollup
	var cur int64 = -1
	var acc accumulator
	var prev Sample
	havePrev := false
	flush := func() {
		if cur >= 0 && acc.n > 0 {
			r := acc.rollup()
			r.Series, r.Bucket = cur, bucket
			out = append(out, r)
		}
	}
	err := s.o.Store.SamplesBetween(ctx, bucket.Add(-EnergyGap), bucket.Add(res), func(sm Sample) error {
		if sm.Series != cur {
			flush()
			cur = sm.Series
			acc.reset()
			havePrev = false
		}
		if !sm.Time.Before(bucket) {
			acc.add(sm.Values)
			if havePrev {
				if j, _ := IntervalJoules(prev, sm); !math.IsNaN(j) {
					acc.joules += j
					acc.measured = true
				}
			}
		}
		prev, havePrev = sm, true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read samples of %s: %w", bucket.UTC().Format(time.RFC3339), err)
	}
	flush()
	return out, nil
}

// Prune deletes raw samples older than the raw retention and rollups older
// than the rollup retention, in batches of about batch rows each (so that
// neither database holds a long write lock), until none are left or ctx
// ends. It returns how many rows it deleted.
func (s *Service) Prune(ctx context.Context, batch int) (int64, error) {
	now := s.o.Now()
	var total int64
	steps := []func() (int64, error){
		func() (int64, error) { return s.o.Store.DeleteSamplesBefore(ctx, now.Add(-s.o.RawRetention), batch) },
	}
	for _, res := range Resolutions {
		steps = append(steps, func() (int64, error) {
			return s.o.Store.DeleteRollupsBefore(ctx, res, now.Add(-s.o.RollupRetention), batch)
		})
	}
	for _, step := range steps {
		for {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			n, err := step()
			total += n
			if err != nil {
				return total, fmt.Errorf("prune telemetry: %w", err)
			}
			if n == 0 {
				break
			}
		}
	}
	n, err := s.o.Store.DeleteOrphanSeries(ctx)
	total += n
	if err != nil {
		return total, fmt.Errorf("prune telemetry: %w", err)
	}
	return total, nil
}

// Run is one pass of the telemetry loop: roll up closed periods, then prune.
func (s *Service) Run(ctx context.Context) {
	if n, err := s.RollUp(ctx, 1000); err != nil && !errors.Is(err, context.Canceled) {
		s.o.Log.Warn("telemetry rollups", "err", err, "done", n)
	}
	if n, err := s.Prune(ctx, 5000); err != nil && !errors.Is(err, context.Canceled) {
		s.o.Log.Warn("telemetry retention", "err", err, "deleted", n)
	} else if n > 0 {
		s.o.Log.Info("telemetry retention", "deleted", n)
	}
}

// accumulator collects the values of each metric in one window.
type accumulator struct {
	n        int
	vals     [NumMetrics][]float64
	joules   float64
	measured bool // an interval's energy was known
}

func (a *accumulator) reset() {
	a.n, a.joules, a.measured = 0, 0, false
	for i := range a.vals {
		a.vals[i] = a.vals[i][:0]
	}
}

func (a *accumulator) add(v Values) {
	a.n++
	for m := range v {
		if !math.IsNaN(v[m]) {
			a.vals[m] = append(a.vals[m], v[m])
		}
	}
}

// rollup computes mean, max and p95 of each metric (NaN where none).
func (a *accumulator) rollup() Rollup {
	r := Rollup{N: a.n, Avg: NoValues(), Max: NoValues(), P95: NoValues(), Joules: math.NaN()}
	if a.measured {
		r.Joules = a.joules
	}
	for m := range a.vals {
		if len(a.vals[m]) > 0 {
			r.Avg[m], r.Max[m], r.P95[m] = Summarise(a.vals[m])
		}
	}
	return r
}

// Summarise is the mean, largest value and 95th percentile of xs (at
// least one), which it sorts.
func Summarise(xs []float64) (avg, max, p95 float64) {
	sort.Float64s(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs)), xs[len(xs)-1], Quantile(xs, 0.95)
}

// Quantile is the q-quantile of sorted values, interpolated linearly between
// the two nearest ranks, as Prometheus's quantile_over_time computes it.
func Quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	rank := q * float64(n-1)
	lo := int(math.Floor(rank))
	hi := lo + 1
	if hi >= n {
		return sorted[n-1]
	}
	w := rank - float64(lo)
	return sorted[lo]*(1-w) + sorted[hi]*w
}
