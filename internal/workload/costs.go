package workload

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
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
	PricePerHour    float64
	From, To        time.Time
}

// CostGroups are what costs are grouped by.
var CostGroups = []string{"team", "user", "template", "gpuClass", "costCenter"}

// CostLine is one group's cost over a period.
type CostLine struct {
	Key       string  // the team, user, template, GPU class or cost center ("" when none)
	Cost      float64 // USD
	GPUHours  float64 // whole GPUs' worth (a MIG slice at its share) × hours Running
	Workloads int     // with a run in the period
}

// Costs is showback: what the caller's teams' workloads cost in [From, To),
// grouped, biggest first.
type Costs struct {
	From, To time.Time
	GroupBy  string
	Total    float64
	Lines    []CostLine
}

// Costs meters the runs of the workloads the caller may read in [from, to)
// — each run's Running time inside the period at its workload's price per
// hour — and groups them by groupBy (one of CostGroups).
func (s *Service) Costs(ctx context.Context, from, to time.Time, groupBy string) (Costs, error) {
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
	now := s.clock()
	byKey := map[string]*CostLine{}
	seen := map[string]map[string]bool{}
	costCenters := map[string]string{} // template@version → cost center
	out := Costs{From: from, To: to, GroupBy: groupBy}
	for _, r := range runs {
		start, end := r.From, r.To
		if end.IsZero() || end.After(now) {
			end = now
		}
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		if !end.After(start) {
			continue
		}
		hours := end.Sub(start).Hours()
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
		case "costCenter":
			tv := fmt.Sprintf("%s@%d", r.Template, r.TemplateVersion)
			cc, ok := costCenters[tv]
			if !ok {
				if v, err := s.templates.Get(ctx, r.Template, r.TemplateVersion); err == nil {
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
		l.GPUHours += s.gpuShare(r) * hours
		if !seen[key][r.Workload] {
			seen[key][r.Workload] = true
			l.Workloads++
		}
		out.Total += cost
	}
	for _, l := range byKey {
		l.Cost, l.GPUHours = cents(l.Cost), math.Round(l.GPUHours*1000)/1000
		out.Lines = append(out.Lines, *l)
	}
	sort.Slice(out.Lines, func(i, j int) bool {
		if out.Lines[i].Cost != out.Lines[j].Cost {
			return out.Lines[i].Cost > out.Lines[j].Cost
		}
		return out.Lines[i].Key < out.Lines[j].Key
	})
	out.Total = cents(out.Total)
	return out, nil
}

// gpuShare is a run's whole GPUs' worth: its count, a MIG slice at its
// share of the GPU.
func (s *Service) gpuShare(r Run) float64 {
	n := float64(r.GPUCount)
	if r.MIGProfile == "" {
		return n
	}
	if c, ok := s.templates.Classes().Get(r.GPUClass); ok {
		if p, ok := c.Profile(r.MIGProfile); ok {
			return n * math.Max(p.ComputeShare(), p.MemoryShare())
		}
	}
	return n
}

func cents(v float64) float64 { return math.Round(v*100) / 100 }
