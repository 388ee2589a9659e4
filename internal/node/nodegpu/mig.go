package nodegpu

import (
	"math"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// splitMIG gives a MIG GPU's instances their part of its power draw and an
// energy counter of their own: each pass, what the GPU's counter rose by,
// split by MIGShares, is added to each instance's (a counter that went
// back, a driver reload, adds nothing that pass). Called with r.mu held.
func (r *Reader) splitMIG(gpuUUID string, parent telemetry.Values, insts []agent.DeviceSample) {
	shares := agent.MIGShares(insts)
	if p := parent[telemetry.Power]; !math.IsNaN(p) {
		for i := range insts {
			insts[i].Values[telemetry.Power] = p * shares[i]
		}
	}
	e := parent[telemetry.Energy]
	if math.IsNaN(e) {
		return
	}
	prev, seen := r.gpuEnergy[gpuUUID]
	r.gpuEnergy[gpuUUID] = e
	for i := range insts {
		id := insts[i].Device.ID()
		if seen && e >= prev {
			r.migEnergy[id] += (e - prev) * shares[i]
		}
		insts[i].Values[telemetry.Energy] = math.Round(r.migEnergy[id])
	}
}
