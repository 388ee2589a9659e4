package advice

import (
	"sort"

	"github.com/gantryhq/gantry/internal/replay"
)

// Replay runs the engine over a trace online: every pod's samples in time
// order, so each decision at t rests on samples up to t only. Samples at or
// after cut are not played (cut ≤ 0: all of them).
func Replay(tr *replay.Trace, e *Engine, cut int64) []Decision {
	type obs struct {
		pod string
		p   replay.TracePoint
	}
	var all []obs
	for _, pod := range tr.Pods {
		for _, p := range tr.Series[pod] {
			if cut > 0 && p.T >= cut {
				break
			}
			all = append(all, obs{pod, p})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].p.T != all[j].p.T {
			return all[i].p.T < all[j].p.T
		}
		return all[i].pod < all[j].pod
	})
	var out []Decision
	for _, o := range all {
		out = append(out, e.Observe(o.pod, Obs{T: o.p.T, Duty: o.p.Duty, MemBytes: o.p.MemBytes})...)
	}
	return out
}
