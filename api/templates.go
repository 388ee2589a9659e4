package api

import (
	"context"

	"github.com/gantryhq/gantry/internal/workload"
)

func (s *server) ListTemplates(ctx context.Context, _ ListTemplatesRequestObject) (ListTemplatesResponseObject, error) {
	vs, err := s.o.Catalog.List(ctx)
	if err != nil {
		return nil, err
	}
	return ListTemplates200JSONResponse(templateList(vs)), nil
}

func (s *server) CreateTemplate(ctx context.Context, req CreateTemplateRequestObject) (CreateTemplateResponseObject, error) {
	t, err := s.parseTemplate(req.Body)
	if err != nil {
		return nil, err
	}
	v, err := s.o.Catalog.Create(ctx, caller(ctx), t)
	if err != nil {
		return nil, err
	}
	return CreateTemplate201JSONResponse(templateVersion(v)), nil
}

func (s *server) GetTemplate(ctx context.Context, req GetTemplateRequestObject) (GetTemplateResponseObject, error) {
	version := 0
	if req.Params.Version != nil {
		version = *req.Params.Version
	}
	v, err := s.o.Catalog.Get(ctx, req.Name, version)
	if err != nil {
		return nil, err
	}
	return GetTemplate200JSONResponse(templateVersion(v)), nil
}

func (s *server) UpdateTemplate(ctx context.Context, req UpdateTemplateRequestObject) (UpdateTemplateResponseObject, error) {
	t, err := s.parseTemplate(req.Body)
	if err != nil {
		return nil, err
	}
	v, _, err := s.o.Catalog.Update(ctx, caller(ctx), req.Name, t)
	if err != nil {
		return nil, err
	}
	return UpdateTemplate200JSONResponse(templateVersion(v)), nil
}

func (s *server) DeleteTemplate(ctx context.Context, req DeleteTemplateRequestObject) (DeleteTemplateResponseObject, error) {
	if err := s.o.Catalog.Delete(ctx, caller(ctx), req.Name); err != nil {
		return nil, err
	}
	return DeleteTemplate204Response{}, nil
}

func (s *server) ListTemplateVersions(ctx context.Context, req ListTemplateVersionsRequestObject) (ListTemplateVersionsResponseObject, error) {
	vs, err := s.o.Catalog.History(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return ListTemplateVersions200JSONResponse(templateList(vs)), nil
}

func (s *server) RenderTemplate(ctx context.Context, req RenderTemplateRequestObject) (RenderTemplateResponseObject, error) {
	b := req.Body
	rd, err := s.o.Workloads.Preview(ctx, caller(ctx), workload.Request{
		Template: req.Name, Version: deref(b.TemplateVersion), Team: b.Team, Choice: choice(b.Gpu, b.Parameters, b.Confidential),
	})
	if err != nil {
		return nil, err
	}
	out := RenderResult{Template: rd.Version.Name, TemplateVersion: rd.Version.Version, Hash: rd.Hash, Objects: []map[string]any{}}
	for _, o := range rd.Objects {
		var m map[string]any
		if err := remarshal(o, &m); err != nil {
			return nil, err
		}
		delete(m, "status")
		out.Objects = append(out.Objects, m)
	}
	return RenderTemplate200JSONResponse(out), nil
}
