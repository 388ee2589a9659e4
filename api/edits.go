package api

import (
	"context"
	"encoding/json"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/quota"
)

// The platform team's edits of prices, quotas and budgets over the files
// (internal/overlay).

func (s *server) ListPlatformEdits(ctx context.Context, _ gen.ListPlatformEditsRequestObject) (gen.ListPlatformEditsResponseObject, error) {
	set, err := s.o.Edits.List(ctx)
	if err != nil {
		return nil, err
	}
	return gen.ListPlatformEdits200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) SetGPUClassPrice(ctx context.Context, req gen.SetGPUClassPriceRequestObject) (gen.SetGPUClassPriceResponseObject, error) {
	set, err := s.o.Edits.Put(ctx, overlay.Price, req.Name, gpu.Price{OnDemand: req.Body.OnDemand, Spot: deref(req.Body.Spot)})
	if err != nil {
		return nil, err
	}
	return gen.SetGPUClassPrice200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) ResetGPUClassPrice(ctx context.Context, req gen.ResetGPUClassPriceRequestObject) (gen.ResetGPUClassPriceResponseObject, error) {
	set, err := s.o.Edits.Reset(ctx, overlay.Price, req.Name)
	if err != nil {
		return nil, err
	}
	return gen.ResetGPUClassPrice200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) SetTeamQuota(ctx context.Context, req gen.SetTeamQuotaRequestObject) (gen.SetTeamQuotaResponseObject, error) {
	b := req.Body
	set, err := s.o.Edits.Put(ctx, overlay.Quota, req.Team, quota.Quota{GPUs: deref(b.Gpus), Cohort: deref(b.Cohort), BorrowingLimit: deref(b.BorrowingLimit), Cores: b.Cores})
	if err != nil {
		return nil, err
	}
	return gen.SetTeamQuota200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) ResetTeamQuota(ctx context.Context, req gen.ResetTeamQuotaRequestObject) (gen.ResetTeamQuotaResponseObject, error) {
	set, err := s.o.Edits.Reset(ctx, overlay.Quota, req.Team)
	if err != nil {
		return nil, err
	}
	return gen.ResetTeamQuota200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) SetTeamBudget(ctx context.Context, req gen.SetTeamBudgetRequestObject) (gen.SetTeamBudgetResponseObject, error) {
	b := req.Body
	bud := budget.Budget{Amount: b.Amount, Period: deref(b.Period), Anchor: deref(b.Anchor), Alerts: deref(b.Alerts), CostCenters: deref(b.CostCenters)}
	if b.AtLimit != nil {
		bud.AtLimit = budget.AtLimit(*b.AtLimit)
	}
	set, err := s.o.Edits.Put(ctx, overlay.Budget, req.Team, bud)
	if err != nil {
		return nil, err
	}
	return gen.SetTeamBudget200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) ResetTeamBudget(ctx context.Context, req gen.ResetTeamBudgetRequestObject) (gen.ResetTeamBudgetResponseObject, error) {
	set, err := s.o.Edits.Reset(ctx, overlay.Budget, req.Team)
	if err != nil {
		return nil, err
	}
	return gen.ResetTeamBudget200JSONResponse(s.editsOut(ctx, set)), nil
}

// editsOut is the edits, newest first, each with who made it by name.
func (s *server) editsOut(ctx context.Context, set overlay.Set) model.PlatformEditList {
	out := model.PlatformEditList{Items: []model.PlatformEdit{}}
	keys := make([]string, len(set.Edits))
	for i, e := range set.Edits {
		keys[i] = e.By
	}
	names := s.names(ctx, keys...)
	for _, e := range set.Edits {
		var v map[string]any
		_ = json.Unmarshal(e.Value, &v) // stored by the service as JSON objects
		item := model.PlatformEdit{Kind: model.PlatformEditKind(e.Kind), Key: e.Key, Value: v, By: e.By, At: e.At}
		if n, ok := names[e.By]; ok {
			item.ByName = ptr(n)
		}
		out.Items = append(out.Items, item)
	}
	return out
}
