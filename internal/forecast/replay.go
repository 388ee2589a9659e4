package forecast

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Series answers the GPUs wanted at any time of a history, exactly, in
// O(log n): the running sum of its launches' starts and ends.
type Series struct {
	at   []time.Time
	sum  []int64   // thousandths of a GPU wanted from at[i] on
	area []float64 // GPU-seconds wanted from at[0] to at[i]
}

// NewSeries is h's demand over time.
func NewSeries(h *History) *Series {
	type ev struct {
		t time.Time
		d int64
	}
	evs := make([]ev, 0, 2*len(h.recs))
	for _, r := range h.recs {
		evs = append(evs, ev{r.Created, milli(r.GPUs)})
		if !r.Ended.IsZero() {
			evs = append(evs, ev{r.Ended, -milli(r.GPUs)})
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.t.Compare(b.t) })
	s := &Series{}
	var cur int64
	for i, e := range evs {
		cur += e.d
		if i+1 < len(evs) && evs[i+1].t.Equal(e.t) {
			continue
		}
		s.at, s.sum = append(s.at, e.t), append(s.sum, cur)
	}
	s.area = make([]float64, len(s.at))
	for i := 1; i < len(s.at); i++ {
		s.area[i] = s.area[i-1] + float64(s.sum[i-1])/1000*s.at[i].Sub(s.at[i-1]).Seconds()
	}
	return s
}

// integral is the GPU-seconds wanted from the series' start to t.
func (s *Series) integral(t time.Time) float64 {
	i := sort.Search(len(s.at), func(i int) bool { return s.at[i].After(t) })
	if i == 0 {
		return 0
	}
	return s.area[i-1] + float64(s.sum[i-1])/1000*t.Sub(s.at[i-1]).Seconds()
}

// Mean is the mean GPUs wanted over [a, b), exactly; the value at a when
// the window is empty (b not after a).
func (s *Series) Mean(a, b time.Time) float64 {
	if !b.After(a) {
		return s.At(a)
	}
	return (s.integral(b) - s.integral(a)) / b.Sub(a).Seconds()
}

// At is the GPUs wanted at t.
func (s *Series) At(t time.Time) float64 {
	i := sort.Search(len(s.at), func(i int) bool { return s.at[i].After(t) })
	if i == 0 {
		return 0
	}
	return float64(s.sum[i-1]) / 1000
}

// Baselines are the forecasts a model must beat: the last value, the same
// time a day before and a week before (seasonal naive), and an additive
// seasonal-trend decomposition (decomposed).
var Baselines = []Baseline{
	{"last", func(s *Series, origin, t time.Time) float64 { return s.At(origin) }},
	{"day", func(s *Series, origin, t time.Time) float64 { return s.At(seasonal(origin, t, 24*time.Hour)) }},
	{"week", func(s *Series, origin, t time.Time) float64 { return s.At(seasonal(origin, t, 7*24*time.Hour)) }},
	{"decomposed", decomposed},
}

// decomposed is the classical additive decomposition's forecast, made from
// what was known at origin: demand = trend + a daily season + the rest.
// The trend is the mean of the last day (the trend half a day before
// origin) carried on at the slope from the day before it (with two days
// of history); the season at t's time of day is the mean, over the last
// week's days whose whole day around that time is known, of the demand
// then less its centred day's mean. Means are exact over the series
// (Series.Mean), not sampled.
func decomposed(s *Series, origin, t time.Time) float64 {
	const day = 24 * time.Hour
	if len(s.at) == 0 {
		return 0
	}
	start := s.at[0] // nothing was wanted before: no day reaching back there is whole
	level := s.Mean(origin.Add(-day), origin)
	trend := level
	if !origin.Add(-2 * day).Before(start) {
		slope := (level - s.Mean(origin.Add(-2*day), origin.Add(-day))) / day.Seconds()
		trend += slope * t.Sub(origin.Add(-day/2)).Seconds()
	}
	var season float64
	n := 0
	for d := 1; d <= 7; d++ {
		past := t.Add(-time.Duration(d) * day)
		if past.Add(day/2).After(origin) || past.Add(-day/2).Before(start) {
			continue // its centred day is not over at origin, or began before the history
		}
		season += s.At(past) - s.Mean(past.Add(-day/2), past.Add(day/2))
		n++
	}
	if n > 0 {
		trend += season / float64(n)
	}
	return max(0, trend)
}

// Baseline is a naive forecast of t made at origin from the series.
type Baseline struct {
	Name     string
	Forecast func(s *Series, origin, t time.Time) float64
}

// seasonal is the last time before or at origin that is t less whole periods.
func seasonal(origin, t time.Time, period time.Duration) time.Time {
	back := t.Add(-period)
	for back.After(origin) {
		back = back.Add(-period)
	}
	return back
}

// ReplayOptions shape a replay.
type ReplayOptions struct {
	Horizon time.Duration // how far each forecast looks (default 2h)
	Step    time.Duration // its steps (default 10m)
	// Every is how far apart the origins are (default Step).
	Every time.Duration
	// Warmup is how much history the first origin has behind it (default
	// 7 days, so that the week-ago baseline has a value).
	Warmup time.Duration
	Model  Options
}

// Check fills in the defaults and says what is wrong with o, if anything.
func (o ReplayOptions) Check() (ReplayOptions, error) {
	if o.Horizon == 0 {
		o.Horizon = 2 * time.Hour
	}
	if o.Step == 0 {
		o.Step = 10 * time.Minute
	}
	if o.Every == 0 {
		o.Every = o.Step
	}
	if o.Warmup == 0 {
		o.Warmup = 7 * 24 * time.Hour
	}
	switch {
	case o.Step < time.Minute:
		return o, fmt.Errorf("step %s: must be at least 1m", o.Step)
	case o.Horizon < o.Step || o.Horizon > 7*24*time.Hour:
		return o, fmt.Errorf("horizon %s: must be from one step (%s) to 7 days", o.Horizon, o.Step)
	case o.Horizon/o.Step > 1000:
		return o, fmt.Errorf("horizon %s over step %s: at most 1000 steps", o.Horizon, o.Step)
	case o.Every < time.Minute:
		return o, fmt.Errorf("every %s: must be at least 1m", o.Every)
	}
	return o, nil
}

// Replay forecasts h from each origin — every o.Every from the first
// launch plus the warmup, on a grid of whole steps, until a horizon before
// the last event — and hands each origin's points to emit, in order. Each
// forecast uses only what was known at its origin (Forecast reads nothing
// created, and no end, after it), so a trace cut at T gives the same
// forecasts before T.
func Replay(h *History, o ReplayOptions, emit func([]Point) error) error {
	o, err := o.Check()
	if err != nil {
		return err
	}
	first, last := h.Span()
	if h.Len() == 0 {
		return nil
	}
	// The span in seconds: a Duration holds 292 years at most, and
	// time.Sub saturates there, which would let a longer trace pass as
	// a short one and replay for hours.
	span := last.Unix() - first.Unix()
	if n := span / int64(o.Every/time.Second); n > maxOrigins || span < 0 {
		return fmt.Errorf("the trace spans %s: origins every %s would be more than %d (make them further apart)", spanWords(span), o.Every, maxOrigins)
	}
	f := New(h, o.Model)
	for origin := first.Add(o.Warmup).Truncate(o.Step); !origin.Add(o.Horizon).After(last); origin = origin.Add(o.Every) {
		if err := emit(f.Forecast(origin, o.Horizon, o.Step)); err != nil {
			return err
		}
	}
	return nil
}

// spanWords says a span of seconds as a duration, or in days past what a
// Duration holds.
func spanWords(secs int64) string {
	if secs > int64(math.MaxInt64/time.Second) || secs < -int64(math.MaxInt64/time.Second) {
		return fmt.Sprintf("%d days", secs/86400)
	}
	return (time.Duration(secs) * time.Second).String()
}

// maxOrigins bounds a replay's work (149 days every 10 minutes is 21,456).
const maxOrigins = 1_000_000

// Score is how a replay's forecasts did against what happened and against
// the naive baselines on the same origins: at the horizon (each origin's
// last point) and over every step.
type Score struct {
	Origins int
	Horizon Errors
	All     Errors
}

// Errors are sMAPE (in %, 0 to 200) of the model and of each baseline, and
// MASE against each baseline: the model's mean absolute error scaled by the
// baseline's on the same points (below 1: the model did better).
type Errors struct {
	SMAPE    float64
	Baseline map[string]float64 // sMAPE per baseline
	MASE     map[string]float64
	// Gain is how much lower the model's sMAPE is than the best baseline's,
	// in % of it (negative: worse).
	Gain float64
	// Best is the baseline with the lowest sMAPE.
	Best string

	n       int
	sum, ae float64
	bsum    map[string]float64
	bae     map[string]float64
}

func (e *Errors) add(f, actual float64, base map[string]float64) {
	if e.bsum == nil {
		e.bsum, e.bae = map[string]float64{}, map[string]float64{}
	}
	e.n++
	e.sum += SMAPE(f, actual)
	e.ae += math.Abs(f - actual)
	for name, b := range base {
		e.bsum[name] += SMAPE(b, actual)
		e.bae[name] += math.Abs(b - actual)
	}
}

func (e *Errors) finish() {
	if e.n == 0 {
		return
	}
	e.SMAPE = 100 * e.sum / float64(e.n)
	e.Baseline, e.MASE = map[string]float64{}, map[string]float64{}
	for name, s := range e.bsum {
		e.Baseline[name] = 100 * s / float64(e.n)
		if e.bae[name] > 0 {
			e.MASE[name] = e.ae / e.bae[name]
		}
		if e.Best == "" || e.Baseline[name] < e.Baseline[e.Best] || (e.Baseline[name] == e.Baseline[e.Best] && name < e.Best) {
			e.Best = name
		}
	}
	if b := e.Baseline[e.Best]; b > 0 {
		e.Gain = 100 * (b - e.SMAPE) / b
	}
}

// SMAPE is one forecast's symmetric absolute percentage error: 2|f−a| /
// (|f|+|a|), 0 when both are 0.
func SMAPE(f, a float64) float64 {
	if f == 0 && a == 0 {
		return 0
	}
	return 2 * math.Abs(f-a) / (math.Abs(f) + math.Abs(a))
}

// Scorer scores a replay's points as they come, against the full history.
type Scorer struct {
	s     *Series
	score Score
}

// NewScorer scores forecasts of h.
func NewScorer(h *History) *Scorer { return &Scorer{s: NewSeries(h)} }

// Add scores one origin's points.
func (sc *Scorer) Add(pts []Point) {
	if len(pts) == 0 {
		return
	}
	sc.score.Origins++
	for i, p := range pts {
		actual := sc.s.At(p.T)
		base := map[string]float64{}
		for _, b := range Baselines {
			base[b.Name] = b.Forecast(sc.s, p.Origin, p.T)
		}
		sc.score.All.add(p.GPUs, actual, base)
		if i == len(pts)-1 {
			sc.score.Horizon.add(p.GPUs, actual, base)
		}
	}
}

// Score is the score so far.
func (sc *Scorer) Score() Score {
	s := sc.score
	s.Horizon.finish()
	s.All.finish()
	return s
}
