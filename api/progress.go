package api

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/runs"
)

// noRuns answers progress requests on a server built without runs.
var noRuns = &fault.Unavailable{What: "run progress", Err: errors.New("not configured on this server")}

func (s *server) ReportProgress(ctx context.Context, req gen.ReportProgressRequestObject) (gen.ReportProgressResponseObject, error) {
	if s.o.Runs == nil {
		return nil, noRuns
	}
	in := req.Body.Reports
	rs := make([]runs.Report, len(in))
	for i, r := range in {
		rs[i] = runs.Report{Step: r.Step, TotalSteps: deref(r.TotalSteps), Epoch: math.NaN(), ResumedFrom: -1, Metrics: deref(r.Metrics)}
		if r.Time != nil {
			rs[i].Time = *r.Time
		}
		if r.Epoch != nil {
			rs[i].Epoch = *r.Epoch
		}
		if r.ResumedFrom != nil {
			rs[i].ResumedFrom = *r.ResumedFrom
		}
	}
	sum, err := s.o.Runs.Report(ctx, string(req.Id), rs)
	if err != nil {
		return nil, err
	}
	return gen.ReportProgress202JSONResponse(progressOut(sum, nil, true)), nil
}

func (s *server) KeepRun(ctx context.Context, req gen.KeepRunRequestObject) (gen.KeepRunResponseObject, error) {
	if s.o.Runs == nil {
		return nil, noRuns
	}
	sum, err := s.o.Runs.Keep(ctx, string(req.Id))
	if err != nil {
		return nil, err
	}
	return gen.KeepRun200JSONResponse(progressOut(sum, nil, sum.Reports > 0)), nil
}

func (s *server) GetWorkloadProgress(ctx context.Context, req gen.GetWorkloadProgressRequestObject) (gen.GetWorkloadProgressResponseObject, error) {
	if s.o.Runs == nil {
		return nil, noRuns
	}
	limit := 500
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
	}
	var since time.Time
	if req.Params.Since != nil {
		since = *req.Params.Since
	}
	sum, rs, ok, err := s.o.Runs.Progress(ctx, string(req.Id), since, limit)
	if err != nil {
		return nil, err
	}
	return gen.GetWorkloadProgress200JSONResponse(progressOut(sum, rs, ok)), nil
}

// withProgress adds the progress their runs reported to Jobs (already
// visible to the caller): one read for them all. A failed read leaves it
// out, logged; the workloads still answer.
func (s *server) withProgress(ctx context.Context, ws ...*model.Workload) {
	if s.o.Runs == nil {
		return
	}
	var ids []string
	for _, w := range ws {
		if w.Kind == model.WorkloadKindJob {
			ids = append(ids, w.Id)
		}
	}
	if len(ids) == 0 {
		return
	}
	sums, err := s.o.Runs.Summaries(ctx, ids)
	if err != nil {
		s.o.Logger.WarnContext(ctx, "workloads answered without their progress", "err", err)
		return
	}
	for _, w := range ws {
		if sum, ok := sums[w.Id]; ok {
			w.Progress = ptr(progressOut(sum, nil, true))
		}
	}
}

// progressOut is a run's summary (and reports, when asked) as the API says it.
func progressOut(s runs.Summary, rs []runs.Report, reported bool) model.Progress {
	if !reported {
		return model.Progress{Reported: false}
	}
	out := model.Progress{Reported: true, Step: ptr(s.Step), Reports: ptr(s.Reports), Restarts: ptr(s.Restarts),
		FirstReportedAt: ptr(s.FirstAt), ReportedAt: ptr(s.ReportedAt), RunStartedAt: ptr(s.RunFrom), Metrics: ptr(s.Metrics)}
	if s.TotalSteps > 0 {
		out.TotalSteps = ptr(s.TotalSteps)
	}
	if !math.IsNaN(s.Epoch) {
		out.Epoch = ptr(s.Epoch)
	}
	if f, ok := s.Fraction(); ok {
		out.Fraction = ptr(f)
	}
	if s.Rate > 0 {
		out.StepsPerSecond = ptr(s.Rate)
	}
	if left, ok := s.Remaining(); ok {
		out.RemainingSeconds = ptr(math.Round(left.Seconds()))
		out.Eta = ptr(s.ReportedAt.Add(left).UTC().Truncate(time.Second))
	}
	if s.ResumedFrom >= 0 {
		out.ResumedFrom = ptr(s.ResumedFrom)
	}
	if v := s.Verdict; v != nil {
		out.Verdict = &struct {
			Action model.ProgressVerdictAction `json:"action"`
			At     time.Time                   `json:"at"`
			Reason string                      `json:"reason"`
			Rule   model.ProgressVerdictRule   `json:"rule"`
		}{Action: model.ProgressVerdictAction(v.Action), At: v.At, Reason: v.Reason, Rule: model.ProgressVerdictRule(v.Rule)}
	}
	if s.KeptBy != "" {
		out.KeptBy, out.KeptAt = ptr(s.KeptBy), ptr(s.KeptAt)
	}
	if rs != nil {
		series := make([]model.ProgressReport, len(rs))
		for i, r := range rs {
			series[i] = model.ProgressReport{Step: r.Step, Time: ptr(r.Time), Metrics: ptr(r.Metrics)}
			if r.TotalSteps > 0 {
				series[i].TotalSteps = ptr(r.TotalSteps)
			}
			if !math.IsNaN(r.Epoch) {
				series[i].Epoch = ptr(r.Epoch)
			}
			if r.ResumedFrom >= 0 {
				series[i].ResumedFrom = ptr(r.ResumedFrom)
			}
		}
		out.Series = &series
	}
	return out
}
