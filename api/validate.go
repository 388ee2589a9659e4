package api

import (
	"context"
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"
)

// validator checks every request that matches a route of the spec against it
// (parameters and body, every failure at once) before any handler runs.
func validator(spec []byte) (echo.MiddlewareFunc, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.yaml is invalid: %w", err)
	}
	doc.Servers = nil // match on paths alone, whatever host serves them
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route openapi.yaml: %w", err)
	}
	opts := &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			route, params, err := router.FindRoute(req)
			if err != nil {
				if err == routers.ErrMethodNotAllowed {
					return echo.ErrMethodNotAllowed
				}
				return next(c) // not in the spec: echo answers 404
			}
			in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
			if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
				return err
			}
			return next(c)
		}
	}, nil
}
