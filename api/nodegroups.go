package api

import (
	"context"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/overlay"
)

func (s *server) ListNodeGroups(ctx context.Context, _ gen.ListNodeGroupsRequestObject) (gen.ListNodeGroupsResponseObject, error) {
	out := model.NodeGroupList{Items: []model.NodeGroup{}}
	for _, g := range s.o.Capacity.Groups() {
		ng := model.NodeGroup{Name: g.Name, Class: g.Class, Purchase: model.NodeGroupPurchase(g.Purchase), GpusPerNode: g.GPUsPerNode,
			Min: g.Min, Max: g.Max, PricePerNodeHour: g.PricePerNodeHour, GpuHourPrice: g.GPUHourPrice(),
			BootTimeSeconds: int(g.Boot().Seconds()), QuietTimeSeconds: int(g.Quiet().Seconds())}
		if g.WarmPerDay > 0 {
			ng.WarmPerDay = ptr(g.WarmPerDay)
		}
		if st := g.State; st != nil {
			ng.State = &model.NodeGroupState{Nodes: st.Nodes, Booting: st.Booting}
			if !st.Since.IsZero() {
				ng.State.BootingSince = ptr(st.Since)
			}
			if st.Failed != "" {
				ng.State.Failed, ng.State.FailedAt = ptr(st.Failed), ptr(st.FailedAt)
			}
		}
		out.Items = append(out.Items, ng)
	}
	return gen.ListNodeGroups200JSONResponse(out), nil
}

func (s *server) SetNodeGroup(ctx context.Context, req gen.SetNodeGroupRequestObject) (gen.SetNodeGroupResponseObject, error) {
	b := req.Body
	set, err := s.o.Edits.Put(ctx, overlay.NodeGroup, req.Name, nodegroup.Change{Max: b.Max, PricePerNodeHour: b.PricePerNodeHour,
		BootTimeSeconds: b.BootTimeSeconds, QuietTimeSeconds: b.QuietTimeSeconds, WarmPerDay: b.WarmPerDay})
	if err != nil {
		return nil, err
	}
	return gen.SetNodeGroup200JSONResponse(s.editsOut(ctx, set)), nil
}

func (s *server) ResetNodeGroup(ctx context.Context, req gen.ResetNodeGroupRequestObject) (gen.ResetNodeGroupResponseObject, error) {
	set, err := s.o.Edits.Reset(ctx, overlay.NodeGroup, req.Name)
	if err != nil {
		return nil, err
	}
	return gen.ResetNodeGroup200JSONResponse(s.editsOut(ctx, set)), nil
}
