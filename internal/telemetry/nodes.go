package telemetry

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// Node is a GPU node as its agent reports it.
type Node struct {
	Name     string
	Agent    string
	SeenAt   time.Time
	Healthy  bool // every GPU healthy
	GPUs     []GPURecord
	InUse    []Latest // the newest reading of each device held by a pod, within the last few intervals
	Idle     []Latest // the newest reading of each device no pod holds
	Stale    bool     // no report for staleAfter: the agent or the node is away
	Readings int      // devices reporting
}

// current is how far back the newest readings count as the current use.
const current = 2 * time.Minute

// staleAfter is how long without a report makes a node stale.
const staleAfter = 2 * time.Minute

// Nodes lists every node whose agent has reported, by name.
func (s *Service) Nodes(ctx context.Context) ([]Node, error) {
	recs, err := s.o.Store.NodeGPUs(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list GPU nodes: %w", err)
	}
	by := map[string][]GPURecord{}
	for _, r := range recs {
		by[r.Node] = append(by[r.Node], r)
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Node, 0, len(names))
	for _, n := range names {
		node, err := s.node(ctx, n, by[n])
		if err != nil {
			return nil, err
		}
		out = append(out, node)
	}
	return out, nil
}

// Node is one node; fault.NotFound when its agent never reported.
func (s *Service) Node(ctx context.Context, name string) (Node, error) {
	recs, err := s.o.Store.NodeGPUs(ctx, name)
	if err != nil {
		return Node{}, fmt.Errorf("GPUs of node %s: %w", name, err)
	}
	if len(recs) == 0 {
		return Node{}, &fault.NotFound{Kind: "node", Name: name}
	}
	return s.node(ctx, name, recs)
}

func (s *Service) node(ctx context.Context, name string, recs []GPURecord) (Node, error) {
	now := s.o.Now()
	n := Node{Name: name, Healthy: true, GPUs: recs}
	for _, r := range recs {
		if r.SeenAt.After(n.SeenAt) {
			n.SeenAt, n.Agent = r.SeenAt, r.Agent
		}
		n.Healthy = n.Healthy && r.Healthy
	}
	n.Stale = now.Sub(n.SeenAt) > staleAfter
	latest, err := s.o.Store.LatestSamples(ctx, name, now.Add(-current))
	if err != nil {
		return n, fmt.Errorf("current use of node %s: %w", name, err)
	}
	// A device reported under several series (a pod that ended, then none):
	// its newest reading is its current use.
	newest := map[string]Latest{}
	for _, l := range latest {
		id := l.Series.Key.Device.ID()
		if o, ok := newest[id]; !ok || l.Sample.Time.After(o.Sample.Time) {
			newest[id] = l
		}
	}
	for _, l := range newest {
		if l.Series.Key.Pod.Name != "" {
			n.InUse = append(n.InUse, l)
		} else {
			n.Idle = append(n.Idle, l)
		}
	}
	n.Readings = len(newest)
	for _, ls := range [][]Latest{n.InUse, n.Idle} {
		sort.Slice(ls, func(i, j int) bool { return ls[i].Series.Key.Device.ID() < ls[j].Series.Key.Device.ID() })
	}
	return n, nil
}

// Unhealthy says why GPUs a workload's pods hold now are unhealthy. It
// reads the GPU records once, and the current use only of the nodes that
// have an unhealthy GPU (rare), so asking for many workloads stays cheap.
func (s *Service) Unhealthy(ctx context.Context, workloadID string) ([]string, error) {
	recs, err := s.o.Store.NodeGPUs(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("GPU records: %w", err)
	}
	bad := map[string]map[string]GPURecord{} // node → GPU UUID → record
	for _, r := range recs {
		if !r.Healthy {
			if bad[r.Node] == nil {
				bad[r.Node] = map[string]GPURecord{}
			}
			bad[r.Node][r.State.GPU] = r
		}
	}
	var out []string
	for node, gpus := range bad {
		latest, err := s.o.Store.LatestSamples(ctx, node, s.o.Now().Add(-current))
		if err != nil {
			return nil, fmt.Errorf("current use of node %s: %w", node, err)
		}
		for _, l := range latest {
			if g, ok := gpus[l.Series.Key.Device.GPU]; ok && l.Series.Key.Workload == workloadID {
				out = append(out, fmt.Sprintf("node %s GPU %d: %s", node, g.State.Index, g.Reason))
				delete(gpus, l.Series.Key.Device.GPU) // once per GPU, however many instances
			}
		}
	}
	sort.Strings(out)
	return out, nil
}
