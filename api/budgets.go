package api

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/overrides"
	"github.com/gantryhq/gantry/internal/team"
)

func (s *server) ListBudgets(ctx context.Context, req gen.ListBudgetsRequestObject) (gen.ListBudgetsResponseObject, error) {
	only := ""
	if req.Params.Team != nil {
		t, err := team.Parse(*req.Params.Team)
		if err != nil {
			return nil, &fault.Invalid{Fields: []fault.Field{{Path: "team", Message: err.Error()}}}
		}
		only = t.String()
	}
	list, err := s.o.Budgets.List(ctx, only) // the caller's teams only
	if err != nil {
		return nil, err
	}
	out := model.BudgetList{Items: []model.Budget{}}
	for _, l := range list {
		out.Items = append(out.Items, budgetOut(l.Status, l.CostCenters))
	}
	return gen.ListBudgets200JSONResponse(out), nil
}

func (s *server) ApproveWorkload(ctx context.Context, req gen.ApproveWorkloadRequestObject) (gen.ApproveWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Decide(ctx, req.Id, true, req.Body.Reason)
	if err != nil {
		return nil, err
	}
	s.o.Own.Decision(true)
	return gen.ApproveWorkload200JSONResponse(s.workloadOut(w)), nil
}

func (s *server) DenyWorkload(ctx context.Context, req gen.DenyWorkloadRequestObject) (gen.DenyWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Decide(ctx, req.Id, false, req.Body.Reason)
	if err != nil {
		return nil, err
	}
	s.o.Own.Decision(false)
	return gen.DenyWorkload200JSONResponse(s.workloadOut(w)), nil
}

// budgetOut is a budget's status, with its cost centers', as the API says it.
func budgetOut(st budget.Status, ccs []budget.Status) model.Budget {
	b := model.Budget{Team: st.Team, From: st.From, To: st.To, Amount: st.Amount, Spent: budget.Round(st.Spent), Currency: model.BudgetCurrencyUSD,
		ThresholdsReached: append([]float64{}, st.Crossed...), State: model.BudgetState(st.State), AtLimit: model.BudgetAtLimit(st.AtLimit),
		Banner: omitEmpty(st.Banner), CostCenters: []model.CostCenterBudget{}}
	for _, cc := range ccs {
		b.CostCenters = append(b.CostCenters, model.CostCenterBudget{CostCenter: cc.CostCenter, Amount: cc.Amount, Spent: budget.Round(cc.Spent),
			State: model.CostCenterBudgetState(cc.State), Banner: omitEmpty(cc.Banner)})
	}
	return b
}

func (s *server) GetTeamReport(ctx context.Context, req gen.GetTeamReportRequestObject) (gen.GetTeamReportResponseObject, error) {
	t, err := team.Parse(req.Team)
	if err != nil {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "team", Message: err.Error()}}}
	}
	at := s.o.Now().UTC()
	if req.Params.Month != nil {
		if at, err = time.Parse("2006-01", *req.Params.Month); err != nil {
			return nil, &fault.Invalid{Fields: []fault.Field{{Path: "month", Message: fmt.Sprintf("%q is not YYYY-MM", *req.Params.Month)}}}
		}
		if at.Year() < 1970 || at.Year() > 9998 {
			// Months whose end cannot be written as a timestamp (9999-12
			// ends in year 10000) or that precede every record.
			return nil, &fault.Invalid{Fields: []fault.Field{{Path: "month", Message: fmt.Sprintf("%q is outside 1970-01 … 9998-12", *req.Params.Month)}}}
		}
	}
	r, err := s.o.Workloads.TeamReport(ctx, t, at)
	if err != nil {
		return nil, err
	}
	rated := r.CarbonSource != ""
	out := model.TeamReport{Team: t.String(), Month: r.From.Format("2006-01"), From: r.From, To: r.To, Currency: model.TeamReportCurrencyUSD,
		Total: r.Total, Used: r.Used, Idle: r.Idle, Unmeasured: r.Unmeasured, KWh: r.KWh, FacilityKWh: r.FacilityKWh,
		ByUser: s.namedLines(ctx, costLines(r.ByUser, rated)), ByTemplate: costLines(r.ByTemplate, rated), ByGpuClass: costLines(r.ByGPUClass, rated), ByCostCenter: costLines(r.ByCostCenter, rated),
		Alerts: []model.BudgetAlert{}}
	if rated {
		out.KgCO2e, out.UnratedKWh, out.CarbonSource = &r.KgCO2e, &r.UnratedKWh, &r.CarbonSource
	}
	out.Deferred = savingOut(r.Deferred)
	if r.Budget != nil {
		out.Budget = ptr(budgetOut(*r.Budget, nil))
	}
	for _, a := range r.Alerts {
		out.Alerts = append(out.Alerts, model.BudgetAlert{CostCenter: omitEmpty(a.CostCenter), Threshold: a.Threshold, At: a.At, Spent: budget.Round(a.Spent), Amount: a.Amount})
	}
	return gen.GetTeamReport200JSONResponse(out), nil
}

func (s *server) GetTeamSettings(ctx context.Context, req gen.GetTeamSettingsRequestObject) (gen.GetTeamSettingsResponseObject, error) {
	t, err := team.Parse(req.Team)
	if err != nil {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "team", Message: err.Error()}}}
	}
	set, err := s.o.Settings.Get(ctx, t)
	if err != nil {
		return nil, err
	}
	return gen.GetTeamSettings200JSONResponse{Body: settingsOut(t.String(), set), Headers: gen.GetTeamSettings200ResponseHeaders{ETag: ptr(etag(set.Version))}}, nil
}

func (s *server) PutTeamSettings(ctx context.Context, req gen.PutTeamSettingsRequestObject) (gen.PutTeamSettingsResponseObject, error) {
	t, err := team.Parse(req.Team)
	if err != nil {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "team", Message: err.Error()}}}
	}
	in := overrides.Settings{Templates: map[string]overrides.Template{}}
	for name, o := range req.Body.Templates {
		in.Templates[name] = overrides.Template{IdleTimeout: deref(o.IdleTimeout), Sleep: deref(o.Sleep)}
	}
	var ifVersion *int64
	if req.Params.IfMatch != nil && strings.TrimSpace(*req.Params.IfMatch) != "*" { // "*": whatever version exists
		v, ok := parseETag(*req.Params.IfMatch)
		if !ok {
			return nil, &fault.Invalid{Fields: []fault.Field{{Path: "header.If-Match", Message: fmt.Sprintf("%q is not an ETag of these settings (such as \"v3\")", *req.Params.IfMatch)}}}
		}
		ifVersion = &v
	}
	set, err := s.o.Settings.Put(ctx, t, in, ifVersion)
	if err != nil {
		return nil, err
	}
	return gen.PutTeamSettings200JSONResponse{Body: settingsOut(t.String(), set), Headers: gen.PutTeamSettings200ResponseHeaders{ETag: ptr(etag(set.Version))}}, nil
}

// etag is a version as an entity tag, "v3"; "v0" is none yet.
func etag(version int64) string { return fmt.Sprintf(`"v%d"`, version) }

// parseETag reads an If-Match value: an ETag of etag's (a weak one, W/"v3",
// too) or a bare version number.
func parseETag(s string) (int64, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	s = strings.TrimPrefix(strings.Trim(s, `"`), "v")
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v >= 0
}

func settingsOut(t string, set overrides.Settings) model.TeamSettings {
	out := model.TeamSettings{Team: t, Templates: map[string]model.TemplateOverride{}}
	for name, o := range set.Templates {
		out.Templates[name] = model.TemplateOverride{IdleTimeout: omitEmpty(o.IdleTimeout), Sleep: omitEmpty(o.Sleep)}
	}
	if set.UpdatedBy != "" {
		out.UpdatedBy, out.UpdatedAt = ptr(set.UpdatedBy), ptr(set.UpdatedAt)
	}
	return out
}
