package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/team"
)

// Run is one run of a workload — Running from From until To (zero: still
// running) — with what it is billed by.
type Run struct {
	Workload        string
	Team            team.Name
	Owner           string
	Template        string
	TemplateVersion int
	GPUClass        string
	MIGProfile      string
	GPUCount        int
	PricePerHour    float64 // at its node groups' prices when known, else its class's
	NodeGroup       string  // the node group it ran on ("" when not known)
	Cluster         string  // the worker cluster it ran on ("": the cluster Gantry drives)
	From, To        time.Time
	// Waited is how long its workload was held for cleaner power before
	// it was released (0: it was not).
	Waited time.Duration
}

// Demand is one launch as the demand forecast sees it: wanted (waiting or
// running) from Created until Ended (zero while it lasts), GPUCount of a
// class, each a MIG slice when MIGProfile is set. Created is when it asked
// the cluster for GPUs: its launch, or for a flexible job held for cleaner
// power its release (one still held wants nothing yet).
type Demand struct {
	Created, Ended time.Time
	Template       string
	GPUClass       string
	MIGProfile     string
	GPUCount       int
}

// WarmSpend is what a node group's machines kept warm ahead of the
// forecast cost on one day (UTC midnight): the platform's idle cost.
type WarmSpend struct {
	Group    string
	Day      time.Time
	Cost     float64
	GPUHours float64
}

// CostGroups are what costs are grouped by.
var CostGroups = []string{"team", "user", "template", "gpuClass", "costCenter", "nodeGroup", "cluster"}

// CostLine is one group's cost over a period.
type CostLine struct {
	Key       string  // the team, user, template, GPU class, cost center or node group ("" when none)
	Cost      float64 // USD
	GPUHours  float64 // whole GPUs' worth (a MIG slice at its share) × hours Running
	Workloads int     // with a run in the period
	// Cost split by the GPU series: Used while a GPU of the workload was
	// active, Idle while its GPUs were measured idle, Unmeasured for
	// running time without samples (no agent, or past their retention).
	Used, Idle, Unmeasured float64
	// KWh is the energy its workloads' pods used on their GPUs in the
	// period, as the GPUs measured it (a workload's split over its runs by
	// their hours); FacilityKWh that times the PUE of the site each ran
	// at. Both 0 where nothing was measured. KgCO2e is the facility's
	// energy times the grid's intensity where and when it was used (0
	// without a carbon source).
	KWh, FacilityKWh, KgCO2e float64
}

// GPUMinutes is a workload's GPU time in a period by one-minute buckets:
// Measured, and Active (GPU utilization above 1 % or SM activity above
// 0.01 on average in the minute).
type GPUMinutes struct{ Measured, Active int }

// Costs is showback: what the caller's teams' workloads cost in [From, To),
// grouped, biggest first.
type Costs struct {
	From, To               time.Time
	GroupBy                string
	Total                  float64
	Used, Idle, Unmeasured float64
	KWh, FacilityKWh       float64
	// KgCO2e is the carbon of the facility's energy (CarbonSource names
	// where the intensities came from; "": no carbon source); UnratedKWh
	// is facility energy of hours it had no figure for (or whose site it
	// could not rate), left out of KgCO2e.
	KgCO2e, UnratedKWh float64
	CarbonSource       string
	// Deferred is what holding flexible jobs for cleaner power saved.
	Deferred DeferralSaving
	Lines    []CostLine
	// Reserved is the reserved node groups' cost over the period up to
	// now, for a caller who may read every team's workloads (nil for
	// others); PlatformIdle is their idle cost in all.
	Reserved []ReservedCost
	// Warm is what machines kept warm ahead of the forecast cost per node
	// group, over the days (UTC) that overlap the period; also only for a
	// caller who may read every team's workloads. PlatformIdle is the
	// reserved groups' idle cost and the warm machines' cost in all.
	Warm         []WarmCost
	PlatformIdle float64
}

// WarmCost is what a node group's warm machines cost over a period.
type WarmCost struct {
	Group, Class   string
	Cost, GPUHours float64
}

// ReservedCost is a reserved node group over a period: its machines are
// paid whether used or not (Cost); the runs on them were charged to their
// teams (Charged, in the lines); the rest is the platform's idle cost.
type ReservedCost struct {
	Group, Class           string
	Nodes                  int
	Cost, Charged, Idle    float64
	GPUHours, UsedGPUHours float64
}

// Costs meters the runs of the workloads the caller may read in [from, to)
// — each run's Running time inside the period at its price per hour (its
// node groups', else its workload's) — and groups them by groupBy (one of
// CostGroups). Zero from is the start of the current month (UTC), zero to
// now, "" groups by team. A caller who may read every team's workloads
// also gets the reserved groups' and the warm machines' cost.
func (s *Service) Costs(ctx context.Context, from, to time.Time, groupBy string) (Costs, error) {
	now := s.clock()
	if from.IsZero() {
		from = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	if to.IsZero() {
		to = now
	}
	if groupBy == "" {
		groupBy = "team"
	}
	var errs fault.List
	if !slices.Contains(CostGroups, groupBy) {
		errs.Addf("groupBy", "%q: group by one of %v", groupBy, CostGroups)
	}
	if !from.Before(to) {
		errs.Addf("from", "must be before to (%s)", to.Format(time.RFC3339))
	}
	if to.Sub(from) > 400*24*time.Hour {
		errs.Addf("to", "a period of at most 400 days")
	}
	if err := errs.Err(); err != nil {
		return Costs{}, err
	}
	id, _ := identity.From(ctx)
	all, names := s.authz.Teams(id, access.WorkloadsRead)
	var teams []team.Name
	if !all {
		teams = []team.Name{}
		for _, n := range names {
			teams = append(teams, team.Name(n))
		}
	}
	runs, err := s.store.WorkloadRuns(ctx, from, to, teams)
	if err != nil {
		return Costs{}, err
	}
	minutes, err := s.store.GPUMinutes(ctx, from, to)
	if err != nil {
		return Costs{}, err
	}
	energy, err := s.store.GPUEnergy(ctx, from, to)
	if err != nil {
		return Costs{}, err
	}
	c := s.meter.group(ctx, runs, from, to, groupBy, minutes, energy, s.meter.carbonOf(ctx, runs, energy, from, to))
	if all {
		c.Reserved = s.reserved(runs, from, to)
		for _, r := range c.Reserved {
			c.PlatformIdle += r.Idle
		}
		spent, err := s.store.WarmSpend(ctx, from, to)
		if err != nil {
			return Costs{}, err
		}
		c.Warm = []WarmCost{}
		byGroup := map[string]int{}
		for _, w := range spent {
			i, ok := byGroup[w.Group]
			if !ok {
				g, _ := s.groups.Get(w.Group)
				i, byGroup[w.Group] = len(c.Warm), len(c.Warm)
				c.Warm = append(c.Warm, WarmCost{Group: w.Group, Class: g.Class})
			}
			c.Warm[i].Cost += w.Cost
			c.Warm[i].GPUHours += w.GPUHours
			c.PlatformIdle += w.Cost
		}
		for i := range c.Warm {
			c.Warm[i].Cost, c.Warm[i].GPUHours = budget.Round(c.Warm[i].Cost), math.Round(c.Warm[i].GPUHours*1000)/1000
		}
		c.PlatformIdle = budget.Round(c.PlatformIdle)
	}
	return c, nil
}

// roundKWh rounds energy to the watt-hour (and carbon to the gram).
func roundKWh(k float64) float64 { return math.Round(k*1000) / 1000 }

// carbonFigures are, per workload, the grams of CO2e of its facility
// energy and the facility kWh of hours without an intensity, and the
// source's name ("": no source).
type carbonFigures struct {
	grams, unrated map[string]float64
	source         string
	// deferred are, for each workload held for cleaner power, the grams
	// of its hours that both it and the start it would have had at once
	// have figures for: [as it ran, had it started at once].
	deferred map[string][2]float64
}

// DeferralSaving is what holding flexible jobs for cleaner power saved in
// a period: their carbon as they ran and had each started at once (its
// energy hour by hour moved back by how long it was held, at the
// intensities the source gave for those hours), over the hours both have
// figures for.
type DeferralSaving struct {
	Workloads                     int
	KgCO2e, KgCO2eAtOnce, SavedKg float64
	SavedPercent                  float64
}

// saving sums the deferred workloads' figures.
func (cf carbonFigures) saving() DeferralSaving {
	var d DeferralSaving
	for _, g := range cf.deferred {
		d.Workloads++
		d.KgCO2e += g[0] / 1000
		d.KgCO2eAtOnce += g[1] / 1000
	}
	d.SavedKg = d.KgCO2eAtOnce - d.KgCO2e
	if d.KgCO2eAtOnce > 0 {
		d.SavedPercent = math.Round(d.SavedKg/d.KgCO2eAtOnce*1000) / 10
	}
	d.KgCO2e, d.KgCO2eAtOnce, d.SavedKg = roundKWh(d.KgCO2e), roundKWh(d.KgCO2eAtOnce), roundKWh(d.SavedKg)
	return d
}

// carbonOf rates each workload's energy: each hour's GPU kWh times the PUE
// and the grid's intensity at the site of the run that covers the hour
// (its last run's when none does). An hour the source has no figure for —
// or whose location it could not rate (logged once) — is counted unrated,
// never guessed.
func (m *Meter) carbonOf(ctx context.Context, runs []Run, energy map[string]map[time.Time]float64, from, to time.Time) carbonFigures {
	cf := carbonFigures{grams: map[string]float64{}, unrated: map[string]float64{}, deferred: map[string][2]float64{}}
	if m.carbon == nil {
		return cf
	}
	cf.source = m.carbon.Name()
	byWorkload := map[string][]Run{}
	var waited time.Duration // the longest hold: how far back the intensities are read
	for _, r := range runs {
		byWorkload[r.Workload] = append(byWorkload[r.Workload], r)
		waited = max(waited, r.Waited)
	}
	rated := map[string]map[time.Time]float64{} // location → hour → gCO2e/kWh (nil: not rated)
	for w, hours := range energy {
		rs := byWorkload[w]
		if len(rs) == 0 {
			continue
		}
		for h, kwh := range hours {
			cluster := rs[len(rs)-1].Cluster
			for _, r := range rs {
				if r.From.Before(h.Add(time.Hour)) && (r.To.IsZero() || h.Before(r.To)) {
					cluster = r.Cluster
					break
				}
			}
			loc := m.location(cluster)
			in, ok := rated[loc]
			if !ok {
				var err error
				if in, err = m.carbon.Intensity(ctx, loc, from.Add(-waited), to); err != nil {
					slog.WarnContext(ctx, "carbon intensity not read: this site's energy is counted unrated", "location", loc, "source", cf.source, "err", err)
					in = nil
				}
				rated[loc] = in
			}
			g, u := carbon.Grams(map[time.Time]float64{h: kwh * m.pue(cluster)}, in)
			cf.grams[w] += g
			cf.unrated[w] += u
			if held := heldFor(rs, h); held > 0 && u == 0 {
				if once, u := carbon.Shifted(map[time.Time]float64{h: kwh * m.pue(cluster)}, in, held); u == 0 {
					d := cf.deferred[w]
					d[0] += g
					d[1] += once
					cf.deferred[w] = d
				}
			}
		}
	}
	return cf
}

// heldFor is how long the run of rs that covers hour h was held for
// cleaner power (0: none covers it, or it was not held).
func heldFor(rs []Run, h time.Time) time.Duration {
	for _, r := range rs {
		if r.From.Before(h.Add(time.Hour)) && (r.To.IsZero() || h.Before(r.To)) {
			return r.Waited
		}
	}
	return 0
}

// reserved is the reserved node groups' cost in [from, to) up to now,
// against what runs (every team's) on them were charged.
func (s *Service) reserved(runs []Run, from, to time.Time) []ReservedCost {
	now := s.clock().UTC()
	end := earlier(to, now)
	hours := 0.0
	if end.After(from) {
		hours = end.Sub(from).Hours()
	}
	out := []ReservedCost{}
	for _, g := range s.groups.List() {
		if g.Purchase != nodegroup.Reserved {
			continue
		}
		rc := ReservedCost{Group: g.Name, Class: g.Class, Nodes: g.Min,
			Cost: float64(g.Min) * g.PricePerNodeHour * hours, GPUHours: float64(g.Min*g.GPUsPerNode) * hours}
		for _, r := range runs {
			if r.NodeGroup != g.Name {
				continue
			}
			if h, ok := s.meter.clip(r, from, to, now); ok {
				rc.Charged += r.PricePerHour * h
				rc.UsedGPUHours += s.meter.gpuShare(r) * h
			}
		}
		rc.Idle = math.Max(0, rc.Cost-rc.Charged)
		rc.Cost, rc.Charged, rc.Idle = budget.Round(rc.Cost), budget.Round(rc.Charged), budget.Round(rc.Idle)
		rc.GPUHours, rc.UsedGPUHours = math.Round(rc.GPUHours*1000)/1000, math.Round(rc.UsedGPUHours*1000)/1000
		out = append(out, rc)
	}
	return out
}

// clip is the hours of r's run inside [from, to), up to now for a run
// that goes on; false when none.
func (m *Meter) clip(r Run, from, to, now time.Time) (float64, bool) {
	start, end := r.From, r.To
	if end.IsZero() || end.After(now) {
		end = now
	}
	start, end = later(start, from), earlier(end, to)
	return end.Sub(start).Hours(), end.After(start)
}

// Meter prices workloads' runs: the showback's and the budgets' one
// arithmetic.
type Meter struct {
	store     Store
	templates Templates
	now       func() time.Time
	pue       func(cluster string) float64
	carbon    carbon.Source
	location  func(cluster string) string
}

// MeterOptions are what a Meter is made of; Store, Templates and Now are
// required.
type MeterOptions struct {
	// Store holds the runs.
	Store Store
	// Templates say the templates' cost centers.
	Templates Templates
	Now       func() time.Time
	// PUE is the power usage effectiveness of the site of a cluster (""
	// the one Gantry drives); nil: 1 everywhere.
	PUE func(cluster string) float64
	// Carbon rates energy where (Location: a cluster's location, as the
	// source names it) and when it was used; nil: no carbon figures.
	Carbon   carbon.Source
	Location func(cluster string) string
}

// NewMeter meters the runs in the store.
func NewMeter(o MeterOptions) (*Meter, error) {
	if o.Store == nil || o.Templates == nil || o.Now == nil {
		return nil, errors.New("workload: a Meter needs Store, Templates and Now")
	}
	if o.PUE == nil {
		o.PUE = func(string) float64 { return 1 }
	}
	if o.Location == nil {
		o.Location = func(string) string { return "" }
	}
	return &Meter{store: o.Store, templates: o.Templates, now: o.Now, pue: o.PUE, carbon: o.Carbon, location: o.Location}, nil
}

// Spend implements budget.Spender: what team's workloads cost in [from,
// to), in all and by their templates' cost centers.
func (m *Meter) Spend(ctx context.Context, t team.Name, from, to time.Time) (float64, map[string]float64, error) {
	runs, err := m.store.WorkloadRuns(ctx, from, to, []team.Name{t})
	if err != nil {
		return 0, nil, err
	}
	c := m.group(ctx, runs, from, to, "costCenter", nil, nil, carbonFigures{})
	by := map[string]float64{}
	for _, l := range c.Lines {
		by[l.Key] = l.Cost
	}
	return c.Total, by, nil
}

// group meters runs inside [from, to) — up to now for those still running —
// and groups them by groupBy, biggest first. With minutes, each workload's
// cost is split into used, idle and unmeasured by the shares of its running
// minutes in the period that its GPU series measured active and idle.
func (m *Meter) group(ctx context.Context, runs []Run, from, to time.Time, groupBy string, minutes map[string]GPUMinutes, energy map[string]map[time.Time]float64, cf carbonFigures) Costs {
	now := m.now().UTC()
	kwhOf := map[string]float64{}
	for w, hours := range energy {
		for _, k := range hours {
			kwhOf[w] += k
		}
	}
	grams, unrated, source := cf.grams, cf.unrated, cf.source
	clip := func(r Run) (float64, bool) { return m.clip(r, from, to, now) }
	running := map[string]float64{} // workload → hours Running in the period
	if minutes != nil || energy != nil {
		for _, r := range runs {
			if h, ok := clip(r); ok {
				running[r.Workload] += h
			}
		}
	}
	byKey := map[string]*CostLine{}
	seen := map[string]map[string]bool{}
	costCenters := map[string]string{} // template@version → cost center
	out := Costs{From: from, To: to, GroupBy: groupBy}
	for _, r := range runs {
		hours, ok := clip(r)
		if !ok {
			continue
		}
		key := ""
		switch groupBy {
		case "team":
			key = r.Team.String()
		case "user":
			key = r.Owner
		case "template":
			key = r.Template
		case "gpuClass":
			key = r.GPUClass
		case "nodeGroup":
			key = r.NodeGroup
		case "cluster":
			key = r.Cluster
		case "costCenter":
			tv := fmt.Sprintf("%s@%d", r.Template, r.TemplateVersion)
			cc, ok := costCenters[tv]
			if !ok {
				if v, err := m.templates.Get(ctx, r.Template, r.TemplateVersion); err == nil {
					cc = v.Template.Spec.CostCenter
				}
				costCenters[tv] = cc
			}
			key = cc
		}
		l := byKey[key]
		if l == nil {
			l = &CostLine{Key: key}
			byKey[key], seen[key] = l, map[string]bool{}
		}
		cost := r.PricePerHour * hours
		l.Cost += cost
		l.GPUHours += m.gpuShare(r) * hours
		if minutes != nil {
			used, idle := 0.0, 0.0
			if total := running[r.Workload] * 60; total > 0 {
				g := minutes[r.Workload]
				used = math.Min(1, float64(g.Active)/total)
				idle = math.Min(1-used, float64(g.Measured-g.Active)/total)
			}
			l.Used += cost * used
			l.Idle += cost * idle
			l.Unmeasured += cost * (1 - used - idle)
			out.Used += cost * used
			out.Idle += cost * idle
			out.Unmeasured += cost * (1 - used - idle)
		}
		if kwh := kwhOf[r.Workload]; kwh > 0 && running[r.Workload] > 0 {
			// A workload's energy (and carbon) split over its runs by
			// their hours.
			f := hours / running[r.Workload]
			l.KWh += kwh * f
			l.FacilityKWh += kwh * f * m.pue(r.Cluster)
			l.KgCO2e += grams[r.Workload] * f / 1000
			out.KWh += kwh * f
			out.FacilityKWh += kwh * f * m.pue(r.Cluster)
			out.KgCO2e += grams[r.Workload] * f / 1000
			out.UnratedKWh += unrated[r.Workload] * f
		}
		if !seen[key][r.Workload] {
			seen[key][r.Workload] = true
			l.Workloads++
		}
		out.Total += cost
	}
	out.KWh, out.FacilityKWh, out.KgCO2e, out.UnratedKWh, out.CarbonSource = roundKWh(out.KWh), roundKWh(out.FacilityKWh), roundKWh(out.KgCO2e), roundKWh(out.UnratedKWh), source
	out.Deferred = cf.saving()
	for _, l := range byKey {
		l.Cost, l.GPUHours = budget.Round(l.Cost), math.Round(l.GPUHours*1000)/1000
		l.KWh, l.FacilityKWh, l.KgCO2e = roundKWh(l.KWh), roundKWh(l.FacilityKWh), roundKWh(l.KgCO2e)
		l.Used, l.Idle, l.Unmeasured = budget.Round(l.Used), budget.Round(l.Idle), budget.Round(l.Unmeasured)
		out.Lines = append(out.Lines, *l)
	}
	sort.Slice(out.Lines, func(i, j int) bool {
		if out.Lines[i].Cost != out.Lines[j].Cost {
			return out.Lines[i].Cost > out.Lines[j].Cost
		}
		return out.Lines[i].Key < out.Lines[j].Key
	})
	out.Total = budget.Round(out.Total)
	out.Used, out.Idle, out.Unmeasured = budget.Round(out.Used), budget.Round(out.Idle), budget.Round(out.Unmeasured)
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// gpuShare is a run's whole GPUs' worth.
func (m *Meter) gpuShare(r Run) float64 {
	return GPUShare(m.templates.Classes(), r.GPUClass, r.MIGProfile, r.GPUCount)
}

// GPUShare is count GPUs of class in whole GPUs' worth: a MIG slice at its
// share of the GPU (the larger of its compute and memory shares).
func GPUShare(classes *gpu.Catalog, class, migProfile string, count int) float64 {
	return classes.Share(class, migProfile, float64(count))
}

// TeamReport is a team's month: its costs by user, template, GPU class and
// cost center, each split into used, idle and unmeasured, and its monthly
// budget against them with the alerts it sent.
type TeamReport struct {
	Team                                         team.Name
	From, To                                     time.Time
	Total, Used, Idle, Unmeasured                float64
	KWh, FacilityKWh, KgCO2e, UnratedKWh         float64
	CarbonSource                                 string
	Deferred                                     DeferralSaving
	ByUser, ByTemplate, ByGPUClass, ByCostCenter []CostLine
	Budget                                       *budget.Status // nil: no monthly budget
	Alerts                                       []budget.Alert
}

// TeamReport meters team's month holding at (UTC) for a caller who may
// read its workloads (another team's is *fault.NotFound, as if it had none).
func (s *Service) TeamReport(ctx context.Context, t team.Name, at time.Time) (TeamReport, error) {
	if !s.may(ctx, t, access.WorkloadsRead) {
		return TeamReport{}, &fault.NotFound{Kind: "team", Name: t.String(), Denied: "may not read the workloads of team " + t.String()}
	}
	at = at.UTC()
	from := time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	runs, err := s.store.WorkloadRuns(ctx, from, to, []team.Name{t})
	if err != nil {
		return TeamReport{}, err
	}
	minutes, err := s.store.GPUMinutes(ctx, from, to)
	if err != nil {
		return TeamReport{}, err
	}
	energy, err := s.store.GPUEnergy(ctx, from, to)
	if err != nil {
		return TeamReport{}, err
	}
	r := TeamReport{Team: t, From: from, To: to}
	cf := s.meter.carbonOf(ctx, runs, energy, from, to) // once for the four groupings
	for _, g := range []struct {
		by   string
		into *[]CostLine
	}{{"user", &r.ByUser}, {"template", &r.ByTemplate}, {"gpuClass", &r.ByGPUClass}, {"costCenter", &r.ByCostCenter}} {
		c := s.meter.group(ctx, runs, from, to, g.by, minutes, energy, cf)
		*g.into = c.Lines
		r.Total, r.Used, r.Idle, r.Unmeasured = c.Total, c.Used, c.Idle, c.Unmeasured
		r.KWh, r.FacilityKWh, r.KgCO2e, r.UnratedKWh, r.CarbonSource = c.KWh, c.FacilityKWh, c.KgCO2e, c.UnratedKWh, c.CarbonSource
		r.Deferred = c.Deferred
	}
	if r.Budget, r.Alerts, err = s.budgets.Month(ctx, t, r.Total, from, to); err != nil {
		return TeamReport{}, err
	}
	return r, nil
}
