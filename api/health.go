package api

import (
	"context"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/ownmetrics"
)

// Pinger checks a dependency for /readyz.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Check is one dependency /readyz asks.
type Check struct {
	Name   string
	Pinger Pinger
}

func (s *server) GetHealth(ctx context.Context, _ gen.GetHealthRequestObject) (gen.GetHealthResponseObject, error) {
	return gen.GetHealth200JSONResponse{Status: model.HealthStatusOk}, nil
}

func (s *server) GetReady(ctx context.Context, _ gen.GetReadyRequestObject) (gen.GetReadyResponseObject, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r := model.Readiness{Status: model.Ready, Checks: []struct {
		Detail *string `json:"detail,omitempty"`
		Name   string  `json:"name"`
		Ok     bool    `json:"ok"`
	}{}}
	for _, c := range s.o.Checks {
		ok, detail := true, (*string)(nil)
		if err := c.Pinger.Ping(ctx); err != nil {
			ok, detail = false, ptr(c.Name+" does not answer")
			r.Status = model.NotReady
			s.o.Logger.WarnContext(ctx, "readiness check failed", "check", c.Name, "err", err)
		}
		r.Checks = append(r.Checks, struct {
			Detail *string `json:"detail,omitempty"`
			Name   string  `json:"name"`
			Ok     bool    `json:"ok"`
		}{Detail: detail, Name: c.Name, Ok: ok})
	}
	if r.Status == model.NotReady {
		return gen.GetReady503JSONResponse(r), nil
	}
	return gen.GetReady200JSONResponse(r), nil
}

func (s *server) GetOpenAPI(ctx context.Context, _ gen.GetOpenAPIRequestObject) (gen.GetOpenAPIResponseObject, error) {
	return gen.GetOpenAPI200ApplicationyamlResponse{Body: bytesReader(s.o.Spec), ContentLength: int64(len(s.o.Spec))}, nil
}

func (s *server) GetGantryMetrics(ctx context.Context, _ gen.GetGantryMetricsRequestObject) (gen.GetGantryMetricsResponseObject, error) {
	text, err := s.o.Own.Text()
	if err != nil {
		return nil, err
	}
	return gen.GetGantryMetrics200TextResponse(text), nil
}

// measure counts every request by its route template (not its path: ids
// would make a series each), method and status, and times it.
func measure(m *ownmetrics.Metrics) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now() //clock:allow measures a duration
			if err := next(c); err != nil {
				c.Error(err) // the one error handler writes the answer: its code is the one counted
			}
			m.Request(c.Path(), c.Request().Method, c.Response().Status, time.Since(start))
			return nil
		}
	}
}
