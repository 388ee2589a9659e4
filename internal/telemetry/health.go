package telemetry

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// applicationXIDs are the XIDs an application causes (a page fault, an
// exception in a kernel, a preemption) rather than the GPU; the NVIDIA device
// plugin's health check skips the same set. Every other XID is critical.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// CriticalXID reports whether an XID means the GPU, not the application,
// failed.
func CriticalXID(xid uint64) bool { return xid != 0 && !applicationXIDs[xid] }

// gpuForgottenAfter is how long a node's GPU record outlives its last report.
const gpuForgottenAfter = 7 * 24 * time.Hour

// judge decides a GPU's health from its record (with the newest state and
// last critical XID): a critical XID within hold, double-bit ECC errors
// since the driver loaded, or a failed row remapping make it unhealthy.
func judge(r GPURecord, now time.Time, hold time.Duration) (bool, string) {
	if ok, why := StateHealthy(r.State); !ok {
		return false, why
	}
	if r.XID != 0 && now.Sub(r.XIDAt) < hold {
		return false, fmt.Sprintf("critical XID %d at %s", r.XID, r.XIDAt.UTC().Format(time.RFC3339))
	}
	return true, ""
}

// StateHealthy judges a GPU by its state alone: a failed row remapping or
// double-bit ECC errors since the driver loaded make it unhealthy (the
// agent's preflight check and the ingest path judge alike).
func StateHealthy(g GPUState) (bool, string) {
	switch {
	case g.Remap.Failure:
		return false, "row remapping failed: the GPU has run out of spare rows"
	case g.ECC.VolatileDBE > 0:
		return false, fmt.Sprintf("%d uncorrectable (double-bit) ECC errors since the driver loaded", g.ECC.VolatileDBE)
	}
	return true, ""
}

// updateHealth records the node's GPUs as the batch reports them, judges
// each one's health, and tells Health about those that turned unhealthy.
func (s *Service) updateHealth(ctx context.Context, node string, b Batch, now time.Time) error {
	var turned []GPURecord
	err := s.o.Store.UpdateNodeGPUs(ctx, node, func(old []GPURecord) ([]GPURecord, error) {
		turned = nil
		byGPU := map[string]GPURecord{}
		for _, r := range old {
			// A GPU the node has not reported for gpuForgottenAfter was
			// removed (or its agent lies): it is forgotten.
			if now.Sub(r.SeenAt) < gpuForgottenAfter {
				byGPU[r.State.GPU] = r
			}
		}
		for _, g := range b.GPUs {
			r, known := byGPU[g.GPU]
			if !known {
				r = GPURecord{Node: node, Healthy: true, Since: now}
			}
			r.State, r.Agent, r.SeenAt = g, b.Agent, now
			byGPU[g.GPU] = r
		}
		for _, e := range b.Events {
			r, known := byGPU[e.GPU]
			if !known || !CriticalXID(e.XID) || e.Time.Before(r.XIDAt) {
				continue
			}
			r.XID, r.XIDAt = e.XID, e.Time
			byGPU[e.GPU] = r
		}
		out := make([]GPURecord, 0, len(byGPU))
		for _, r := range byGPU {
			healthy, reason := judge(r, now, s.o.XIDHold)
			changed := healthy != r.Healthy
			if changed {
				r.Since = now
			}
			r.Healthy, r.Reason = healthy, reason
			if changed && !healthy {
				turned = append(turned, r)
			}
			out = append(out, r)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].State.Index < out[j].State.Index })
		return out, nil
	})
	if err != nil {
		return fmt.Errorf("record the GPUs of node %s: %w", node, err)
	}
	for _, r := range turned {
		var pods []PodRef
		seen := map[PodRef]bool{}
		for _, rd := range b.Readings {
			if rd.Device.GPU == r.State.GPU && rd.Pod.Name != "" && !seen[rd.Pod] {
				seen[rd.Pod] = true
				pods = append(pods, rd.Pod)
			}
		}
		s.o.Log.Warn("GPU unhealthy", "node", node, "gpu", r.State.GPU, "index", r.State.Index, "reason", r.Reason, "pods", len(pods))
		if s.o.Health == nil {
			continue
		}
		if err := s.o.Health.GPUUnhealthy(ctx, node, r, pods); err != nil {
			// The record stands; acting on it is retried with the next
			// unhealthy report only, so say so loudly.
			s.o.Log.Error("could not act on an unhealthy GPU", "node", node, "gpu", r.State.GPU, "err", err)
		}
	}
	return nil
}
