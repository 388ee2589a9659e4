// Package capacity owns what Gantry says about the size of its GPU fleet:
// the node groups the platform team declared, with what their machines are
// doing now as the cluster's autoscaler reports it; each class's demand
// forecast from Gantry's own launch history; and how many GPUs of a class
// are worth reserving.
package capacity

import (
	"errors"
	"time"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// Pools reports what the node groups' machines are doing now; ok is false
// when no cluster scales them (or it is not reachable yet).
type Pools interface {
	States() (states []nodegroup.PoolState, ok bool)
}

// Options are what a Service is made of (all required).
type Options struct {
	NodeGroups *nodegroup.Set // empty when none are declared
	Pools      Pools
	Launches   History
	Classes    *gpu.Catalog
	Now        func() time.Time
}

// Service answers for the fleet's size.
type Service struct {
	groups   *nodegroup.Set
	pools    Pools
	launches History
	classes  *gpu.Catalog
	now      func() time.Time
}

// New returns a capacity service, complete.
func New(o Options) (*Service, error) {
	if o.NodeGroups == nil || o.Pools == nil || o.Launches == nil || o.Classes == nil || o.Now == nil {
		return nil, errors.New("capacity: node groups, their pools, the launch history, the classes and a clock are required")
	}
	return &Service{groups: o.NodeGroups, pools: o.Pools, launches: o.Launches, classes: o.Classes, now: o.Now}, nil
}

// Group is a node group and, when known, its state now.
type Group struct {
	nodegroup.Group
	State *nodegroup.PoolState // nil when no cluster scales it
}

// Groups lists the node groups in file order with their states.
func (s *Service) Groups() []Group {
	states, ok := s.pools.States()
	byName := map[string]nodegroup.PoolState{}
	for _, st := range states {
		byName[st.Group.Name] = st
	}
	var out []Group
	for _, g := range s.groups.List() {
		x := Group{Group: g}
		if st, found := byName[g.Name]; ok && found {
			x.State = &st
		}
		out = append(out, x)
	}
	return out
}

// NoPools is the Pools of a Gantry that watches no cluster.
type NoPools struct{}

// States implements Pools: nothing is known.
func (NoPools) States() ([]nodegroup.PoolState, bool) { return nil, false }
