package api

import (
	"context"

	"github.com/gantryhq/gantry/api/gen"
)

func (s *server) ListGPUClasses(ctx context.Context, _ gen.ListGPUClassesRequestObject) (gen.ListGPUClassesResponseObject, error) {
	out := gen.GPUClassList{Items: []gen.GPUClass{}}
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
	return gen.GetGPUClass200JSONResponse(gpuClass(c)), nil
}
