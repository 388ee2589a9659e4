package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
)

// Deferral is a flexible job's wait for cleaner power
// (spec.scheduling.flexible): held in Gantry, Queued and not on the
// cluster, until Until, when it is released into its queue. Stored with
// the workload.
type Deferral struct {
	// Until is when it is released (the start of the forecast's lowest
	// window); zero once released.
	Until time.Time `json:"until,omitzero"`
	// Latest is the latest start its max delay or deadline allow;
	// WindowEnd the end of the window chosen.
	Latest    time.Time `json:"latest"`
	WindowEnd time.Time `json:"windowEnd"`
	// Runtime is the run length whose windows were compared.
	Runtime time.Duration `json:"runtime"`
	// AtOnce and AtStart are the forecast's mean intensity (gCO2e/kWh)
	// over a run started at once and over the window chosen, from Source
	// for Location.
	AtOnce   float64 `json:"atOnce"`
	AtStart  float64 `json:"atStart"`
	Source   string  `json:"source"`
	Location string  `json:"location"`
	// Cluster is the worker cluster its start was planned on, with the
	// hour (Fleets: Location is that cluster's region); "" without worker
	// clusters. Its Job carries it for the dispatcher
	// (render.LabelPlannedCluster).
	Cluster string `json:"cluster,omitempty"`
	// Released is when it was released, and by what: "forecast" (its
	// window came) or the person who asked to start it now.
	Released   time.Time `json:"released,omitzero"`
	ReleasedBy string    `json:"releasedBy,omitempty"`
	// Replanned is when a newer forecast last moved its window (zero:
	// never).
	Replanned time.Time `json:"replanned,omitzero"`
}

// Holding reports whether the deferral still holds the workload.
func (d *Deferral) Holding() bool { return d != nil && !d.Until.IsZero() }

// Saving is the fraction of the carbon the forecast said waiting saves.
func (d *Deferral) Saving() float64 {
	if d == nil || d.AtOnce <= 0 {
		return 0
	}
	return (d.AtOnce - d.AtStart) / d.AtOnce
}

// reason is a held workload's reason, for people.
func (d *Deferral) reason() string {
	on := ""
	if d.Cluster != "" {
		on = " on " + d.Cluster
	}
	return fmt.Sprintf("waiting for cleaner power%s: forecast minimum %s–%s UTC, −%.0f %% gCO2/kWh (%s); starts by %s UTC at the latest",
		on, d.Until.Format("15:04"), d.WindowEnd.Format("15:04"), math.Round(d.Saving()*100), d.Source, d.Latest.Format("Jan 2 15:04"))
}

// Flexible is a launch's request to a flexible template: hold it at most
// MaxDelay (nil: the template's; 0: start at once), and have it finished
// by Deadline (zero: none).
type Flexible struct {
	MaxDelay *time.Duration
	Deadline time.Time
}

// deferral decides whether a launch of a flexible template waits for
// cleaner power, and sets its status, reason and Deferral when it does. A
// launch held for approval or by a budget, a trial's run, and one the
// forecast cannot judge (no source, no answer, no cleaner hour in reach)
// start at once: a forecast that does not answer never holds a launch.
func (s *Service) deferral(ctx context.Context, w *Workload, rd Rendered, req Request) error {
	f := rd.Choice.Template.Spec.Scheduling.Flexible
	if f == nil {
		var errs fault.List
		if req.Flexible.MaxDelay != nil {
			errs.Addf("maxDelay", "template %s is not flexible (spec.scheduling.flexible): its jobs start at once", w.Template)
		}
		if !req.Flexible.Deadline.IsZero() {
			errs.Addf("deadline", "template %s is not flexible (spec.scheduling.flexible): its jobs start at once", w.Template)
		}
		return errs.Err()
	}
	now := w.CreatedAt
	maxDelay, _ := time.ParseDuration(f.MaxDelay)
	var errs fault.List
	if d := req.Flexible.MaxDelay; d != nil {
		if *d < 0 || *d > maxDelay {
			errs.Addf("maxDelay", "%s: want 0s (start at once) to the template's %s", *d, f.MaxDelay)
		} else {
			maxDelay = *d
		}
	}
	if dl := req.Flexible.Deadline; !dl.IsZero() && !dl.After(now) {
		errs.Addf("deadline", "%s is not in the future", dl.UTC().Format(time.RFC3339))
	}
	if err := errs.Err(); err != nil {
		return err
	}
	if w.Status != Pending || w.Held || w.Trial != nil || s.forecast == nil || maxDelay == 0 {
		return nil
	}
	runtime := s.expectedRuntime(ctx, *w, f, rd.Choice.Template.Spec.Lifecycle.MaxRuntime)
	latest := now.Add(maxDelay)
	if dl := req.Flexible.Deadline; !dl.IsZero() && dl.Add(-runtime).Before(latest) {
		latest = dl.Add(-runtime)
	}
	if !latest.After(now) {
		return nil // its deadline leaves no room to wait
	}
	p, site, ok, err := s.plan(ctx, w.ID, rd.Objects, now, latest, runtime)
	if err != nil {
		s.log.WarnContext(ctx, "no carbon forecast: the flexible launch starts at once", "workload_id", w.ID, "source", s.forecast.Name(), "err", err)
		return nil
	}
	if !ok || !p.Wait {
		return nil
	}
	w.Status = Queued
	w.Deferral = &Deferral{Until: p.Start, Latest: latest, WindowEnd: p.End, Runtime: runtime,
		AtOnce: p.AtOnce, AtStart: p.AtStart, Source: s.forecast.Name(), Location: site.Location, Cluster: site.Cluster}
	w.Reason = w.Deferral.reason()
	return nil
}

// Site is a worker cluster a flexible launch may run on (Fleets): its
// start is planned together with the cluster, each on its own forecast.
type Site struct {
	Cluster, Location string // Location: its region, as the carbon source names it
	// PricePerHour is the launch's there (USD); PUE its site's (0: 1).
	PricePerHour, PUE float64
	// KWhPerHour is the launch's GPUs' energy in an hour, before the PUE
	// (0: not known).
	KWhPerHour float64
}

// Sites lists the worker clusters a launch's objects may run on (every
// placement rule but those of the moment), and the carbon price placement
// weighs emissions at (USD per kg CO2e; 0: none).
type Sites func(ctx context.Context, objs []render.Object) (sites []Site, carbonPrice float64, err error)

// plan chooses when a flexible launch starts — from now to latest, for a
// run of runtime — and, with worker clusters, where, the two together
// (carbon.BestAmong over each cluster's forecast at its region; a cluster
// whose forecast does not answer is left out); without them, on the
// forecast at Location(""). err says why no forecast answered, and ok is
// false when none covers a start at once: either way the launch starts at
// once. site is where the plan waits (its Cluster "" when it does not wait
// on a worker).
func (s *Service) plan(ctx context.Context, id string, objs []render.Object, now, latest time.Time, runtime time.Duration) (p carbon.Plan, site Site, ok bool, err error) {
	if s.fleet && s.sites != nil {
		sites, price, err := s.sites(ctx, objs)
		if err != nil {
			s.log.WarnContext(ctx, "the worker clusters a flexible launch may run on are not known: its start is planned at the manager's site", "workload_id", id, "err", err)
		}
		var judged []Site
		var cs []carbon.Site
		var errs []error
		for _, site := range sites {
			f, err := s.forecast.Forecast(ctx, site.Location, now, latest.Add(runtime))
			if err != nil {
				errs = append(errs, fmt.Errorf("forecast for cluster %s (%s): %w", site.Cluster, site.Location, err))
				continue
			}
			pue := site.PUE
			if pue <= 0 {
				pue = 1
			}
			hours := runtime.Hours()
			judged = append(judged, site)
			cs = append(cs, carbon.Site{Forecast: f, PUE: pue, Price: site.PricePerHour * hours, Weight: price * site.KWhPerHour * hours * pue / 1000})
		}
		if len(errs) > 0 && len(cs) > 0 {
			s.log.WarnContext(ctx, "no carbon forecast for some worker clusters: a flexible launch is not planned there", "workload_id", id, "source", s.forecast.Name(), "err", errors.Join(errs...))
		}
		if len(cs) > 0 {
			c, ok := carbon.BestAmong(cs, now, latest, runtime)
			if ok && c.Wait {
				site = judged[c.Site]
			}
			return c.Plan, site, ok, nil
		}
		if len(errs) > 0 {
			return carbon.Plan{}, Site{}, false, errors.Join(errs...)
		}
	}
	loc := s.location("")
	forecast, err := s.forecast.Forecast(ctx, loc, now, latest.Add(runtime))
	if err != nil {
		return carbon.Plan{}, Site{}, false, fmt.Errorf("forecast for %s: %w", loc, err)
	}
	p, ok = carbon.Best(forecast, now, latest, runtime)
	return p, Site{Location: loc}, ok, nil
}

// expectedRuntime is the run length a flexible launch's windows are
// compared over: the template's expectedRuntime; else the median of the
// template's last successful runs in the team (three at least); else its
// maxRuntime; else an hour.
func (s *Service) expectedRuntime(ctx context.Context, w Workload, f *template.Flexible, maxRuntime string) time.Duration {
	if d, err := time.ParseDuration(f.ExpectedRuntime); err == nil && d > 0 {
		return d
	}
	done, err := s.store.ListWorkloads(ctx, Filter{Team: w.Team, Template: w.Template, Status: Succeeded, Limit: 20})
	if err == nil {
		var ran []time.Duration
		for _, e := range done {
			if e.RunningFor > 0 {
				ran = append(ran, e.RunningFor)
			}
		}
		if len(ran) >= 3 {
			slices.Sort(ran)
			return ran[len(ran)/2].Round(time.Minute)
		}
	}
	if d, err := time.ParseDuration(maxRuntime); err == nil && d > 0 {
		return d
	}
	return time.Hour
}

// replanEvery is how often the held flexible launches are planned again
// on the forecast as it is then (a source's forecast changes every few
// minutes at most: the Carbon Aware SDK's is cached for five).
const replanEvery = 5 * time.Minute

// ReleaseDeferred releases into their queues the flexible launches whose
// window has come, and applies them; every replanEvery it first plans the
// others again on the forecast as it is now (Replan). It returns how many
// it released.
func (s *Service) ReleaseDeferred(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	now := s.clock()
	if last := s.replanned.Load(); last == 0 || now.Sub(time.Unix(0, last)) >= replanEvery || now.UnixNano() < last {
		s.replanned.Store(now.UnixNano())
		_, released, err := s.Replan(ctx)
		n += released
		errs = append(errs, err)
	}
	due, err := s.store.DueDeferrals(ctx, now, 500)
	if err != nil {
		return n, errors.Join(append(errs, err)...)
	}
	for _, w := range due {
		_, released, err := s.release(ctx, w.ID, "forecast")
		if err != nil {
			errs = append(errs, fmt.Errorf("workload %s: %w", w.ID, err))
			continue
		}
		if released {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// Replan plans every held flexible launch again on the forecast as it is
// now, over what is left of its reach (now to its latest start, for the
// same run length), at the site it was planned on: a window the new
// forecast puts elsewhere is moved there (never past the latest start,
// which its max delay and deadline fixed at launch), and one where
// starting now is as clean — within carbon.MinSaving of the best left — is
// released now. The cluster chosen at launch (Fleets) stays: only its
// hour moves, so that the saving stays counted against starting at launch
// there. A forecast that does not answer leaves every plan as it was. It
// returns how many windows moved and how many launches it released.
func (s *Service) Replan(ctx context.Context) (moved, released int, err error) {
	if s.forecast == nil {
		return 0, 0, nil
	}
	now := s.clock()
	held, err := s.store.DueDeferrals(ctx, now.Add(template.MaxFlexibleDelay+time.Hour), 500)
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, w := range held {
		d := w.Deferral
		if !d.Holding() || !d.Until.After(now.Add(replanEvery)) {
			continue // due before the next look: released at its time
		}
		forecast, err := s.forecast.Forecast(ctx, d.Location, now, d.Latest.Add(d.Runtime))
		if err != nil {
			errs = append(errs, fmt.Errorf("workload %s: forecast for %s: %w", w.ID, d.Location, err))
			continue
		}
		p, ok := carbon.Best(forecast, now, d.Latest, d.Runtime)
		switch {
		case !ok:
			continue // the forecast no longer covers its reach: the plan stands
		case !p.Wait:
			if _, did, err := s.release(ctx, w.ID, "forecast"); err != nil {
				errs = append(errs, fmt.Errorf("workload %s: %w", w.ID, err))
			} else if did {
				released++
			}
			continue
		case p.Start.Equal(d.Until):
			continue
		}
		_, err = s.store.UpdateWorkload(ctx, w.ID, func(w Workload) (Workload, error) {
			if !w.Deferral.Holding() || !w.Deferral.Until.Equal(d.Until) {
				return w, nil // released, stopped or moved meanwhile
			}
			nd := *w.Deferral
			nd.Until, nd.WindowEnd, nd.AtStart, nd.Replanned = p.Start, p.End, p.AtStart, now
			w.Deferral, w.Reason = &nd, nd.reason()
			return w, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("workload %s: %w", w.ID, err))
			continue
		}
		moved++
		s.log.InfoContext(ctx, "a held flexible launch's window moved with the forecast", "workload_id", w.ID, "from", d.Until, "to", p.Start, "cluster", d.Cluster)
	}
	return moved, released, errors.Join(errs...)
}

// errNotHeld: the workload was released (or stopped) since it was read.
var errNotHeld = errors.New("not held for cleaner power")

// release ends a held workload's deferral (by: "forecast" or who asked)
// and applies its objects. One the cluster does not take now is applied
// by the reconciler: its deferral is over either way. released is false
// (and w as it is now) when it was no longer held: released by another
// (the leader and a person at once), or stopped.
func (s *Service) release(ctx context.Context, id, by string) (w Workload, released bool, err error) {
	w, err = s.store.UpdateWorkload(ctx, id, func(w Workload) (Workload, error) {
		if !w.Deferral.Holding() {
			return w, errNotHeld
		}
		now := s.clock()
		reason := fmt.Sprintf("released into its queue at %s UTC (%s)", now.Format("15:04"), releaseWhy(by))
		out, _, err := Transition(w, Release, reason, now)
		if err != nil {
			return w, err
		}
		d := *out.Deferral
		d.Until, d.Released, d.ReleasedBy = time.Time{}, now, by
		out.Deferral = &d
		return out, nil
	})
	if errors.Is(err, errNotHeld) {
		w, err = s.store.Workload(ctx, id)
		return w, false, err
	}
	if err != nil || s.cluster == nil {
		return w, err == nil, err
	}
	objs, err := s.rerender(ctx, w)
	if err != nil {
		// The reconciler tries again, and fails it if it never renders.
		s.log.WarnContext(ctx, "a released flexible launch is not applied now", "workload_id", id, "err", err)
		return w, true, nil
	}
	w, err = s.apply(ctx, w, objs)
	var un *fault.Unavailable
	if errors.As(err, &un) {
		return w, true, nil // released; applied once the cluster answers
	}
	return w, true, err
}

func releaseWhy(by string) string {
	if by == "forecast" {
		return "the forecast's cleanest window"
	}
	return "started now by " + by
}

// startNow releases a held flexible launch at its owner's (or a
// team-admin's) request.
func (s *Service) startNow(ctx context.Context, w Workload) (Workload, error) {
	id, _ := identity.From(ctx)
	w, _, err := s.release(ctx, w.ID, id.String())
	return w, err
}

// CarbonForecast is the forecast at the site of the cluster Gantry drives
// and when a run is best started within it.
type CarbonForecast struct {
	Source, Location string
	From             time.Time
	Hours            []ForecastHour
	Best             carbon.Plan
}

// ForecastHour is one hour of a forecast.
type ForecastHour struct {
	Start     time.Time
	Intensity float64 // gCO2e/kWh
}

// CarbonForecast reads the forecast for the next within and plans a run of
// runtime in it (what a flexible launch would wait for). Without a carbon
// source it is *fault.NotFound.
func (s *Service) CarbonForecast(ctx context.Context, within, runtime time.Duration) (CarbonForecast, error) {
	var errs fault.List
	if within < time.Minute || within > template.MaxFlexibleDelay {
		errs.Addf("within", "%s: want 1m to 168h", within)
	}
	if runtime < time.Minute || runtime > template.MaxFlexibleDelay {
		errs.Addf("runtime", "%s: want 1m to 168h", runtime)
	}
	if err := errs.Err(); err != nil {
		return CarbonForecast{}, err
	}
	if s.forecast == nil {
		return CarbonForecast{}, &fault.NotFound{Kind: "carbon source", Name: "energy.carbonSDK or energy.carbonProfiles"}
	}
	now := s.clock()
	loc := s.location("")
	f, err := s.forecast.Forecast(ctx, loc, now, now.Add(within+runtime))
	if err != nil {
		return CarbonForecast{}, err
	}
	out := CarbonForecast{Source: s.forecast.Name(), Location: loc, From: now}
	for h, v := range f {
		out.Hours = append(out.Hours, ForecastHour{Start: h, Intensity: v})
	}
	slices.SortFunc(out.Hours, func(a, b ForecastHour) int { return a.Start.Compare(b.Start) })
	out.Best, _ = carbon.Best(f, now, now.Add(within), runtime)
	return out, nil
}
