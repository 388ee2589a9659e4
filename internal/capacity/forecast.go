package capacity

import (
	"context"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/forecast"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/workload"
)

// History is Gantry's record of launches, as the forecast reads it.
type History interface {
	// Demand lists the launches wanted at some time from since on.
	Demand(ctx context.Context, since time.Time) ([]workload.Demand, error)
}

// HistoryWindow is how far back the forecast and the reserved-size advice
// read launches: eight weeks, for the survival curves and a week of
// arrivals with room to spare.
const HistoryWindow = 8 * 7 * 24 * time.Hour

// Forecast limits: steps of 1 minute to 1 hour, up to 12 hours ahead, at
// most 144 steps.
const (
	MaxHorizon = 12 * time.Hour
	MaxSteps   = 144
)

// Forecast is a class's demand forecast made now.
type Forecast struct {
	Class    string
	Origin   time.Time
	Step     time.Duration
	Now      float64 // GPUs wanted at the origin
	Launches int     // launches of the class in the history read
	Points   []ForecastPoint
}

// ForecastPoint is the forecast at one time ahead, with its band and the
// seasonal naive baselines (what was wanted a day and a week before).
type ForecastPoint struct {
	T               time.Time
	GPUs, Lo, Hi    float64
	DayAgo, WeekAgo float64
}

// history reads the class's launches of the window as the forecast's
// records: a MIG slice counts as its share of a GPU (the larger of its
// compute and memory shares), as quota counts it.
func (s *Service) history(ctx context.Context, class gpu.Class, now time.Time) ([]forecast.Record, error) {
	ds, err := s.launches.Demand(ctx, now.Add(-HistoryWindow))
	if err != nil {
		return nil, err
	}
	var out []forecast.Record
	for _, d := range ds {
		if d.GPUClass != class.Name || d.Created.After(now) {
			continue
		}
		gpus := float64(d.GPUCount)
		if d.MIGProfile != "" {
			p, ok := class.Profile(d.MIGProfile)
			if !ok {
				continue // a profile the class no longer has: its share is not known
			}
			gpus *= p.Share()
		}
		// Launches of one template and size last alike.
		kind := fmt.Sprintf("%s/%d/%s", d.Template, d.GPUCount, d.MIGProfile)
		r := forecast.Record{Created: d.Created, GPUs: gpus, Class: class.Name, Kind: kind}
		if !d.Ended.After(now) {
			r.Ended = d.Ended // an end after now is not known yet
		}
		out = append(out, r)
	}
	return out, nil
}

// Forecast forecasts a class's GPUs wanted (running and waiting) at each
// step up to horizon from now, from Gantry's own launch history.
func (s *Service) Forecast(ctx context.Context, className string, horizon, step time.Duration) (Forecast, error) {
	var errs fault.List
	class, ok := s.classes.Get(className)
	if !ok {
		return Forecast{}, &fault.NotFound{Kind: "GPU class", Name: className}
	}
	if step < time.Minute || step > time.Hour {
		errs.Addf("step", "%s: must be between 1m and 1h", step)
	}
	if horizon < step || horizon > MaxHorizon {
		errs.Addf("horizon", "%s: must be between the step and %s", horizon, MaxHorizon)
	} else if step > 0 && horizon/step > MaxSteps {
		errs.Addf("horizon", "%s in steps of %s is %d steps: at most %d", horizon, step, horizon/step, MaxSteps)
	}
	if err := errs.Err(); err != nil {
		return Forecast{}, err
	}
	now := s.now().UTC()
	recs, err := s.history(ctx, class, now)
	if err != nil {
		return Forecast{}, err
	}
	h := forecast.NewHistory(recs)
	series := forecast.NewSeries(h)
	out := Forecast{Class: class.Name, Origin: now, Step: step, Now: series.At(now), Launches: h.Len()}
	for _, p := range forecast.New(h, forecast.Options{}).Forecast(now, horizon, step) {
		out.Points = append(out.Points, ForecastPoint{T: p.T, GPUs: p.GPUs, Lo: p.Lo, Hi: p.Hi,
			DayAgo: series.At(p.T.Add(-24 * time.Hour)), WeekAgo: series.At(p.T.Add(-7 * 24 * time.Hour))})
	}
	return out, nil
}

// errNoHistory is the reserved-size advice of a class without launches.
func errNoHistory(class string) error {
	return &fault.Invalid{Fields: []fault.Field{{Path: "class", Message: fmt.Sprintf("no launches of %s in the last %d days: nothing to size a reservation on", class, int(HistoryWindow.Hours()/24))}}}
}
