package server

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/workload"
)

// runWorkloads is what runs ask of the workloads, from the workload
// service, its store and the template catalog.
type runWorkloads struct {
	svc     *workload.Service
	records interface {
		Workload(context.Context, string) (workload.Workload, error)
		ListWorkloads(context.Context, workload.Filter) ([]workload.Workload, error)
	}
	templates interface {
		Get(context.Context, string, int) (catalog.Version, error)
	}
	now func() time.Time
}

func (r runWorkloads) Visible(ctx context.Context, id string) error { return r.svc.Visible(ctx, id) }
func (r runWorkloads) Manageable(ctx context.Context, id string) error {
	_, err := r.svc.Manageable(ctx, id)
	return err
}
func (r runWorkloads) Resume(ctx context.Context, id string) error {
	_, err := r.svc.Start(ctx, id)
	return err
}
func (r runWorkloads) StopForRule(ctx context.Context, id, reason string) error {
	return r.svc.StopByRule(ctx, id, reason)
}

// ForRun reads the record as Gantry (the caller is the run, not a person).
func (r runWorkloads) ForRun(ctx context.Context, id string) (runs.RunInfo, error) {
	w, err := r.records.Workload(ctx, id)
	if err != nil {
		return runs.RunInfo{}, err
	}
	v, err := r.templates.Get(ctx, w.Template, w.TemplateVersion)
	if err != nil {
		return runs.RunInfo{}, err
	}
	info := runs.RunInfo{Namespace: r.svc.Namespace(w), Rules: v.Template.Spec.EarlyStopping,
		Money: runs.Money{SoFar: w.CostAt(r.now()), PerHour: w.RunPricePerHour()}}
	if w.Trial != nil {
		info.Rules, info.Trial = w.Trial.Rules(), w.Trial.ID // a trial's run: its caps, not the template's rules
	}
	return info, nil
}

// EarlierRuns reads the records as Gantry: workloads of the workload's
// template in its team, created before it, newest first.
func (r runWorkloads) EarlierRuns(ctx context.Context, id string, limit int) ([]string, error) {
	w, err := r.records.Workload(ctx, id)
	if err != nil {
		return nil, err
	}
	ws, err := r.records.ListWorkloads(ctx, workload.Filter{Team: w.Team, Template: w.Template, Limit: limit,
		After: &workload.Key{CreatedAt: w.CreatedAt, ID: w.ID}})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(ws))
	for _, o := range ws {
		if o.Trial == nil { // a trial's short runs are no yardstick for full ones
			ids = append(ids, o.ID)
		}
	}
	return ids, nil
}
