package nodegpu

import (
	"context"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// Checked is one GPU as the preflight check found it.
type Checked struct {
	GPU     string `json:"gpu"`
	Index   int    `json:"index"`
	Model   string `json:"model"`
	Healthy bool   `json:"healthy"`
	Why     string `json:"why,omitempty"`
}

// CheckReport is what gantry-agent check prints: every GPU of the node and
// whether all are healthy.
type CheckReport struct {
	Healthy bool      `json:"healthy"`
	GPUs    []Checked `json:"gpus"`
}

// Check is the preflight check of a quarantined node before it takes work
// again (package quarantine runs it as a Job there): every GPU's state as
// NVML reports it (telemetry.StateHealthy: no double-bit ECC error since
// the driver loaded, no failed row remapping; a pending remapping also
// fails, as the GPU needs a reset), then the critical events (XIDs,
// double-bit errors) NVML queues while it watches for watch, polled every
// second with wait. A node without GPUs fails: there is nothing to check.
func Check(ctx context.Context, r *Reader, watch time.Duration, wait func(context.Context, time.Duration) error) (CheckReport, error) {
	inv, err := r.Inventory(ctx)
	if err != nil {
		return CheckReport{}, err
	}
	rep := CheckReport{Healthy: len(inv) > 0}
	at := map[string]int{}
	for _, g := range inv {
		c := Checked{GPU: g.GPU, Index: g.Index, Model: g.Model, Healthy: true}
		if ok, why := telemetry.StateHealthy(g); !ok {
			c.Healthy, c.Why = false, why
		} else if g.Remap.Pending {
			c.Healthy, c.Why = false, "a row remapping is pending: the GPU needs a reset"
		}
		at[g.GPU] = len(rep.GPUs)
		rep.GPUs = append(rep.GPUs, c)
	}
	for waited := time.Duration(0); ; waited += time.Second {
		for _, e := range r.Events() {
			i, ok := at[e.GPU]
			if !ok || !telemetry.CriticalXID(e.XID) || !rep.GPUs[i].Healthy {
				continue
			}
			rep.GPUs[i].Healthy, rep.GPUs[i].Why = false, fmt.Sprintf("%s while the check watched", e.Detail)
		}
		if waited >= watch {
			break
		}
		if err := wait(ctx, time.Second); err != nil {
			return rep, err
		}
	}
	for _, g := range rep.GPUs {
		rep.Healthy = rep.Healthy && g.Healthy
	}
	if len(inv) == 0 {
		rep.GPUs = []Checked{}
	}
	return rep, nil
}
