package api

import (
	"context"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
)

func (s *server) ListGPUClasses(ctx context.Context, _ gen.ListGPUClassesRequestObject) (gen.ListGPUClassesResponseObject, error) {
	out := model.GPUClassList{Items: []model.GPUClass{}}
	for _, c := range s.o.Catalog.Classes().List() {
		out.Items = append(out.Items, gpuClass(c))
	}
	return gen.ListGPUClasses200JSONResponse(out), nil
}

func (s *server) GetGPUClass(ctx context.Context, req gen.GetGPUClassRequestObject) (gen.GetGPUClassResponseObject, error) {
	c, ok := s.o.Catalog.Classes().Get(req.Name)
	if !ok {
		return nil, notFound("GPU class", req.Name)
	}
	out := gpuClass(c)
	hist, err := s.o.Prices(ctx, c.Name)
	if err != nil {
		return nil, err
	}
	h := []model.PricePoint{}
	for _, p := range hist {
		h = append(h, model.PricePoint{Since: p.Since, Price: priceOut(p.Price)})
	}
	out.PriceHistory = &h
	return gen.GetGPUClass200JSONResponse(out), nil
}
