package api

import (
	"context"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/advice"
	"github.com/gantryhq/gantry/internal/team"
)

func (s *server) GetWorkloadAdvice(ctx context.Context, req gen.GetWorkloadAdviceRequestObject) (gen.GetWorkloadAdviceResponseObject, error) {
	if s.o.Advice == nil || s.o.Workloads == nil {
		return nil, noTelemetry
	}
	w, r, err := s.o.Advice.ForWorkload(ctx, req.Id) // the caller may read it, or 404
	if err != nil {
		return nil, err
	}
	out := model.AdviceReport{Workload: r.Workload, From: r.From, To: r.To, Step: r.Step.String(), Findings: make([]model.Finding, len(r.Findings))}
	for i, f := range r.Findings {
		out.Findings[i] = findingOut(w.ID, f)
	}
	return gen.GetWorkloadAdvice200JSONResponse(out), nil
}

func findingOut(workloadID string, f advice.Finding) model.Finding {
	g := model.Finding{Kind: model.FindingKind(f.Kind), Severity: model.FindingSeverity(f.Severity), Platform: f.Platform, Reason: f.Reason,
		Confidence: f.Confidence, Action: f.Action, MonthlyUSD: f.MonthlyUSD, SeriesURL: advice.SeriesURL(workloadID, f)}
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
	return g
}

func (s *server) ApplyWorkloadAdvice(ctx context.Context, req gen.ApplyWorkloadAdviceRequestObject) (gen.ApplyWorkloadAdviceResponseObject, error) {
	if s.o.Advice == nil || s.o.Workloads == nil {
		return nil, noTelemetry
	}
	w, err := s.o.Workloads.Manageable(ctx, req.Id) // the caller may stop it, or 403/404
	if err != nil {
		return nil, err
	}
	kind := ""
	if req.Body != nil {
		kind = deref(req.Body.Kind)
	}
	nw, f, err := s.o.Advice.Apply(ctx, s.o.Workloads, caller(ctx), w, kind)
	if err != nil {
		return nil, err
	}
	return gen.ApplyWorkloadAdvice201JSONResponse{Workload: s.workloadOut(nw), Applied: findingOut(w.ID, f)}, nil
}

func (s *server) ListAdvice(ctx context.Context, req gen.ListAdviceRequestObject) (gen.ListAdviceResponseObject, error) {
	if s.o.Advice == nil || s.o.Workloads == nil {
		return nil, noTelemetry
	}
	var t team.Name
	if req.Params.Team != nil {
		var err error
		if t, err = team.Parse(*req.Params.Team); err != nil {
			return nil, err
		}
	}
	fs, err := s.o.Advice.Team(ctx, s.o.Workloads, t)
	if err != nil {
		return nil, err
	}
	out := model.TeamAdvice{Items: make([]struct {
		Finding  model.Finding `json:"finding"`
		Name     string        `json:"name"`
		Owner    string        `json:"owner"`
		Team     string        `json:"team"`
		Workload string        `json:"workload"`
	}, len(fs))}
	for i, tf := range fs {
		it := &out.Items[i]
		it.Finding, it.Name, it.Owner, it.Team, it.Workload = findingOut(tf.Workload.ID, tf.Finding), tf.Workload.Name, tf.Workload.Owner, tf.Workload.Team.String(), tf.Workload.ID
	}
	return gen.ListAdvice200JSONResponse(out), nil
}

func (s *server) GetTemplateAdvice(ctx context.Context, req gen.GetTemplateAdviceRequestObject) (gen.GetTemplateAdviceResponseObject, error) {
	if s.o.Advice == nil || s.o.Workloads == nil {
		return nil, noTelemetry
	}
	v, err := s.o.Catalog.Get(ctx, req.Name, 0)
	if err != nil {
		return nil, err
	}
	r, err := s.o.Advice.Template(ctx, s.o.Workloads, v.Template)
	if err != nil {
		return nil, err
	}
	out := model.TemplateAdvice{Template: r.Template, Launches: r.Launches, Measured: r.Measured, FindingsByKind: r.FindingsByKind}
	if r.Measured > 0 {
		out.PeakMemoryP95GiB, out.FittingShare = ptr(r.PeakMemP95GiB), ptr(r.FittingShare)
	}
	out.Default, out.Recommended, out.MonthlyUSD = ptr(r.Default), ptr(r.Recommended), ptr(r.MonthlyUSD)
	return gen.GetTemplateAdvice200JSONResponse(out), nil
}
