package api

import (
	"bytes"
	"context"
	"encoding/csv"
	"math"
	"strconv"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/workload"
)

func (s *server) GetCosts(ctx context.Context, req gen.GetCostsRequestObject) (gen.GetCostsResponseObject, error) {
	var errs fault.List
	from := momentParam(&errs, "from", req.Params.From, time.Time{}) // zero: the service's default
	to := momentParam(&errs, "to", req.Params.To, time.Time{})
	if err := errs.Err(); err != nil {
		return nil, err
	}
	var groupBy string
	if req.Params.GroupBy != nil {
		groupBy = string(*req.Params.GroupBy)
	}
	c, err := s.o.Workloads.Costs(ctx, from, to, groupBy)
	if err != nil {
		return nil, err
	}
	if req.Params.Format != nil && *req.Params.Format == model.Csv {
		var b bytes.Buffer
		w := csv.NewWriter(&b)
		head := []string{c.GroupBy, "cost_usd", "used_usd", "idle_usd", "unmeasured_usd", "gpu_hours", "workloads", "kwh", "facility_kwh"}
		if c.CarbonSource != "" {
			head = append(head, "kg_co2e")
		}
		w.Write(head)
		usd := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
		for _, l := range c.Lines {
			row := []string{l.Key, usd(l.Cost), usd(l.Used), usd(l.Idle), usd(l.Unmeasured), strconv.FormatFloat(l.GPUHours, 'f', 3, 64), strconv.Itoa(l.Workloads),
				strconv.FormatFloat(l.KWh, 'f', 3, 64), strconv.FormatFloat(l.FacilityKWh, 'f', 3, 64)}
			if c.CarbonSource != "" {
				row = append(row, strconv.FormatFloat(l.KgCO2e, 'f', 3, 64))
			}
			w.Write(row)
		}
		w.Flush()
		return gen.GetCosts200TextcsvResponse{Body: &b, ContentLength: int64(b.Len())}, nil
	}
	out := model.CostReport{From: c.From, To: c.To, GroupBy: c.GroupBy, Currency: model.CostReportCurrencyUSD, Total: c.Total,
		Used: c.Used, Idle: c.Idle, Unmeasured: c.Unmeasured, KWh: c.KWh, FacilityKWh: c.FacilityKWh, Items: costLines(c.Lines, c.CarbonSource != "")}
	if c.CarbonSource != "" {
		out.KgCO2e, out.UnratedKWh, out.CarbonSource = &c.KgCO2e, &c.UnratedKWh, &c.CarbonSource
	}
	out.Deferred = savingOut(c.Deferred)
	if c.GroupBy == "user" {
		s.userNames(ctx, out.Items)
	}
	if c.Reserved != nil {
		rs := make([]model.ReservedCost, 0, len(c.Reserved))
		for _, r := range c.Reserved {
			rs = append(rs, model.ReservedCost{NodeGroup: r.Group, GpuClass: r.Class, Nodes: r.Nodes, Cost: r.Cost, Charged: r.Charged,
				Idle: r.Idle, GpuHours: r.GPUHours, UsedGpuHours: r.UsedGPUHours})
		}
		ws := make([]model.WarmCost, 0, len(c.Warm))
		for _, w := range c.Warm {
			ws = append(ws, model.WarmCost{NodeGroup: w.Group, GpuClass: w.Class, Cost: w.Cost, GpuHours: w.GPUHours})
		}
		out.Reserved, out.Warm, out.PlatformIdle = &rs, &ws, &c.PlatformIdle
	}
	return gen.GetCosts200JSONResponse(out), nil
}

// namedLines is userNames returning its lines.
func (s *server) namedLines(ctx context.Context, lines []model.CostLine) []model.CostLine {
	s.userNames(ctx, lines)
	return lines
}

// userNames names the users of cost lines grouped by user.
func (s *server) userNames(ctx context.Context, lines []model.CostLine) {
	keys := make([]string, len(lines))
	for i, l := range lines {
		keys[i] = l.Key
	}
	m := s.names(ctx, keys...)
	for i := range lines {
		lines[i].Name = omitEmpty(m[lines[i].Key])
	}
}

// costLines converts lines, with their carbon when rated (a carbon source
// answered).
func costLines(lines []workload.CostLine, rated bool) []model.CostLine {
	out := []model.CostLine{}
	for _, l := range lines {
		line := model.CostLine{Key: l.Key, Cost: l.Cost, GpuHours: l.GPUHours, Workloads: l.Workloads, Used: l.Used, Idle: l.Idle, Unmeasured: l.Unmeasured,
			KWh: l.KWh, FacilityKWh: l.FacilityKWh}
		if rated {
			line.KgCO2e = &l.KgCO2e
		}
		out = append(out, line)
	}
	return out
}

// savingOut is what deferral saved, nil when no deferred workload was rated.
func savingOut(d workload.DeferralSaving) *model.DeferralSaving {
	if d.Workloads == 0 {
		return nil
	}
	return &model.DeferralSaving{Workloads: d.Workloads, KgCO2e: d.KgCO2e, KgCO2eAtOnce: d.KgCO2eAtOnce, SavedKg: d.SavedKg, SavedPercent: d.SavedPercent}
}

func (s *server) GetCarbonForecast(ctx context.Context, req gen.GetCarbonForecastRequestObject) (gen.GetCarbonForecastResponseObject, error) {
	var errs fault.List
	within := durationParam(&errs, "within", req.Params.Within, 24*time.Hour)
	runtime := durationParam(&errs, "runtime", req.Params.Runtime, time.Hour)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	f, err := s.o.Workloads.CarbonForecast(ctx, within, runtime)
	if err != nil {
		return nil, err
	}
	out := gen.GetCarbonForecast200JSONResponse{Source: f.Source, Location: f.Location, From: f.From, Hours: []model.ForecastHour{},
		Best: model.CarbonPlan{Start: f.Best.Start, End: f.Best.End, Latest: f.Best.Latest, Wait: f.Best.Wait,
			AtOnce: math.Round(f.Best.AtOnce*10) / 10, AtStart: math.Round(f.Best.AtStart*10) / 10, SavingPercent: math.Round(f.Best.Saving()*1000) / 10}}
	for _, h := range f.Hours {
		out.Hours = append(out.Hours, model.ForecastHour{GCO2ePerKWh: math.Round(h.Intensity*10) / 10, Start: h.Start})
	}
	return out, nil
}

// durationParam parses an optional duration parameter (def when absent).
func durationParam(errs *fault.List, name string, v *string, def time.Duration) time.Duration {
	if v == nil || *v == "" {
		return def
	}
	d, err := time.ParseDuration(*v)
	if err != nil || d <= 0 {
		errs.Addf(name, "%q: want a duration such as 30m or 8h", *v)
		return def
	}
	return d
}
