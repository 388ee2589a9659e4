package api

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

func (s *server) ListTemplates(ctx context.Context, _ gen.ListTemplatesRequestObject) (gen.ListTemplatesResponseObject, error) {
	vs, err := s.o.Catalog.List(ctx)
	if err != nil {
		return nil, err
	}
	return gen.ListTemplates200JSONResponse(templateList(vs)), nil
}

func (s *server) CreateTemplate(ctx context.Context, req gen.CreateTemplateRequestObject) (gen.CreateTemplateResponseObject, error) {
	t, err := s.parseTemplate(req.Body)
	if err != nil {
		return nil, err
	}
	v, err := s.o.Catalog.Create(ctx, caller(ctx), t)
	if err != nil {
		return nil, err
	}
	return gen.CreateTemplate201JSONResponse(templateVersion(v)), nil
}

func (s *server) GetTemplate(ctx context.Context, req gen.GetTemplateRequestObject) (gen.GetTemplateResponseObject, error) {
	version := 0
	if req.Params.Version != nil {
		version = *req.Params.Version
	}
	v, err := s.o.Catalog.Get(ctx, req.Name, version)
	if err != nil {
		return nil, err
	}
	return gen.GetTemplate200JSONResponse{Body: templateVersion(v), Headers: gen.GetTemplate200ResponseHeaders{ETag: ptr(etag(int64(v.Version)))}}, nil
}

func (s *server) UpdateTemplate(ctx context.Context, req gen.UpdateTemplateRequestObject) (gen.UpdateTemplateResponseObject, error) {
	t, err := s.parseTemplate(req.Body)
	if err != nil {
		return nil, err
	}
	expect, err := templateIfMatch(req.Params.IfMatch)
	if err != nil {
		return nil, err
	}
	v, _, err := s.o.Catalog.Update(ctx, caller(ctx), req.Name, t, expect)
	if err != nil {
		return nil, err
	}
	return gen.UpdateTemplate200JSONResponse(templateVersion(v)), nil
}

func (s *server) DeleteTemplate(ctx context.Context, req gen.DeleteTemplateRequestObject) (gen.DeleteTemplateResponseObject, error) {
	expect, err := templateIfMatch(req.Params.IfMatch)
	if err != nil {
		return nil, err
	}
	if err := s.o.Catalog.Delete(ctx, caller(ctx), req.Name, expect); err != nil {
		return nil, err
	}
	return gen.DeleteTemplate204Response{}, nil
}

// templateIfMatch is the version an If-Match names: nil without one, or
// with "*" (whatever is live).
func templateIfMatch(h *model.TemplateIfMatch) (*int, error) {
	if h == nil || strings.TrimSpace(*h) == "*" {
		return nil, nil
	}
	v, ok := parseETag(*h)
	if !ok || v > math.MaxInt32 {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "header.If-Match", Message: fmt.Sprintf("%q is not a template version (such as \"v3\")", *h)}}}
	}
	n := int(v)
	return &n, nil
}

func (s *server) ListTemplateVersions(ctx context.Context, req gen.ListTemplateVersionsRequestObject) (gen.ListTemplateVersionsResponseObject, error) {
	vs, err := s.o.Catalog.History(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return gen.ListTemplateVersions200JSONResponse(templateList(vs)), nil
}

func (s *server) SetTemplateVersionStatus(ctx context.Context, req gen.SetTemplateVersionStatusRequestObject) (gen.SetTemplateVersionStatusResponseObject, error) {
	v, err := s.o.Catalog.SetStatus(ctx, req.Name, req.Version, catalog.Status(req.Body.Status), deref(req.Body.Reason))
	if err != nil {
		return nil, err
	}
	return gen.SetTemplateVersionStatus200JSONResponse(templateVersion(v)), nil
}

func (s *server) RenderTemplate(ctx context.Context, req gen.RenderTemplateRequestObject) (gen.RenderTemplateResponseObject, error) {
	b := req.Body
	t, err := team.Parse(b.Team)
	if err != nil {
		return nil, err
	}
	r := workload.Request{Template: req.Name, Version: deref(b.TemplateVersion), Team: t, Choice: choice(b.Gpu, b.Parameters, b.Confidential, b.CpuOnly)}
	if b.Source != nil {
		// A draft, as the editor holds it: parsed as a file would be, so
		// its problems name their line — for those who may write one.
		if err := s.o.Workloads.MayPreviewDraft(ctx); err != nil {
			return nil, err
		}
		files, err := template.ParseSources([]template.Source{{Path: req.Name + ".yaml", Data: []byte(*b.Source)}}, s.o.Catalog.Parse)
		if err != nil {
			return nil, err
		}
		if len(files) != 1 {
			return nil, &fault.Invalid{Fields: []fault.Field{{Path: "source", Message: "must hold one template"}}}
		}
		r.Draft = files[0].Template
	}
	rd, err := s.o.Workloads.Preview(ctx, caller(ctx), r)
	if err != nil {
		return nil, err
	}
	out := model.RenderResult{Template: rd.Version.Name, TemplateVersion: rd.Version.Version, Hash: rd.Hash, Objects: []map[string]any{}}
	for _, o := range rd.Objects {
		var m map[string]any
		if err := remarshal(o, &m); err != nil {
			return nil, err
		}
		delete(m, "status")
		out.Objects = append(out.Objects, m)
	}
	return gen.RenderTemplate200JSONResponse(out), nil
}

func (s *server) ApplyTemplates(ctx context.Context, req gen.ApplyTemplatesRequestObject) (gen.ApplyTemplatesResponseObject, error) {
	var sources []template.Source
	for _, f := range req.Body.Files {
		sources = append(sources, template.Source{Path: f.Path, Data: []byte(f.Content)})
	}
	files, err := template.ParseSources(sources, s.o.Catalog.Parse)
	if err != nil {
		return nil, err
	}
	plan, err := s.o.Catalog.Plan(ctx, caller(ctx), files, catalog.PlanOptions{Prune: deref(req.Body.Prune), Expect: deref(req.Body.Expect)})
	if err != nil {
		return nil, err
	}
	out := model.TemplateSetPlan{}
	for _, st := range plan.Steps {
		step := struct {
			Action model.TemplateSetPlanStepsAction `json:"action"`
			Diff   *string                          `json:"diff,omitempty"`
			Name   string                           `json:"name"`
			Source *string                          `json:"source,omitempty"`
		}{Action: model.TemplateSetPlanStepsAction(st.Action), Name: st.Name, Diff: omitEmpty(st.Diff), Source: omitEmpty(st.Source)}
		out.Steps = append(out.Steps, step)
	}
	if deref(req.Body.DryRun) || !plan.Changed() {
		return gen.ApplyTemplates200JSONResponse(out), nil
	}
	vs, err := s.o.Catalog.Apply(ctx, plan)
	if err != nil {
		return nil, err
	}
	out.Applied = true
	made := []struct {
		Name    string `json:"name"`
		Version int    `json:"version"`
	}{}
	for _, v := range vs {
		made = append(made, struct {
			Name    string `json:"name"`
			Version int    `json:"version"`
		}{v.Name, v.Version})
	}
	out.Versions = &made
	return gen.ApplyTemplates200JSONResponse(out), nil
}
