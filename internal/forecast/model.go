package forecast

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// Point is a forecast made at Origin of the GPUs wanted at T: GPUs, the
// point forecast (the median of the forecast's distribution: the value
// absolute and relative errors favour), and Lo–Hi, its 10th to 90th
// percentiles.
type Point struct {
	Origin time.Time
	T      time.Time
	GPUs   float64
	Lo     float64
	Hi     float64
}

// Options tune the model; the zero value takes the defaults.
type Options struct {
	// ArrivalWindow is how far back arrivals are counted for their rate
	// (default 7 days: a week of days and nights).
	ArrivalWindow time.Duration
}

func (o Options) withDefaults() Options {
	if o.ArrivalWindow <= 0 {
		o.ArrivalWindow = 7 * 24 * time.Hour
	}
	return o
}

// Forecaster forecasts one history's demand. The model: what is wanted at T
// is what is wanted at the origin, less the launches alive then that end by
// T, plus those that arrive by T and are still alive at T. How long a launch
// lasts is a survival curve (Kaplan–Meier, the ones still running counted
// as lasting at least their age) per kind of launch (Record.Kind) where
// the kind has history enough, else per size — a shared GPU, one, a few, a
// node's worth — so a launch an hour old is as likely to end soon as the
// history's launches of its kind that reached an hour were. Arrivals are a
// Poisson stream per size at the rate of the last week, half of it from the
// week as a whole and half from the same hours of its days. The sum's
// distribution is computed exactly (in thousandths of a GPU) and its median
// is the forecast.
//
// Causal: a forecast at an origin uses only launches created by then, and
// only the ends seen by then; the survival curves are fitted at the start
// of the origin's day (UTC) from what was known then.
type Forecaster struct {
	h    *History
	o    Options
	fits map[int64]*fit
}

// New is a forecaster of h.
func New(h *History, o Options) *Forecaster {
	return &Forecaster{h: h, o: o.withDefaults(), fits: map[int64]*fit{}}
}

// Forecast is the forecast made at origin for each step up to horizon.
func (f *Forecaster) Forecast(origin time.Time, horizon, step time.Duration) []Point {
	if step <= 0 || horizon < step {
		return nil
	}
	ft := f.fitFor(origin)
	n := f.h.upTo(origin)
	now := 0.0
	type alive struct {
		age  time.Duration
		size int
		kind string
		mg   int64
	}
	var live []alive
	for _, r := range f.h.recs[:n] {
		if r.alive(origin) {
			now += r.GPUs
			live = append(live, alive{origin.Sub(r.Created), sizeOf(r.GPUs), r.Kind, milli(r.GPUs)})
		}
	}
	// Arrival rates (per second) per size and amount, from the window
	// before origin.
	type stream struct {
		size int
		mg   int64
	}
	rates := map[stream]float64{}
	from := origin.Add(-f.o.ArrivalWindow)
	for _, r := range f.h.recs[f.h.upTo(from):n] {
		// Half the rate is the window's, half that of the same hours of
		// the day in it (launches come in the working day's rhythm): an
		// arrival counts for the second half when it came within the
		// horizon after the origin's time of day on an earlier day.
		w := 0.5 / f.o.ArrivalWindow.Seconds()
		if off := origin.Sub(r.Created) % (24 * time.Hour); off >= 24*time.Hour-horizon {
			w += 0.5 / (f.o.ArrivalWindow.Hours() / 24 * horizon.Seconds())
		}
		rates[stream{sizeOf(r.GPUs), milli(r.GPUs)}] += w
	}
	streams := slices.SortedFunc(maps.Keys(rates), func(a, b stream) int { return cmp.Or(cmp.Compare(a.mg, b.mg), cmp.Compare(a.size, b.size)) })

	var out []Point
	for ahead := step; ahead <= horizon; ahead += step {
		d := noChange
		for _, a := range live {
			s := ft.curveOf(a.kind, a.size)
			sa := s.at(a.age)
			if sa <= 0 {
				continue
			}
			p := 1 - s.at(a.age+ahead)/sa
			if p > 1e-6 {
				d = d.withBernoulli(-a.mg, p)
			}
		}
		// Arrivals over (0, ahead] still alive at ahead: rate × ∫ S(ahead-u)
		// du, the integral's mean once per size.
		var alive [sizes]float64
		for size := range sizes {
			const parts = 12
			s := ft.curve(size)
			for i := range parts {
				alive[size] += s.at(time.Duration((float64(i)+0.5)/parts*float64(ahead))) / parts
			}
		}
		for _, st := range streams {
			if lambda := rates[st] * ahead.Seconds() * alive[st.size]; lambda > 1e-6 {
				d = d.withPoisson(st.mg, lambda)
			}
		}
		q := d.quantiles(0.1, 0.5, 0.9)
		out = append(out, Point{Origin: origin, T: origin.Add(ahead),
			Lo: round3(now + float64(q[0])/1000), GPUs: round3(now + float64(q[1])/1000), Hi: round3(now + float64(q[2])/1000)})
	}
	return out
}

// fitFor is the survival fit for origin's day, made once.
func (f *Forecaster) fitFor(origin time.Time) *fit {
	day := origin.UTC().Truncate(24 * time.Hour)
	if ft, ok := f.fits[day.Unix()]; ok {
		return ft
	}
	ft := fitAt(f.h, day)
	f.fits[day.Unix()] = ft
	return ft
}

// Sizes of launch: a shared GPU, one, two to seven, eight or more.
const sizes = 4

func sizeOf(gpus float64) int {
	switch {
	case gpus < 1:
		return 0
	case gpus <= 1:
		return 1
	case gpus < 8:
		return 2
	}
	return 3
}

// fit is the survival curves known at a time: one per size, and one of all
// launches for a size with too little history of its own.
type fit struct {
	bySize [sizes]curve
	byKind map[string]curve
	all    curve
}

// curveOf is the curve of a kind of launch with history enough of its own,
// else that of its size.
func (f *fit) curveOf(kind string, size int) curve {
	if c, ok := f.byKind[kind]; ok && kind != "" && c.events >= minEvents {
		return c
	}
	return f.curve(size)
}

// minEvents is how many ended launches a size needs for a curve of its own.
const minEvents = 30

func (f *fit) curve(size int) curve {
	if c := f.bySize[size]; c.events >= minEvents {
		return c
	}
	return f.all
}

func fitAt(h *History, at time.Time) *fit {
	var all []life
	var by [sizes][]life
	kinds := map[string][]life{}
	for _, r := range h.recs[:h.upTo(at)] {
		l := life{d: at.Sub(r.Created)}
		if !r.Ended.IsZero() && !r.Ended.After(at) {
			l = life{d: r.Ended.Sub(r.Created), ended: true}
		}
		all = append(all, l)
		by[sizeOf(r.GPUs)] = append(by[sizeOf(r.GPUs)], l)
		kinds[r.Kind] = append(kinds[r.Kind], l)
	}
	f := &fit{all: kaplanMeier(all), byKind: map[string]curve{}}
	for k, ls := range kinds {
		f.byKind[k] = kaplanMeier(ls)
	}
	for i := range by {
		f.bySize[i] = kaplanMeier(by[i])
	}
	return f
}

// life is how long a launch lasted (ended) or has lasted so far.
type life struct {
	d     time.Duration
	ended bool
}

// curve is a survival function: the share of launches lasting longer than
// d is s[i] for the last times[i] ≤ d (1 before the first).
type curve struct {
	times  []time.Duration
	s      []float64
	events int
}

func kaplanMeier(ls []life) curve {
	slices.SortFunc(ls, func(a, b life) int { return cmp.Compare(a.d, b.d) })
	var c curve
	atRisk := len(ls)
	s := 1.0
	for i := 0; i < len(ls); {
		d, ended, n := ls[i].d, 0, 0
		for ; i < len(ls) && ls[i].d == d; i++ {
			n++
			if ls[i].ended {
				ended++
			}
		}
		if ended > 0 {
			s *= 1 - float64(ended)/float64(atRisk)
			c.times, c.s = append(c.times, d), append(c.s, s)
			c.events += ended
		}
		atRisk -= n
	}
	return c
}

func (c curve) at(d time.Duration) float64 {
	i := sort.Search(len(c.times), func(i int) bool { return c.times[i] > d })
	if i == 0 {
		return 1
	}
	return c.s[i-1]
}

// dist is a distribution of a change in thousandths of a GPU: its outcomes
// in ascending order, each once. Kept sorted, sums over it run in one order
// (the same forecast every run) and convolutions are merges.
type dist []outcome

type outcome struct {
	x int64
	p float64
}

// noChange is the distribution of no change at all.
var noChange = dist{{0, 1}}

// prune is the probability below which an outcome is dropped.
const prune = 1e-9

// plus is d shifted by v and scaled by p, without outcomes below prune.
func (d dist) plus(v int64, p float64) dist {
	out := make(dist, 0, len(d))
	for _, o := range d {
		if o.p*p > prune {
			out = append(out, outcome{o.x + v, o.p * p})
		}
	}
	return out
}

// merge adds two distributions' outcomes (each sorted) into one.
func merge(a, b dist) dist {
	out := make(dist, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].x < b[j].x):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j].x < a[i].x:
			out = append(out, b[j])
			j++
		default:
			out = append(out, outcome{a[i].x, a[i].p + b[j].p})
			i, j = i+1, j+1
		}
	}
	return out
}

func (d dist) withBernoulli(v int64, p float64) dist {
	return merge(d.plus(0, 1-p), d.plus(v, p))
}

// withPoisson adds v times a Poisson count of mean lambda. The terms are
// computed in log space (e^-λ underflows for a large λ) up to where the
// tail is negligible.
func (d dist) withPoisson(v int64, lambda float64) dist {
	limit := int(lambda+10*math.Sqrt(lambda)) + 10
	var out dist
	for k := 0; k <= limit; k++ {
		lg, _ := math.Lgamma(float64(k + 1))
		p := math.Exp(-lambda + float64(k)*math.Log(lambda) - lg)
		if p < prune && float64(k) > lambda {
			break
		}
		out = merge(out, d.plus(int64(k)*v, p))
	}
	return out
}

// quantiles are d's quantiles at qs (ascending).
func (d dist) quantiles(qs ...float64) []int64 {
	var total float64
	for _, o := range d {
		total += o.p
	}
	out := make([]int64, len(qs))
	if total <= 0 || math.IsNaN(total) {
		return out // nothing left of the distribution: no change
	}
	cum, j := 0.0, 0
	for _, o := range d {
		cum += o.p / total
		for j < len(qs) && cum >= qs[j]-1e-12 {
			out[j] = o.x
			j++
		}
	}
	for ; j < len(qs); j++ {
		out[j] = d[len(d)-1].x
	}
	return out
}

func milli(g float64) int64 { return int64(math.Round(g * 1000)) }

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
