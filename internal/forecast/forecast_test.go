package forecast

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

// synthetic is a history of n launches over days: arrivals at random,
// lifetimes from life, sizes from sizes; the same seed gives the same one.
func synthetic(seed uint64, days int, perDay int, life func(*rand.Rand) time.Duration, sizes []float64) []Record {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []Record
	for i := 0; i < days*perDay; i++ {
		c := t0.Add(time.Duration(r.Int64N(int64(days) * int64(24*time.Hour))))
		out = append(out, Record{Created: c, Ended: c.Add(life(r)), GPUs: sizes[r.IntN(len(sizes))]})
	}
	return out
}

// TestCausal: the forecasts made at any origin up to a cut are the same
// whether the replay sees the whole trace or the trace as known at the
// cut (launches after it unseen, ends after it unknown).
func TestCausal(t *testing.T) {
	recs := synthetic(7, 10, 60, func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(3*time.Hour)) }, []float64{0.5, 1, 2, 8})
	full := NewHistory(recs)
	cut := t0.Add(8*24*time.Hour + 7*time.Hour + 30*time.Minute)
	known := full.At(cut)
	o := ReplayOptions{Horizon: 2 * time.Hour, Step: 10 * time.Minute, Every: 30 * time.Minute}
	collect := func(h *History) map[time.Time][]Point {
		got := map[time.Time][]Point{}
		if err := Replay(h, o, func(pts []Point) error {
			if !pts[0].Origin.After(cut) {
				got[pts[0].Origin] = pts
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	a, b := collect(full), collect(known)
	if len(a) < 40 {
		t.Fatalf("only %d origins before the cut", len(a))
	}
	for origin, pts := range a {
		other, ok := b[origin]
		if !ok {
			// The cut history ends earlier: its last origins are a horizon
			// before its last event.
			if origin.Add(o.Horizon).Before(cut) {
				t.Errorf("origin %s: missing from the cut replay", origin)
			}
			continue
		}
		for i := range pts {
			if pts[i] != other[i] {
				t.Fatalf("origin %s, point %d: %+v with the whole trace, %+v with the trace cut at %s", origin, i, pts[i], other[i], cut)
			}
		}
	}
}

// TestCausalAtTheCut: a forecast made at a cut is the same from the whole
// trace, from the trace as known at the cut, and from a trace with other
// launches added after the cut — at many cuts, so the forecast window
// itself lies in the unknown.
func TestCausalAtTheCut(t *testing.T) {
	recs := synthetic(11, 9, 80, func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(2*time.Hour)) }, []float64{0.25, 1, 4, 8})
	full := NewHistory(recs)
	future := append(slices.Clone(recs), synthetic(12, 9, 80, func(r *rand.Rand) time.Duration { return time.Hour }, []float64{8})...)
	for i := range 40 {
		cut := t0.Add(7*24*time.Hour + time.Duration(i)*47*time.Minute)
		var later []Record
		for _, r := range future {
			if r.Created.After(cut) {
				later = append(later, r)
			}
		}
		want := New(full, Options{}).Forecast(cut, 3*time.Hour, 10*time.Minute)
		for name, h := range map[string]*History{
			"known at the cut":       full.At(cut),
			"more launches after it": NewHistory(append(slices.Clone(recs), later...)),
		} {
			got := New(h, Options{}).Forecast(cut, 3*time.Hour, 10*time.Minute)
			if !slices.Equal(got, want) {
				t.Fatalf("cut %s, %s: %+v, want %+v", cut, name, got, want)
			}
		}
	}
}

// TestForecastKnowsLifetimes: when every launch of the history lasted
// exactly 30 minutes, one 20 minutes old is gone 10 minutes on, and the
// forecast and its low end say so (an arrival in the meantime is possible,
// not likely: it may raise the high end only).
func TestForecastKnowsLifetimes(t *testing.T) {
	var recs []Record
	for i := range 200 {
		c := at(i * 60)
		recs = append(recs, Record{Created: c, Ended: c.Add(30 * time.Minute), GPUs: 8})
	}
	// The launch being forecast: 20 minutes old at the origin.
	origin := at(200*60 + 24*60)
	recs = append(recs, Record{Created: origin.Add(-20 * time.Minute), GPUs: 8})
	f := New(NewHistory(recs), Options{ArrivalWindow: time.Hour})
	pts := f.Forecast(origin, 20*time.Minute, 5*time.Minute)
	want := []float64{8, 0, 0, 0} // 5 min: 25 min old, still there; 10 min on: gone
	if len(pts) != len(want) {
		t.Fatalf("%d points, want %d", len(pts), len(want))
	}
	for i, p := range pts {
		if p.GPUs != want[i] || p.Lo != want[i] || p.Hi < p.GPUs {
			t.Errorf("%s ahead: %+v, want %v", p.T.Sub(origin), p, want[i])
		}
	}
}

// TestForecastKnowsKinds: two kinds of launch of the same size, one that
// lasts 30 minutes and one that lasts 10 hours. Pooled by size, a launch 20
// minutes old is as likely as not to end; by its kind, a short one is gone
// 10 minutes on and a long one stays.
func TestForecastKnowsKinds(t *testing.T) {
	var recs []Record
	for i := range 200 {
		c := at(i * 60)
		recs = append(recs, Record{Created: c, Ended: c.Add(30 * time.Minute), GPUs: 8, Kind: "short"},
			Record{Created: c, Ended: c.Add(10 * time.Hour), GPUs: 8, Kind: "long"})
	}
	origin := at(200*60 + 24*60)
	for _, tc := range []struct {
		kind string
		want float64
	}{{"short", 0}, {"long", 8}} {
		h := append(slices.Clone(recs), Record{Created: origin.Add(-20 * time.Minute), GPUs: 8, Kind: tc.kind})
		pts := New(NewHistory(h), Options{ArrivalWindow: time.Hour}).Forecast(origin, 10*time.Minute, 10*time.Minute)
		if len(pts) != 1 || pts[0].GPUs != tc.want {
			t.Errorf("a %s launch 20 minutes old, 10 minutes on: %+v, want %v GPUs", tc.kind, pts, tc.want)
		}
	}
}

// TestForecastArrivals: launches that arrive steadily and last long are
// expected to keep arriving: the forecast rises with the horizon, within
// its band.
func TestForecastArrivals(t *testing.T) {
	var recs []Record
	for i := range 24 * 14 {
		recs = append(recs, Record{Created: at(i * 60), Ended: at(i*60 + 48*60), GPUs: 1}) // one an hour, each 48 h
	}
	origin := at(24 * 14 * 60)
	h := NewHistory(recs)
	now := NewSeries(h).At(origin)
	pts := New(h, Options{}).Forecast(origin, 6*time.Hour, time.Hour)
	for i, p := range pts {
		if !(p.Lo <= p.GPUs && p.GPUs <= p.Hi) {
			t.Errorf("point %d: %v outside its band [%v, %v]", i, p.GPUs, p.Lo, p.Hi)
		}
		// About one arrival an hour, and none ends within 6 h (all 48 h
		// long; the oldest alive are 47 h old, and end).
		if i > 0 && p.GPUs < pts[i-1].GPUs-1 {
			t.Errorf("point %d: %v after %v", i, p.GPUs, pts[i-1].GPUs)
		}
	}
	if last := pts[len(pts)-1]; last.Hi <= now {
		t.Errorf("6 h ahead: band up to %v, now %v: arrivals are not expected", last.Hi, now)
	}
}

// TestPoissonLarge: a stream of many arrivals keeps its whole mass and its
// median where the mean is, even where e^-λ underflows.
func TestPoissonLarge(t *testing.T) {
	for _, lambda := range []float64{0.01, 3, 100, 1000} {
		d := noChange.withPoisson(1000, lambda)
		var total float64
		for _, o := range d {
			total += o.p
		}
		if math.Abs(total-1) > 1e-6 {
			t.Errorf("λ %v: total %v", lambda, total)
		}
		med := float64(d.quantiles(0.5)[0]) / 1000
		if math.Abs(med-lambda) > 1+lambda/100 {
			t.Errorf("λ %v: median %v", lambda, med)
		}
	}
}

func TestKaplanMeier(t *testing.T) {
	// Lifetimes 1, 2 (censored), 3, 4: S(1)=3/4, S(3)=3/4·1/2, S(4)=0.
	c := kaplanMeier([]life{{4 * time.Minute, true}, {time.Minute, true}, {3 * time.Minute, true}, {2 * time.Minute, false}})
	for _, tc := range []struct {
		d    time.Duration
		want float64
	}{{0, 1}, {time.Minute, 0.75}, {2 * time.Minute, 0.75}, {3 * time.Minute, 0.375}, {4 * time.Minute, 0}, {time.Hour, 0}} {
		if got := c.at(tc.d); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("S(%s) = %v, want %v", tc.d, got, tc.want)
		}
	}
}

func TestSeries(t *testing.T) {
	h := NewHistory([]Record{
		{Created: at(0), Ended: at(10), GPUs: 1},
		{Created: at(5), GPUs: 0.25},
		{Created: at(10), Ended: at(20), GPUs: 8},
	})
	s := NewSeries(h)
	for _, tc := range []struct {
		min  int
		want float64
	}{{-1, 0}, {0, 1}, {5, 1.25}, {9, 1.25}, {10, 8.25}, {20, 0.25}, {1000, 0.25}} {
		if got := s.At(at(tc.min)); got != tc.want {
			t.Errorf("at %d min: %v, want %v", tc.min, got, tc.want)
		}
		var alive float64 // by definition: the records alive then
		for _, r := range h.recs {
			if r.alive(at(tc.min)) {
				alive += r.GPUs
			}
		}
		if alive != tc.want {
			t.Errorf("alive at %d min: %v, want %v", tc.min, alive, tc.want)
		}
	}
}

func TestSMAPE(t *testing.T) {
	for _, tc := range []struct{ f, a, want float64 }{{0, 0, 0}, {1, 1, 0}, {1, 0, 2}, {0, 1, 2}, {3, 1, 1}, {1, 3, 1}} {
		if got := SMAPE(tc.f, tc.a); got != tc.want {
			t.Errorf("SMAPE(%v, %v) = %v, want %v", tc.f, tc.a, got, tc.want)
		}
	}
}

// TestScoreBaselines: on a history whose demand repeats every day, the
// day-ago baseline is exact, the last value is not, and the score says
// which was best.
func TestScoreBaselines(t *testing.T) {
	var recs []Record
	for d := range 10 {
		c := at(d*24*60 + 9*60)
		recs = append(recs, Record{Created: c, Ended: c.Add(8 * time.Hour), GPUs: 16}) // 9:00–17:00 each day
	}
	recs = append(recs, Record{Created: at(0), GPUs: 1}) // and one always there
	h := NewHistory(recs)
	sc := NewScorer(h)
	if err := Replay(h, ReplayOptions{Horizon: 2 * time.Hour, Step: time.Hour, Every: time.Hour}, func(pts []Point) error {
		sc.Add(pts)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s := sc.Score()
	if s.Origins == 0 {
		t.Fatal("no origins")
	}
	if s.Horizon.Baseline["day"] != 0 || s.Horizon.Best != "day" {
		t.Errorf("day-ago baseline %v %% (best %q), want exact", s.Horizon.Baseline["day"], s.Horizon.Best)
	}
	if s.Horizon.Baseline["last"] <= 0 {
		t.Errorf("last value %v %%: the daily swing is missed by it", s.Horizon.Baseline["last"])
	}
	if d := s.Horizon.Baseline["decomposed"]; d > 1e-9 {
		t.Errorf("decomposed %v %%: a flat trend and a daily season are all there is", d)
	}
}

// TestDecomposed: demand that grows a little every hour under a daily
// swing is forecast closer by the decomposition (trend and season) than by
// the same time yesterday (which misses the day's growth) or the last
// value (which misses the swing); and it reads nothing after its origin.
func TestDecomposed(t *testing.T) {
	var recs []Record
	for d := range 10 {
		c := at(d*24*60 + 9*60)
		recs = append(recs, Record{Created: c, Ended: c.Add(8 * time.Hour), GPUs: 16}) // 9:00–17:00 each day
		for h := range 24 {
			recs = append(recs, Record{Created: at(d*24*60 + h*60), GPUs: 0.5}) // and half a GPU more each hour
		}
	}
	h := NewHistory(recs)
	sc := NewScorer(h)
	if err := Replay(h, ReplayOptions{Horizon: 2 * time.Hour, Step: 30 * time.Minute, Every: 30 * time.Minute}, func(pts []Point) error {
		sc.Add(pts)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e := sc.Score().Horizon
	t.Logf("sMAPE at 2 h: decomposed %.3f %%, day %.3f %%, last %.3f %%", e.Baseline["decomposed"], e.Baseline["day"], e.Baseline["last"])
	if e.Baseline["decomposed"] >= e.Baseline["day"] || e.Baseline["decomposed"] >= e.Baseline["last"] {
		t.Errorf("sMAPE: decomposed %.3f %%, day %.3f %%, last %.3f %%: want the decomposition best", e.Baseline["decomposed"], e.Baseline["day"], e.Baseline["last"])
	}
	// Causal: a history cut at the origin gives the same forecast.
	s := NewSeries(h)
	origin := at(8*24*60 + 10*60)
	var cut []Record
	for _, r := range recs {
		if r.Created.After(origin) {
			continue
		}
		if r.Ended.After(origin) {
			r.Ended = time.Time{}
		}
		cut = append(cut, r)
	}
	sCut := NewSeries(NewHistory(cut))
	for _, ahead := range []time.Duration{10 * time.Minute, time.Hour, 2 * time.Hour} {
		if a, b := decomposed(s, origin, origin.Add(ahead)), decomposed(sCut, origin, origin.Add(ahead)); math.Abs(a-b) > 1e-9 {
			t.Errorf("%v ahead: %v from the whole history, %v from the history known at the origin", ahead, a, b)
		}
	}
}

// TestSeriesMean: the mean over a window is the exact time-weighted mean of
// a step function.
func TestSeriesMean(t *testing.T) {
	s := NewSeries(NewHistory([]Record{{Created: at(60), Ended: at(120), GPUs: 2}, {Created: at(90), GPUs: 1}}))
	for _, tc := range []struct {
		a, b int // minutes
		want float64
	}{{0, 60, 0}, {60, 120, 2 + 0.5}, {0, 240, (2*60 + 150.0) / 240}, {100, 110, 3}, {30, 90, 1}, {100, 100, 3}, {100, 90, 3}} {
		if got := s.Mean(at(tc.a), at(tc.b)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("mean over [%d, %d) min: %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestReplayOptions(t *testing.T) {
	h := NewHistory([]Record{{Created: at(0), GPUs: 1}})
	for _, tc := range []struct {
		o    ReplayOptions
		want string
	}{
		{ReplayOptions{Step: time.Second}, "step 1s"},
		{ReplayOptions{Horizon: time.Minute}, "horizon 1m0s"},
		{ReplayOptions{Horizon: 200 * time.Hour}, "horizon 200h0m0s"},
		{ReplayOptions{Horizon: 48 * time.Hour, Step: time.Minute}, "at most 1000 steps"},
	} {
		err := Replay(h, tc.o, func([]Point) error { return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.o, err, tc.want)
		}
	}
	// A trace longer than a Duration holds (292 years; time.Sub saturates
	// there) is measured in seconds, so it does not pass for a short one
	// and replay millions of origins (a fuzzer's find).
	long := NewHistory([]Record{{Created: at(0), Ended: at(0).AddDate(4000, 0, 0), GPUs: 1}})
	err := Replay(long, ReplayOptions{Every: 6 * time.Hour}, func([]Point) error { t.Fatal("an origin replayed"); return nil })
	if err == nil || !strings.Contains(err.Error(), "the trace spans 1460970 days") || !strings.Contains(err.Error(), "origins every 6h0m0s would be more than") {
		t.Errorf("a 4,000-year trace: %v", err)
	}
}
