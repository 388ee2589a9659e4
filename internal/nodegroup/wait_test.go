package nodegroup

import (
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/config"
)

func TestWaitReason(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	od := Group{Name: "h100-on-demand", Class: "H100-80GB", Purchase: OnDemand, GPUsPerNode: 8, Max: 2, BootTime: config.Duration(3 * time.Minute)}
	spot := Group{Name: "h100-spot", Class: "H100-80GB", Purchase: Spot, GPUsPerNode: 8, Max: 1}
	for _, c := range []struct {
		name  string
		pools []PoolState
		want  string // "": nothing to say
	}{
		{"no groups", nil, ""},
		{"not acted yet", []PoolState{{Group: od}}, "waiting for capacity: node group h100-on-demand can add a machine (8 GPUs, typical boot 3m; 0 of 2 now)"},
		{"a reserved machine missing", []PoolState{{Group: Group{Name: "r", Purchase: Reserved, GPUsPerNode: 8, Min: 2, Max: 2}, Nodes: 1}}, ""},
		{"booting", []PoolState{{Group: od, Nodes: 1, Booting: 1, Since: now.Add(-40 * time.Second)}, {Group: spot}},
			"waiting for capacity: scale-up of 1 × h100-on-demand node (8 GPUs each) requested 40s ago (typical boot 3m)"},
		{"the oldest scale-up", []PoolState{{Group: od, Booting: 2, Since: now.Add(-10 * time.Second)}, {Group: spot, Booting: 1, Since: now.Add(-90 * time.Second)}},
			"scale-up of 1 × h100-spot node (8 GPUs each) requested 1m30s ago (typical boot 3m)"},
		{"failed", []PoolState{{Group: od, Failed: "InsufficientCapacity: no offering available", FailedAt: now.Add(-2 * time.Minute)}},
			"scale-up of node group h100-on-demand failed 2m ago: InsufficientCapacity: no offering available; the autoscaler retries"},
		{"every group at max", []PoolState{{Group: od, Nodes: 2}, {Group: spot, Nodes: 1}},
			"node group h100-on-demand at its max (2 of 2 nodes); node group h100-spot at its max (1 of 1 nodes): waiting for running work to end"},
		{"one group has room", []PoolState{{Group: od, Nodes: 2}, {Group: spot}}, "node group h100-spot can add a machine (8 GPUs, typical boot 3m; 0 of 1 now)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := WaitReason(c.pools, now)
			if c.want == "" {
				if ok {
					t.Fatalf("said %q", got)
				}
				return
			}
			if !ok || !strings.Contains(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 40 * time.Second: "40s", 3 * time.Minute: "3m", 90 * time.Second: "1m30s", time.Hour: "1h", time.Hour + 10*time.Second: "1h0m10s", 2*time.Hour + 5*time.Minute: "2h5m"} {
		if got := short(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
