package api

import (
	"context"
	"maps"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/team"
)

// Quotas are the teams' quotas in force (the policy's with the platform's
// edits over it): those of the teams it names, and any team's (a team it
// does not name has its default entry's).
type Quotas interface {
	Quotas() map[string]quota.Quota
	Quota(t team.Name) quota.Quota
}

// quotaRow is a team's quota as the clusters list shows it: GPUs per class,
// and its cores (quota.cores) under CPU.
func quotaRow(q quota.Quota) map[string]float64 {
	m := maps.Clone(q.GPUs)
	if q.Cores != nil {
		if m == nil {
			m = map[string]float64{}
		}
		m[gpu.CPUClass] = *q.Cores
	}
	return m
}

func (s *server) ListClusters(_ context.Context, _ gen.ListClustersRequestObject) (gen.ListClustersResponseObject, error) {
	out := model.WorkerClusterList{Items: []model.WorkerCluster{}, Quotas: map[string]map[string]float64{}}
	statuses := s.o.Fleet.Statuses(s.o.Workers)
	if len(statuses) > 0 {
		for t, q := range s.o.Quotas.Quotas() {
			if m := quotaRow(q); len(m) > 0 {
				out.Quotas[t] = m
			}
		}
		// A team with work on a worker that the policy does not name: its
		// default entry's quota.
		for _, c := range statuses {
			if c.State == nil {
				continue
			}
			for t := range c.State.Used {
				if _, ok := out.Quotas[t]; !ok {
					if m := quotaRow(s.o.Quotas.Quota(team.Name(t))); len(m) > 0 {
						out.Quotas[t] = m
					}
				}
			}
		}
	}
	for _, c := range statuses {
		wc := model.WorkerCluster{Name: c.Name, Region: c.Region, Provider: model.WorkerClusterProvider(c.Provider), Cordoned: c.Cordoned, Offers: []model.ClusterOffer{}}
		if c.Draining {
			wc.Draining = ptr(true)
		}
		if c.Zone != "" {
			wc.Zone = ptr(c.Zone)
		}
		if len(c.Labels) > 0 {
			wc.Labels = ptr(c.Labels)
		}
		if len(c.Caps) > 0 {
			wc.Caps = ptr(c.Caps)
		}
		if len(c.Images) > 0 {
			wc.Images = ptr(c.Images)
		}
		for _, o := range c.Offers {
			co := model.ClusterOffer{Class: o.Class, Purchase: model.ClusterOfferPurchase(o.Purchase), PricePerGPUHour: o.PricePerGPUHour}
			if o.GPUs > 0 {
				co.Gpus = ptr(o.GPUs)
			}
			if len(o.MIG) > 0 {
				co.Mig = ptr(o.MIG)
			}
			wc.Offers = append(wc.Offers, co)
		}
		if o := c.CPU; o != nil {
			wc.Cpu = &model.ClusterCPUOffer{Purchase: model.ClusterCPUOfferPurchase(o.Purchase), PricePerCoreHour: o.PricePerCoreHour}
			if o.Cores > 0 {
				wc.Cpu.Cores = ptr(o.Cores)
			}
		}
		if st := c.State; st != nil {
			ws := &model.WorkerClusterState{Reachable: st.Reachable, Free: st.Free}
			if ws.Free == nil {
				ws.Free = map[string]float64{}
			}
			if st.Why != "" {
				ws.Why = ptr(st.Why)
			}
			if len(st.Used) > 0 {
				ws.Used = ptr(st.Used)
			}
			if len(st.FreeMIG) > 0 {
				ws.FreeMIG = ptr(st.FreeMIG)
			}
			wc.State = ws
		}
		out.Items = append(out.Items, wc)
	}
	return gen.ListClusters200JSONResponse(out), nil
}

func (s *server) CordonCluster(ctx context.Context, req gen.CordonClusterRequestObject) (gen.CordonClusterResponseObject, error) {
	set, err := s.o.Edits.Put(ctx, overlay.Cluster, req.Name, fleet.Change{Cordoned: true})
	if err != nil {
		return nil, err
	}
	return gen.CordonCluster200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) UncordonCluster(ctx context.Context, req gen.UncordonClusterRequestObject) (gen.UncordonClusterResponseObject, error) {
	set, err := s.o.Edits.Reset(ctx, overlay.Cluster, req.Name)
	if err != nil {
		return nil, err
	}
	return gen.UncordonCluster200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) DrainCluster(ctx context.Context, req gen.DrainClusterRequestObject) (gen.DrainClusterResponseObject, error) {
	set, err := s.o.Edits.Put(ctx, overlay.Cluster, req.Name, fleet.Change{Cordoned: true, Drain: true})
	if err != nil {
		return nil, err
	}
	return gen.DrainCluster200JSONResponse(s.editsOut(ctx, set)), nil
}
