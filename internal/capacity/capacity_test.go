package capacity

import (
	"testing"

	"github.com/gantryhq/gantry/internal/nodegroup"
)

type pools []nodegroup.PoolState

func (p pools) States() ([]nodegroup.PoolState, bool) { return p, p != nil }

func TestGroups(t *testing.T) {
	set, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind, Groups: []nodegroup.Group{
		{Name: "a", Class: "L4", Purchase: nodegroup.OnDemand, GPUsPerNode: 4, Max: 2},
		{Name: "b", Class: "L4", Purchase: nodegroup.Spot, GPUsPerNode: 4, Max: 2},
	}}, []string{"L4"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{NodeGroups: set}); err == nil {
		t.Fatal("built without pools")
	}
	s, _ := New(Options{NodeGroups: set, Pools: pools{{Group: nodegroup.Group{Name: "b"}, Nodes: 1, Booting: 1}}})
	g := s.Groups()
	if len(g) != 2 || g[0].Name != "a" || g[0].State != nil || g[1].State == nil || g[1].State.Nodes != 1 || g[1].State.Booting != 1 {
		t.Fatalf("groups: %+v", g)
	}
	s, _ = New(Options{NodeGroups: set, Pools: NoPools{}})
	if g := s.Groups(); len(g) != 2 || g[1].State != nil {
		t.Fatalf("without a cluster: %+v", g)
	}
}
