package api

import (
	"context"
	"errors"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/imageverify"
)

func (s *server) images() (*imageverify.Images, error) {
	if s.o.Images == nil {
		return nil, &fault.Unavailable{What: "image catalog", Err: errors.New("not configured on this server")}
	}
	return s.o.Images, nil
}

func (s *server) ListImages(ctx context.Context, _ gen.ListImagesRequestObject) (gen.ListImagesResponseObject, error) {
	im, err := s.images()
	if err != nil {
		return nil, err
	}
	out := model.ImageList{Items: []model.CatalogImage{}}
	for _, e := range im.Catalog.List() {
		c, err := catalogImageOut(e)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, c)
	}
	return gen.ListImages200JSONResponse(out), nil
}

func (s *server) GetImage(ctx context.Context, req gen.GetImageRequestObject) (gen.GetImageResponseObject, error) {
	im, err := s.images()
	if err != nil {
		return nil, err
	}
	e, ok := im.Catalog.Get(req.Name)
	if !ok {
		return nil, &fault.NotFound{Kind: "image", Name: req.Name}
	}
	c, err := catalogImageOut(e)
	if err != nil {
		return nil, err
	}
	return gen.GetImage200JSONResponse(c), nil
}

func (s *server) VerifyImage(ctx context.Context, req gen.VerifyImageRequestObject) (gen.VerifyImageResponseObject, error) {
	im, err := s.images()
	if err != nil {
		return nil, err
	}
	if _, ok := im.Catalog.Get(req.Name); !ok {
		return nil, &fault.NotFound{Kind: "image", Name: req.Name}
	}
	r, err := im.Verify(ctx, req.Name+":"+req.Body.Tag)
	if err != nil {
		return nil, err
	}
	v := model.Verification{Image: r.Image, Reference: r.Reference, Digest: r.Digest, Pinned: r.Pinned, Signer: r.Signer, VerifiedAt: r.VerifiedAt, Cached: r.Cached}
	if len(r.Annotations) > 0 {
		v.Annotations = &r.Annotations
	}
	if len(r.Attestations) > 0 {
		v.Attestations = &r.Attestations
	}
	return gen.VerifyImage200JSONResponse(v), nil
}
