// Package capacity owns what Gantry says about the size of its GPU fleet:
// the node groups the platform team declared, with what their machines are
// doing now as the cluster's autoscaler reports it.
package capacity

import (
	"errors"

	"github.com/gantryhq/gantry/internal/nodegroup"
)

// Pools reports what the node groups' machines are doing now; ok is false
// when no cluster scales them (or it is not reachable yet).
type Pools interface {
	States() (states []nodegroup.PoolState, ok bool)
}

// Options are what a Service is made of.
type Options struct {
	NodeGroups *nodegroup.Set // required; empty when none are declared
	Pools      Pools          // required
}

// Service answers for the fleet's size.
type Service struct {
	groups *nodegroup.Set
	pools  Pools
}

// New returns a capacity service, complete.
func New(o Options) (*Service, error) {
	if o.NodeGroups == nil || o.Pools == nil {
		return nil, errors.New("capacity: node groups and their pools are required")
	}
	return &Service{groups: o.NodeGroups, pools: o.Pools}, nil
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
