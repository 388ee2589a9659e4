package carbon

import (
	"context"
	"math"
	"time"
)

// Forecaster says the grid's expected carbon intensity ahead: what a
// flexible launch's start is chosen by.
type Forecaster interface {
	// Name says where the forecast comes from, for every plan shown.
	Name() string
	// Forecast is the expected mean intensity (gCO2e/kWh) of each hour
	// (UTC, its start) in [from, to) at location; an hour past the
	// forecast's horizon is absent. An unknown location is
	// *fault.NotFound.
	Forecast(ctx context.Context, location string, from, to time.Time) (map[time.Time]float64, error)
}

// Feed is a source that also forecasts: both of Gantry's are.
type Feed interface {
	Source
	Forecaster
}

// Forecast implements Forecaster: a static profile is its own forecast.
func (p *Profiles) Forecast(ctx context.Context, location string, from, to time.Time) (map[time.Time]float64, error) {
	return p.Intensity(ctx, location, from, to)
}

// MinSaving is the least a later start must save against starting at
// once, as a fraction of the carbon, for a flexible launch to wait for it:
// below it the forecast's own error is larger than the gain.
const MinSaving = 0.05

// Plan is when a flexible run is best started: the start in
// [Now, Latest] whose window [Start, End) has the lowest mean forecast
// intensity, against starting at once.
type Plan struct {
	Start, End time.Time
	Latest     time.Time // the latest start allowed (its max delay or its deadline)
	// AtOnce and AtStart are the forecast's mean intensity (gCO2e/kWh)
	// over a run started now and over [Start, End).
	AtOnce, AtStart float64
	// Wait is true when Start is later than now, saving at least
	// MinSaving.
	Wait bool
}

// Saving is the fraction of the carbon the plan saves against starting
// at once (0 when it does not wait).
func (p Plan) Saving() float64 {
	if !p.Wait || p.AtOnce <= 0 {
		return 0
	}
	return (p.AtOnce - p.AtStart) / p.AtOnce
}

// Best chooses when to start a run of length run, from now to latest at
// the latest: now, or any later hour's start. A start is judged by the
// mean forecast intensity over its window, each hour weighted by how much
// of the window it covers; a window with an hour the forecast lacks is
// not judged. The earliest of the lowest wins, and a start later than now
// only when it saves at least MinSaving against starting now. ok is false
// when the forecast does not cover a start at once (nothing to compare
// with: start now).
func Best(forecast map[time.Time]float64, now, latest time.Time, run time.Duration) (p Plan, ok bool) {
	if run <= 0 {
		run = time.Hour
	}
	now = now.UTC()
	atOnce, ok := mean(forecast, now, run)
	if !ok {
		return Plan{Start: now, End: now.Add(run), Latest: latest}, false
	}
	p = Plan{Start: now, End: now.Add(run), Latest: latest, AtOnce: atOnce, AtStart: atOnce}
	best := atOnce
	for s := now.Truncate(time.Hour).Add(time.Hour); !s.After(latest); s = s.Add(time.Hour) {
		m, ok := mean(forecast, s, run)
		if !ok {
			continue
		}
		if m < best-1e-9 {
			best, p.Start = m, s
		}
	}
	if p.Start.After(now) && (atOnce-best)/atOnce >= MinSaving {
		p.End, p.AtStart, p.Wait = p.Start.Add(run), best, true
	} else {
		p.Start = now
	}
	return p, true
}

// mean is the forecast's mean over [start, start+run), each hour weighted
// by its overlap; ok false when an hour of it is missing.
func mean(forecast map[time.Time]float64, start time.Time, run time.Duration) (float64, bool) {
	end := start.Add(run)
	sum, weight := 0.0, 0.0
	for t := start; t.Before(end); {
		h := t.Truncate(time.Hour)
		next := minTime(h.Add(time.Hour), end)
		v, ok := forecast[h]
		if !ok {
			return 0, false
		}
		w := next.Sub(t).Seconds()
		sum += v * w
		weight += w
		t = next
	}
	if weight == 0 {
		return 0, false
	}
	return sum / weight, true
}

// Shifted is the carbon the energy used hour by hour (kWh by hour start)
// would have had had it been used by earlier: each hour's kWh moved back
// by by, split between the two hours the moved hour overlaps, each part
// at its hour's intensity. It is what a deferred run would have emitted
// had it started at once. Unrated is the kWh whose earlier hours the
// intensities lack.
func Shifted(kwh map[time.Time]float64, intensity map[time.Time]float64, by time.Duration) (grams, unrated float64) {
	moved := make(map[time.Time]float64, 2*len(kwh))
	for h, k := range kwh {
		start := h.Add(-by)
		first := start.Truncate(time.Hour)
		later := float64(start.Sub(first)) / float64(time.Hour) // the part in the next hour
		moved[first] += k * (1 - later)
		if later > 0 {
			moved[first.Add(time.Hour)] += k * later
		}
	}
	return Grams(moved, intensity)
}

// Site is one place a flexible run may start (a worker cluster of the
// fleet), with its grid's forecast and what a run there costs.
type Site struct {
	Forecast map[time.Time]float64 // gCO2e/kWh by hour, as a Forecaster gives it
	// PUE is its facility's power usage effectiveness (1 when 0): the
	// carbon of a run there is its PUE × the grid's intensity.
	PUE float64
	// Price is what the run costs there apart from carbon (USD), and
	// Weight what carbon adds to it: USD per gCO2e/kWh of the mean
	// intensity over the run, PUE included (the fleet's carbon price ×
	// the run's kWh × the PUE / 1000; 0: carbon has no price).
	Price, Weight float64
}

// Choice is where (Site, an index of the sites) and when a flexible run is
// best started; Plan is Best's at that site.
type Choice struct {
	Site int
	Plan
}

// BestAmong chooses the site and the start of a run of length run
// together, from now to latest at the latest: of every site and start, the
// lowest cost (the site's price + its weight × the window's mean
// intensity), then the lowest carbon (its PUE × that intensity), then the
// earliest, then the first site. With no carbon price that is the
// cheapest sites' cleanest window. The run waits for that start when it
// saves at least MinSaving of the carbon against starting at once at the
// same site (Best's rule, so AtOnce and AtStart are that site's) and
// against starting at once where that costs least; otherwise it starts at
// once there. A site whose forecast does not cover a start at once is not
// judged; ok is false when no site's does.
func BestAmong(sites []Site, now, latest time.Time, run time.Duration) (c Choice, ok bool) {
	if run <= 0 {
		run = time.Hour
	}
	now = now.UTC()
	type key struct{ cost, carbon float64 }
	less := func(a, b key) bool {
		if math.Abs(a.cost-b.cost) > 1e-9 {
			return a.cost < b.cost
		}
		return a.carbon < b.carbon-1e-9
	}
	judge := func(s Site, start time.Time) (key, bool) {
		m, ok := mean(s.Forecast, start, run)
		pue := s.PUE
		if pue <= 0 {
			pue = 1
		}
		return key{s.Price + s.Weight*m, pue * m}, ok
	}
	best, once := -1, -1
	var bestKey, onceKey key
	var bestStart time.Time
	judged := make([]bool, len(sites))
	for i, s := range sites {
		k, ok := judge(s, now)
		if !ok {
			continue
		}
		judged[i] = true
		if once < 0 || less(k, onceKey) {
			once, onceKey = i, k
		}
	}
	if once < 0 {
		return Choice{Site: -1, Plan: Plan{Start: now, End: now.Add(run), Latest: latest}}, false
	}
	best, bestKey, bestStart = once, onceKey, now
	for start := now.Truncate(time.Hour).Add(time.Hour); !start.After(latest); start = start.Add(time.Hour) {
		for i, s := range sites {
			if !judged[i] {
				continue
			}
			if k, ok := judge(s, start); ok && less(k, bestKey) {
				best, bestKey, bestStart = i, k, start
			}
		}
	}
	// A wait must save MinSaving against starting at once at its own site
	// (Best's rule, the saving shown and metered), and against starting
	// at once where that costs least.
	if bestStart.After(now) && onceKey.carbon-bestKey.carbon >= MinSaving*onceKey.carbon {
		if p, _ := Best(sites[best].Forecast, now, latest, run); p.Wait {
			return Choice{Site: best, Plan: p}, true
		}
	}
	p, _ := Best(sites[once].Forecast, now, now, run)
	p.Latest = latest
	return Choice{Site: once, Plan: p}, true
}
