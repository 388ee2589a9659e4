package api

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
)

func (s *server) GetCapacityForecast(ctx context.Context, req gen.GetCapacityForecastRequestObject) (gen.GetCapacityForecastResponseObject, error) {
	horizon, step := 120, 10
	if req.Params.HorizonMinutes != nil {
		horizon = *req.Params.HorizonMinutes
	}
	if req.Params.StepMinutes != nil {
		step = *req.Params.StepMinutes
	}
	f, err := s.o.Capacity.Forecast(ctx, req.Params.Class, time.Duration(horizon)*time.Minute, time.Duration(step)*time.Minute)
	if err != nil {
		return nil, err
	}
	out := model.CapacityForecast{Class: f.Class, Origin: f.Origin, StepMinutes: int(f.Step.Minutes()), Now: f.Now, Launches: f.Launches, Points: []model.ForecastPoint{}}
	for _, p := range f.Points {
		out.Points = append(out.Points, model.ForecastPoint{T: p.T, Gpus: p.GPUs, Lo: p.Lo, Hi: p.Hi, DayAgo: p.DayAgo, WeekAgo: p.WeekAgo})
	}
	return gen.GetCapacityForecast200JSONResponse(out), nil
}

func (s *server) GetReservedAdvice(ctx context.Context, req gen.GetReservedAdviceRequestObject) (gen.GetReservedAdviceResponseObject, error) {
	share := 0.9
	if req.Params.Share != nil {
		share = *req.Params.Share
	}
	r, err := s.o.Capacity.Reserved(ctx, req.Params.Class, share)
	if err != nil {
		return nil, err
	}
	return gen.GetReservedAdvice200JSONResponse(model.ReservedAdvice{Class: r.Class, From: r.From, To: r.To, Share: r.Share, Unit: r.Unit, Level: r.Level,
		ReservedNow: r.ReservedNow, Priced: r.Priced, OnDemandPrice: r.OnDemandPrice, ReservedPrice: r.ReservedPrice,
		SavingsPerMonth: r.SavingsPerMonth, Best: r.Best, BestSavingsPerMonth: r.BestSavingsPerMonth}), nil
}
