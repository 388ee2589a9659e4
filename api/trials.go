package api

import (
	"context"
	"errors"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/trial"
)

// noTrials answers trial requests on a server built without trials.
var noTrials = &fault.Unavailable{What: "trials", Err: errors.New("not configured on this server")}

func (s *server) CreateTrial(ctx context.Context, req gen.CreateTrialRequestObject) (gen.CreateTrialResponseObject, error) {
	if s.o.Trials == nil {
		return nil, noTrials
	}
	b := req.Body
	t, err := team.Parse(b.Team)
	if err != nil {
		return nil, err
	}
	var errs fault.List
	duration := func(path string, p *string) time.Duration {
		if p == nil {
			return 0
		}
		d, err := time.ParseDuration(*p)
		if err != nil || d <= 0 {
			errs.Addf(path, "%q: want a duration such as 30m or 8h", *p)
		}
		return d
	}
	sp := trial.Spec{Template: b.Template, Classes: b.Classes, GPUs: deref(b.Gpus), MIGProfiles: deref(b.MigProfiles), Steps: b.Steps, MaxCost: deref(b.MaxCost),
		FullSteps: deref(b.FullSteps), MaxRuntime: duration("maxRuntime", b.MaxRuntime), Deadline: duration("deadline", b.Deadline)}
	if b.Parameters != nil {
		sp.Params = *b.Parameters
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	tr, replayed, err := s.o.Trials.Create(ctx, caller(ctx), t, sp, deref(req.Params.IdempotencyKey))
	if err != nil {
		return nil, err
	}
	if replayed {
		return gen.CreateTrial200JSONResponse(trialOut(tr, nil)), nil
	}
	return gen.CreateTrial201JSONResponse(trialOut(tr, nil)), nil
}

func (s *server) GetTrial(ctx context.Context, req gen.GetTrialRequestObject) (gen.GetTrialResponseObject, error) {
	if s.o.Trials == nil {
		return nil, noTrials
	}
	tr, res, err := s.o.Trials.Get(ctx, string(req.Id))
	if err != nil {
		return nil, err
	}
	return gen.GetTrial200JSONResponse(trialOut(tr, &res)), nil
}

func (s *server) ListTrials(ctx context.Context, req gen.ListTrialsRequestObject) (gen.ListTrialsResponseObject, error) {
	if s.o.Trials == nil {
		return nil, noTrials
	}
	limit := 50
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
	}
	ts, err := s.o.Trials.List(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := model.TrialList{Items: make([]model.Trial, 0, len(ts))}
	for _, tr := range ts {
		out.Items = append(out.Items, trialOut(tr, nil))
	}
	return gen.ListTrials200JSONResponse(out), nil
}

// trialOut is a trial as the API says it, with its measurements when
// they were made (nil: its runs as launched).
func trialOut(tr trial.Trial, res *trial.Results) model.Trial {
	sp := tr.Spec
	out := model.Trial{Id: tr.ID, Team: tr.Team.String(), Owner: tr.Owner, Template: sp.Template, Classes: sp.Classes, Gpus: sp.GPUs,
		Steps: sp.Steps, MaxRuntime: sp.MaxRuntime.String(), CreatedAt: tr.CreatedAt, Runs: make([]model.TrialRun, 0, len(tr.Runs))}
	if len(sp.Params) > 0 {
		out.Parameters = ptr(model.Parameters(sp.Params))
	}
	if len(sp.MIGProfiles) > 0 {
		out.MigProfiles = ptr(sp.MIGProfiles)
	}
	if sp.MaxCost > 0 {
		out.MaxCost = ptr(sp.MaxCost)
	}
	if sp.FullSteps > 0 {
		out.FullSteps = ptr(sp.FullSteps)
	}
	if sp.Deadline > 0 {
		out.Deadline = ptr(sp.Deadline.String())
	}
	if res == nil {
		for _, r := range tr.Runs {
			out.Runs = append(out.Runs, model.TrialRun{Class: r.Class, Gpus: r.GPUs, MigProfile: omitEmpty(r.MIGProfile), Workload: omitEmpty(r.Workload), Error: omitEmpty(r.Error)})
		}
		return out
	}
	out.Done, out.Why = ptr(res.Done), omitEmpty(res.Why)
	if res.Best >= 0 {
		out.Best = ptr(res.Best)
	}
	for _, m := range res.Runs {
		r := model.TrialRun{Class: m.Class, Gpus: m.GPUs, MigProfile: omitEmpty(m.MIGProfile), Workload: omitEmpty(m.Workload), Error: omitEmpty(m.Error)}
		if m.Workload != "" {
			r.Status, r.Reason = ptr(model.WorkloadStatus(m.Status)), omitEmpty(m.Reason)
			r.PricePerHour, r.CostSoFar, r.Reports = ptr(m.PricePerHour), ptr(m.CostSoFar), ptr(m.Reports)
		}
		if m.Reports > 0 {
			r.LastStep, r.Intervals = ptr(m.LastStep), ptr(m.Intervals)
		}
		if m.StepSeconds > 0 {
			r.StepSeconds, r.StepSecondsP10, r.StepSecondsP90 = ptr(m.StepSeconds), ptr(m.StepSecondsP10), ptr(m.StepSecondsP90)
		}
		if m.Throughput > 0 {
			r.Throughput, r.ThroughputMetric = ptr(m.Throughput), ptr(model.TrialRunThroughputMetric(m.ThroughputMetric))
		}
		if m.Scaling > 0 {
			r.Scaling = ptr(m.Scaling)
		}
		if m.FullSteps > 0 {
			r.FullSteps = ptr(m.FullSteps)
		}
		if m.FullTime > 0 {
			r.FullSeconds, r.FullCost = ptr(m.FullTime.Seconds()), ptr(m.FullCost)
		}
		r.MeetsDeadline = m.MeetsDeadline
		out.Runs = append(out.Runs, r)
	}
	return out
}
