package advice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// Workloads is what advice asks of the workload service: the caller's view
// of workloads (so advice shows only what the caller may read), and the
// launch and stop of a right-size.
type Workloads interface {
	// Get reads one as the caller may: *fault.NotFound for one they may not.
	Get(ctx context.Context, id string) (workload.Workload, error)
	List(ctx context.Context, f workload.Filter, cursor string) (workload.Page, error)
	Namespace(w workload.Workload) string
	Create(ctx context.Context, owner string, req workload.Request) (workload.Workload, bool, error)
	Stop(ctx context.Context, id string) (workload.Workload, error)
	Delete(ctx context.Context, id string) error
}

// live reports whether a workload holds GPUs now.
func live(w workload.Workload) bool {
	switch w.Status {
	case workload.Running, workload.Scheduled, workload.Pending, workload.Queued:
		return true
	}
	return false
}

// TeamFinding is one finding of a team's workload.
type TeamFinding struct {
	Workload workload.Workload
	Finding  Finding
}

// maxRollup bounds how many workloads a rollup looks at.
const maxRollup = 500

// Team lists the open findings of a team's live workloads that the caller
// may read, the biggest monthly dollars first.
func (s *Service) Team(ctx context.Context, ws Workloads, t team.Name) ([]TeamFinding, error) {
	page, err := ws.List(ctx, workload.Filter{Team: t, Limit: maxRollup}, "")
	if err != nil {
		return nil, err
	}
	var out []TeamFinding
	for _, w := range page.Items {
		if !live(w) || w.GPUClass == "" {
			continue
		}
		r, err := s.Workload(ctx, w, ws.Namespace(w))
		if err != nil {
			return nil, fmt.Errorf("advice on %s: %w", w.ID, err)
		}
		for _, f := range r.Findings {
			if f.Kind == KindTooLittleSamples || f.Kind == KindWellUsed {
				continue // not something to act on
			}
			out = append(out, TeamFinding{Workload: w, Finding: f})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Finding.MonthlyUSD > out[j].Finding.MonthlyUSD })
	return out, nil
}

// TemplateRollup is advice on a template's default choice from its launches.
type TemplateRollup struct {
	Template       string
	Launches       int     // launches looked at (the newest, at most maxRollup)
	Measured       int     // launches with memory samples
	PeakMemP95GiB  float64 // the 95th percentile of the launches' peak memory
	Default        string  // the template's default MIG profile ("" whole GPUs)
	Recommended    string  // the smallest profile holding PeakMemP95GiB × headroom
	MonthlyUSD     float64 // what the measured launches would have saved on it, a month
	FittingShare   float64 // the share of measured launches whose peak it holds
	FindingsByKind map[string]int
}

// Template rolls up a template's launches (those the caller may read):
// their peak memory, the default profile that would hold 95 % of them, and
// the findings of those still running.
func (s *Service) Template(ctx context.Context, ws Workloads, tpl *template.Template) (TemplateRollup, error) {
	r := TemplateRollup{Template: tpl.Metadata.Name, Default: tpl.Spec.GPU.DefaultMIGProfile, FindingsByKind: map[string]int{}}
	page, err := ws.List(ctx, workload.Filter{Template: tpl.Metadata.Name, Limit: maxRollup}, "")
	if err != nil {
		return r, err
	}
	if len(tpl.Spec.GPU.Classes) == 0 {
		return r, nil // CPU-only: no GPU memory to size a profile for
	}
	class, ok := s.classes.Get(tpl.Spec.GPU.DefaultClass)
	if !ok {
		return r, fmt.Errorf("template %s: default GPU class %q is not in the catalog", tpl.Metadata.Name, tpl.Spec.GPU.DefaultClass)
	}
	now := s.now().UTC()
	type launch struct {
		peak  float64
		share float64
		count int
	}
	var ls []launch
	for _, w := range page.Items {
		r.Launches++
		from := w.CreatedAt.UTC().Truncate(time.Minute)
		if now.Sub(from) > Lookback {
			from = now.Add(-Lookback).Truncate(time.Minute)
		}
		to := now.Truncate(time.Minute).Add(time.Minute)
		series, err := s.source.Series(ctx, telemetry.Query{Target: telemetry.Target{ID: w.ID, Namespace: ws.Namespace(w), Name: w.Name},
			From: from, To: to, Step: to.Sub(from), Metrics: []telemetry.Metric{telemetry.FBUsed}})
		if err != nil {
			return r, err
		}
		peak := math.NaN()
		for _, se := range series {
			for _, p := range se.Points {
				if math.IsNaN(peak) || p.Max > peak {
					peak = p.Max
				}
			}
		}
		if !math.IsNaN(peak) {
			share := 1.0
			for _, p := range Profiles(class) {
				if p.Name == w.MIGProfile {
					share = p.Share
				}
			}
			ls = append(ls, launch{peak: peak / 1024, share: share, count: max(1, w.GPUCount)})
		}
		if live(w) {
			rep, err := s.Workload(ctx, w, ws.Namespace(w))
			if err != nil {
				return r, err
			}
			for _, f := range rep.Findings {
				r.FindingsByKind[f.Kind]++
			}
		}
	}
	r.Measured = len(ls)
	if len(ls) == 0 {
		return r, nil
	}
	peaks := make([]float64, len(ls))
	for i, l := range ls {
		peaks[i] = l.peak
	}
	sort.Float64s(peaks)
	r.PeakMemP95GiB = math.Round(telemetry.Quantile(peaks, 0.95)*10) / 10
	var rec Profile
	for _, p := range Profiles(class) {
		if r.PeakMemP95GiB*headroom <= 0.98*p.MemGiB {
			rec = p
			break
		}
	}
	if rec.Name == "" {
		return r, nil // nothing smaller holds them
	}
	r.Recommended = rec.Name
	price := class.Price.OnDemand
	fit := 0
	for _, l := range ls {
		if l.peak*headroom <= 0.98*rec.MemGiB {
			fit++
			if l.share > rec.Share {
				r.MonthlyUSD += (l.share - rec.Share) * float64(l.count) * price * hoursPerMonth
			}
		}
	}
	r.MonthlyUSD = math.Round(r.MonthlyUSD*100) / 100
	r.FittingShare = float64(fit) / float64(len(ls))
	return r, nil
}

// ErrNothingToApply means a workload's advice recommends no other choice.
var ErrNothingToApply = errors.New("no finding recommends another GPU choice")

// Apply relaunches a workload from the same template version, team and
// parameters with the choice a finding recommends (kind: which finding;
// "": the first that recommends one), then stops the old one. If the old
// one may not be stopped by the caller, the new one is deleted again:
// nothing is left half done.
func (s *Service) Apply(ctx context.Context, ws Workloads, caller string, w workload.Workload, kind string) (workload.Workload, Finding, error) {
	if !live(w) {
		return workload.Workload{}, Finding{}, &fault.Conflict{Kind: "workload", Name: w.ID, Reason: fmt.Sprintf("it is %s: only a live workload is right-sized", w.Status)}
	}
	r, err := s.Workload(ctx, w, ws.Namespace(w))
	if err != nil {
		return workload.Workload{}, Finding{}, err
	}
	var f *Finding
	for i := range r.Findings {
		if r.Findings[i].Recommend != nil && (kind == "" || r.Findings[i].Kind == kind) {
			f = &r.Findings[i]
			break
		}
	}
	if f == nil {
		what := "any finding"
		if kind != "" {
			what = "a " + kind + " finding"
		}
		return workload.Workload{}, Finding{}, &fault.Conflict{Kind: "workload", Name: w.ID, Reason: fmt.Sprintf("%s: the advice has no %s with a recommended choice", ErrNothingToApply, what)}
	}
	params := map[string]any{}
	for k, v := range w.Parameters {
		params[k] = v
	}
	profile := f.Recommend.Profile
	if profile == "" {
		profile = template.NoMIG // whole GPUs, not the template's default slice
	}
	// The same key for the same workload and finding: a repeated apply
	// returns the first relaunch instead of a second one.
	nw, _, err := ws.Create(ctx, caller, workload.Request{Template: w.Template, Version: w.TemplateVersion, Team: w.Team,
		IdempotencyKey: "advice-apply:" + w.ID + ":" + f.Kind,
		Choice:         template.Choice{Class: w.GPUClass, MIGProfile: profile, Count: f.Recommend.Count, Params: params, Confidential: w.TEE != ""}})
	if err != nil {
		return workload.Workload{}, *f, err
	}
	// The caller leaving must not leave both running: finish regardless.
	ctx = context.WithoutCancel(ctx)
	if _, err := ws.Stop(ctx, w.ID); err != nil {
		if derr := ws.Delete(ctx, nw.ID); derr != nil {
			return workload.Workload{}, *f, errors.Join(err, fmt.Errorf("and the new workload %s could not be deleted again: %w", nw.ID, derr))
		}
		return workload.Workload{}, *f, err
	}
	return nw, *f, nil
}
