package api

import (
	"context"
)

func (s *server) ListGPUClasses(ctx context.Context, _ ListGPUClassesRequestObject) (ListGPUClassesResponseObject, error) {
	out := GPUClassList{Items: []GPUClass{}}
	for _, c := range s.o.Catalog.Classes().List() {
		out.Items = append(out.Items, gpuClass(c))
	}
	return ListGPUClasses200JSONResponse(out), nil
}

func (s *server) GetGPUClass(ctx context.Context, req GetGPUClassRequestObject) (GetGPUClassResponseObject, error) {
	c, ok := s.o.Catalog.Classes().Get(req.Name)
	if !ok {
		return nil, notFound("GPU class", req.Name)
	}
	return GetGPUClass200JSONResponse(gpuClass(c)), nil
}
