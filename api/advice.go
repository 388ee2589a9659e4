package api

import (
	"context"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/internal/advice"
)

func (s *server) GetWorkloadAdvice(ctx context.Context, req gen.GetWorkloadAdviceRequestObject) (gen.GetWorkloadAdviceResponseObject, error) {
	if s.o.Advice == nil || s.o.Workloads == nil {
		return nil, noTelemetry
	}
	w, err := s.o.Workloads.Get(ctx, req.Id) // the caller may read it, or 404
	if err != nil {
		return nil, err
	}
	r, err := s.o.Advice.Workload(ctx, w, s.o.Workloads.Namespace(w))
	if err != nil {
		return nil, err
	}
	out := gen.AdviceReport{Workload: r.Workload, From: r.From, To: r.To, Step: r.Step.String(), Findings: make([]gen.Finding, len(r.Findings))}
	for i, f := range r.Findings {
		g := gen.Finding{Kind: gen.FindingKind(f.Kind), Severity: gen.FindingSeverity(f.Severity), Platform: f.Platform, Reason: f.Reason,
			Confidence: f.Confidence, Action: f.Action, MonthlyUSD: f.MonthlyUSD, SeriesURL: advice.SeriesURL(w.ID, f)}
		g.Evidence = make([]struct {
			Metric string  `json:"metric"`
			Stat   string  `json:"stat"`
			Value  float64 `json:"value"`
		}, len(f.Evidence))
		for j, e := range f.Evidence {
			g.Evidence[j].Metric, g.Evidence[j].Stat, g.Evidence[j].Value = e.Metric, e.Stat, e.Value
		}
		if f.Recommend != nil {
			g.Recommend = &struct {
				Count   int     `json:"count"`
				Profile *string `json:"profile,omitempty"`
			}{Count: f.Recommend.Count, Profile: ptr(f.Recommend.Profile)}
		}
		out.Findings[i] = g
	}
	return gen.GetWorkloadAdvice200JSONResponse(out), nil
}
