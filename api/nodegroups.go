package api

import (
	"context"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
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
