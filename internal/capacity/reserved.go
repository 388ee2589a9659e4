package capacity

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/forecast"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// ReservedWindow is the history the reserved-size advice reads: four weeks.
const ReservedWindow = 28 * 24 * time.Hour

// sample is how often demand is read over the window.
const sample = 10 * time.Minute

// Reserved is the advice on how many GPUs of a class are worth reserving.
type Reserved struct {
	Class    string
	From, To time.Time // the window read
	// Share is the share of hours demand stayed at or above Level.
	Share float64
	// Unit is the GPUs Level is counted in: a reserved group's machine, or
	// one GPU when the class has none.
	Unit  int
	Level int // GPUs
	// ReservedNow is the GPUs the class's reserved groups hold now.
	ReservedNow int
	// Priced: a reserved and an on-demand price are known (the class's
	// groups; the class's own on-demand price when it has no on-demand
	// group). Without a reserved group there is no reserved price, and no
	// savings are said.
	Priced                       bool
	OnDemandPrice, ReservedPrice float64 // per GPU-hour
	// SavingsPerMonth is what reserving Level GPUs saves over running the
	// same hours on demand, per 30 days of the window (negative: it costs);
	// Best is the level that saves most, and what it saves.
	SavingsPerMonth     float64
	Best                int
	BestSavingsPerMonth float64
}

// Reserved sizes a reservation for a class from the last four weeks of its
// demand: the level it stayed at or above for share of the hours (an hour
// counts at its lowest), in whole machines of its reserved group, and what
// that would have saved against on-demand prices.
func (s *Service) Reserved(ctx context.Context, className string, share float64) (Reserved, error) {
	class, ok := s.classes.Get(className)
	if !ok {
		return Reserved{}, &fault.NotFound{Kind: "GPU class", Name: className}
	}
	if math.IsNaN(share) || share <= 0 || share > 1 {
		return Reserved{}, &fault.Invalid{Fields: []fault.Field{{Path: "share", Message: "must be above 0 and at most 1"}}}
	}
	now := s.now().UTC()
	recs, err := s.history(ctx, class, now)
	if err != nil {
		return Reserved{}, err
	}
	h := forecast.NewHistory(recs)
	if h.Len() == 0 {
		return Reserved{}, errNoHistory(class.Name)
	}
	first, _ := h.Span()
	from := now.Add(-ReservedWindow)
	if first.After(from) {
		from = first.Truncate(time.Hour)
	}
	series := forecast.NewSeries(h)
	var demand []float64
	for t := from; t.Before(now); t = t.Add(sample) {
		demand = append(demand, series.At(t))
	}
	out := Reserved{Class: class.Name, From: from, To: now, Share: share, Unit: 1, OnDemandPrice: class.Price.OnDemand}
	for _, g := range s.groups.ForClass(class.Name) {
		switch g.Purchase {
		case nodegroup.Reserved:
			out.ReservedNow += g.Max * g.GPUsPerNode
			if !out.Priced {
				out.Unit, out.ReservedPrice, out.Priced = g.GPUsPerNode, g.GPUHourPrice(), true
			}
		case nodegroup.OnDemand:
			out.OnDemandPrice = g.GPUHourPrice()
		}
	}
	perHour := int(time.Hour / sample)
	out.Level = levelAbove(hourlyLows(demand, perHour), share, out.Unit)
	if out.Priced {
		months := float64(len(demand)) * sample.Hours() / (30 * 24)
		save := func(level int) float64 {
			return savings(demand, sample.Hours(), level, out.OnDemandPrice, out.ReservedPrice) / months
		}
		out.SavingsPerMonth = round2(save(out.Level))
		peak := 0.0
		for _, d := range demand {
			peak = math.Max(peak, d)
		}
		for l := 0; l <= int(math.Ceil(peak)); l += out.Unit {
			if v := save(l); v > out.BestSavingsPerMonth {
				out.Best, out.BestSavingsPerMonth = l, round2(v)
			}
		}
	}
	return out, nil
}

// hourlyLows is the lowest demand of each whole hour of samples.
func hourlyLows(demand []float64, perHour int) []float64 {
	var out []float64
	for i := 0; i+perHour <= len(demand); i += perHour {
		low := demand[i]
		for _, d := range demand[i : i+perHour] {
			low = math.Min(low, d)
		}
		out = append(out, low)
	}
	return out
}

// levelAbove is the highest multiple of unit that at least share of the
// hours' lows reach.
func levelAbove(lows []float64, share float64, unit int) int {
	if len(lows) == 0 || unit <= 0 {
		return 0
	}
	sorted := append([]float64(nil), lows...)
	sort.Sort(sort.Reverse(sort.Float64Slice(sorted)))
	// The k-th highest low is reached by k of the hours.
	k := int(math.Ceil(share*float64(len(sorted)))) - 1
	k = max(0, min(k, len(sorted)-1))
	level := int(math.Floor(sorted[k]+1e-9)) / unit * unit
	return level
}

// savings is what reserving level GPUs at reserved per GPU-hour saves over
// paying onDemand for the GPUs of it that demand used, over samples hours
// apart.
func savings(demand []float64, hours float64, level int, onDemand, reserved float64) float64 {
	used := 0.0
	for _, d := range demand {
		used += math.Min(d, float64(level))
	}
	return used*hours*onDemand - float64(level)*float64(len(demand))*hours*reserved
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
