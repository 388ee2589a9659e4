package nodegroup

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

var classes = []string{"H100-80GB", "L4"}

func TestShippedFile(t *testing.T) {
	s, err := LoadFile(filepath.Join("..", "..", "templates", "node-groups.yaml"), []string{"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "L4"})
	if err != nil {
		t.Fatal(err)
	}
	g, ok := s.Get("h100-on-demand")
	if !ok || g.Class != "H100-80GB" || g.Purchase != OnDemand || g.Boot().String() != "3m0s" || g.GPUHourPrice() != 6.9 {
		t.Fatalf("h100-on-demand: %+v (GPU-hour %v)", g, g.GPUHourPrice())
	}
	if r, _ := s.Get("h100-reserved"); r.Quiet() != DefaultQuietTime || r.Boot() != DefaultBootTime {
		t.Fatalf("defaults: %v %v", r.Quiet(), r.Boot())
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"class", "  - {name: a, class: B200, purchase: spot, gpusPerNode: 8, max: 1}\n", `x.yaml:4: groups[0].class: "B200" is not a GPU class`},
		{"purchase", "  - {name: a, class: L4, purchase: preemptible, gpusPerNode: 8, max: 1}\n", `groups[0].purchase: "preemptible" is not one of reserved, on-demand, spot`},
		{"gpus", "  - {name: a, class: L4, purchase: spot, gpusPerNode: 0, max: 1}\n", "groups[0].gpusPerNode: 0: must be between 1 and 64"},
		{"max below min", "  - {name: a, class: L4, purchase: reserved, gpusPerNode: 4, min: 3, max: 2}\n", "groups[0].max: 2 is below min (3)"},
		{"reserved whole", "  - {name: a, class: L4, purchase: reserved, gpusPerNode: 4, min: 1, max: 2}\n", "a reserved group is bought whole"},
		{"floor", "  - {name: a, class: L4, purchase: on-demand, gpusPerNode: 4, min: 1, max: 2}\n", "on-demand groups start from 0"},
		{"duplicate", "  - {name: a, class: L4, purchase: spot, gpusPerNode: 4, max: 2}\n  - {name: a, class: L4, purchase: spot, gpusPerNode: 4, max: 2}\n", `x.yaml:5: groups[1].name: duplicate group "a"`},
		{"price", "  - {name: a, class: L4, purchase: spot, gpusPerNode: 4, max: 2, pricePerNodeHour: -1}\n", "pricePerNodeHour: must be a price"},
		{"boot", "  - {name: a, class: L4, purchase: spot, gpusPerNode: 4, max: 2, bootTime: soon}\n", `"soon" is not a duration`},
		{"unknown field", "  - {name: a, class: L4, purchase: spot, gpusPerNode: 4, max: 2, size: 3}\n", "size"},
		{"warm reserved", "  - {name: a, class: L4, purchase: reserved, gpusPerNode: 4, min: 1, max: 1, pricePerNodeHour: 4, warmPerDay: 10}\n", "groups[0].warmPerDay: a reserved group's machines are always there"},
		{"warm unpriced", "  - {name: a, class: L4, purchase: on-demand, gpusPerNode: 4, max: 1, warmPerDay: 10}\n", "groups[0].warmPerDay: a group without a price"},
		{"warm negative", "  - {name: a, class: L4, purchase: on-demand, gpusPerNode: 4, max: 1, pricePerNodeHour: 4, warmPerDay: -1}\n", "groups[0].warmPerDay: must be an amount"},
		{"name", "  - {name: A_b, class: L4, purchase: spot, gpusPerNode: 4, max: 2}\n", `"A_b" is not a valid group name`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte("apiVersion: gantry.dev/v1alpha1\nkind: NodeGroupList\ngroups:\n"+c.body), classes)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	s, err := New(File{APIVersion: APIVersion, Kind: Kind, Groups: []Group{
		{Name: "r", Class: "H100-80GB", Purchase: Reserved, GPUsPerNode: 8, Min: 2, Max: 2},
		{Name: "od", Class: "H100-80GB", Purchase: OnDemand, GPUsPerNode: 8, Max: 1},
		{Name: "spot", Class: "H100-80GB", Purchase: Spot, GPUsPerNode: 4, Max: 3},
	}}, classes)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    Request
		want string // "" fits
	}{
		{"one node", Request{Class: "H100-80GB", GPUsPerPod: 8, Pods: 1}, ""},
		{"every node", Request{Class: "H100-80GB", GPUsPerPod: 8, Pods: 3}, ""},
		{"one pod too many", Request{Class: "H100-80GB", GPUsPerPod: 8, Pods: 4}, "asks for 32 H100-80GB GPUs, but its node groups can hold at most 24 (od: 1 × 8, r: 2 × 8)"},
		{"spot adds room", Request{Class: "H100-80GB", GPUsPerPod: 4, Pods: 9, Spot: true}, ""},
		{"fragments do not add up", Request{Class: "H100-80GB", GPUsPerPod: 6, Pods: 4, Spot: true}, "at most 18"},
		{"pod larger than a machine", Request{Class: "H100-80GB", GPUsPerPod: 16, Pods: 1}, "each pod asks for 16 H100-80GB GPUs, but the largest machine in its node groups has 8"},
		{"class without groups", Request{Class: "L4", GPUsPerPod: 64, Pods: 9}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := s.Check(c.r)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var tb *TooBigError
			if !errors.As(err, &tb) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	var empty *Set
	if err := empty.Check(Request{Class: "H100-80GB", GPUsPerPod: 99, Pods: 1}); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("apiVersion: gantry.dev/v1alpha1\nkind: NodeGroupList\ngroups:\n  - {name: a, class: L4, purchase: spot, gpusPerNode: 4, max: 2, bootTime: 1m}\n"))
	f.Add([]byte("groups: [{max: -1}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("f.yaml", data, classes)
		if err != nil {
			return
		}
		for _, g := range s.List() {
			if g.Min > g.Max || g.GPUsPerNode < 1 || g.PricePerNodeHour < 0 {
				t.Fatalf("accepted %+v", g)
			}
			_ = s.Check(Request{Class: g.Class, GPUsPerPod: 1, Pods: 1})
		}
	})
}
