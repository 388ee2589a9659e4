package fleet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// testFleet: an on-premises A100 room at an amortised price, a cloud with
// H100s on demand and on spot and dearer A100s, and an EU cloud; the room
// and the first cloud have CPU nodes for CPU-only launches.
func testFleet(t testing.TB) *Fleet {
	t.Helper()
	f, err := New(File{APIVersion: APIVersion, Kind: Kind,
		Clusters: []Cluster{
			{Name: "onprem-a100", Region: "eu-central", Provider: OnPremises, Kubeconfig: Kubeconfig{Secret: "a"}, Labels: map[string]string{"residency": "onprem"},
				Offers: []Offer{{Class: "A100-80GB", Purchase: nodegroup.Reserved, PricePerGPUHour: 1.1, GPUs: 16, MIG: []string{"1g.10gb"}}},
				CPU:    &CPUOffer{Purchase: nodegroup.Reserved, PricePerCoreHour: 0.02, Cores: 64}},
			{Name: "cloud-east", Region: "us-east-1", Provider: Cloud, Kubeconfig: Kubeconfig{Secret: "b"}, Labels: map[string]string{"residency": "cloud"},
				Offers: []Offer{{Class: "H100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 6.9}, {Class: "H100-80GB", Purchase: nodegroup.Spot, PricePerGPUHour: 4.5},
					{Class: "A100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 3.2}},
				CPU:  &CPUOffer{Purchase: nodegroup.OnDemand, PricePerCoreHour: 0.045},
				Caps: map[string]map[string]float64{"nlp": {"H100-80GB": 8, "CPU": 4}, "data": {"*": 1}}},
			{Name: "cloud-eu", Region: "eu-west-1", Provider: Cloud, Kubeconfig: Kubeconfig{File: "c"}, Labels: map[string]string{"residency": "cloud"},
				Images: []string{"registry.gantry.internal", "docker.io/library/python"},
				Offers: []Offer{{Class: "H100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 7.4}, {Class: "L4", Purchase: nodegroup.Spot, PricePerGPUHour: 0.3}}},
		},
		Teams:     map[string]Rules{"health": {Require: map[string]string{"residency": "onprem"}}, "ads": {Forbid: []string{"cloud-east"}}},
		Templates: map[string]Rules{"eu-only": {Pin: []string{"cloud-eu", "onprem-a100"}}},
	}, classes(t))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func up(free map[string]float64) State { return State{Reachable: true, Free: free} }

func TestPlace(t *testing.T) {
	f := testFleet(t)
	all := map[string]State{
		"onprem-a100": up(map[string]float64{"A100-80GB": 6, gpu.CPUClass: 16}),
		"cloud-east":  up(map[string]float64{"H100-80GB": 16, "A100-80GB": 8, gpu.CPUClass: 32}),
		"cloud-eu":    up(map[string]float64{"H100-80GB": 8, "L4": 4}),
	}
	with := func(name string, s State) map[string]State {
		m := map[string]State{}
		for k, v := range all {
			m[k] = v
		}
		m[name] = s
		return m
	}
	for _, tc := range []struct {
		name    string
		l       Launch
		states  map[string]State
		want    string // the cluster chosen ("" none)
		reason  string
		refused map[string]string
	}{
		{"cheapest that fits", Launch{Team: "vision", Class: "A100-80GB", GPUs: 4}, all, "onprem-a100",
			"placed on onprem-a100: $1.10/GPU-h (reserved) vs $3.20 on cloud-east; 6 GPUs free", map[string]string{"cloud-eu": "offers no A100-80GB"}},
		{"the cheapest full: the next", Launch{Team: "vision", Class: "A100-80GB", GPUs: 8}, all, "cloud-east",
			"placed on cloud-east: $3.20/GPU-h vs $1.10 on onprem-a100 (full); 8 GPUs free", nil},
		{"none fits: wait at the cheapest", Launch{Team: "vision", Class: "A100-80GB", GPUs: 12}, all, "onprem-a100",
			"waiting for onprem-a100 (no cluster has 12 A100-80GB GPUs free now): $1.10/GPU-h (reserved) vs $3.20 on cloud-east; 6 GPUs free", nil},
		{"spot when allowed", Launch{Team: "vision", Class: "H100-80GB", GPUs: 8, Spot: true}, all, "cloud-east",
			"placed on cloud-east: $4.50/GPU-h (spot) vs $7.40 on cloud-eu; 16 GPUs free", nil},
		{"on-demand otherwise", Launch{Team: "vision", Class: "H100-80GB", GPUs: 8}, all, "cloud-east", "placed on cloud-east: $6.90/GPU-h vs $7.40 on cloud-eu; 16 GPUs free", nil},
		{"spot only, not allowed", Launch{Team: "vision", Class: "L4", GPUs: 1}, all, "", "",
			map[string]string{"cloud-eu": "offers L4 on spot capacity only, and the launch does not allow spot"}},
		{"MIG where partitioned", Launch{Team: "vision", Class: "A100-80GB", MIG: "1g.10gb", GPUs: 1.0 / 7}, all, "onprem-a100", "",
			map[string]string{"cloud-east": "offers no 1g.10gb slices of A100-80GB"}},
		{"residency is a hard rule", Launch{Team: "health", Class: "H100-80GB", GPUs: 1}, all, "", "",
			map[string]string{"cloud-east": "team health requires residency=onprem; the cluster has residency=cloud", "onprem-a100": "team health requires residency=onprem; the cluster has residency=onprem"}},
		{"a team forbids", Launch{Team: "ads", Class: "H100-80GB", GPUs: 1}, all, "cloud-eu", "", map[string]string{"cloud-east": "team ads may not run here"}},
		{"a template pins", Launch{Team: "vision", Template: "eu-only", Class: "H100-80GB", GPUs: 1}, all, "cloud-eu", "",
			map[string]string{"cloud-east": "template eu-only runs only on cloud-eu, onprem-a100"}},
		{"a team's cap on a cluster", Launch{Team: "nlp", Class: "H100-80GB", GPUs: 4}, with("cloud-east", State{Reachable: true, Free: map[string]float64{"H100-80GB": 16}, Used: map[string]map[string]float64{"nlp": {"H100-80GB": 6}}}), "cloud-eu", "",
			map[string]string{"cloud-east": "team nlp's cap here is 8 H100-80GB GPUs: 6 in use, 4 asked"}},
		{"an image the cluster may run", Launch{Team: "ads", Class: "H100-80GB", GPUs: 1, Images: []string{"registry.gantry.internal/nvidia/cuda:12.8@sha256:" + strings.Repeat("0", 64), "python:3.12"}}, all, "cloud-eu", "", nil},
		{"an image from elsewhere", Launch{Team: "vision", Template: "eu-only", Class: "H100-80GB", GPUs: 1, Images: []string{"registry.gantry.internal/nvidia/cuda:12.8", "ghcr.io/acme/train:1"}}, all, "", "",
			map[string]string{"cloud-eu": "runs images from registry.gantry.internal, index.docker.io/library/python only, not ghcr.io/acme/train:1"}},
		{"unreachable", Launch{Team: "vision", Class: "H100-80GB", GPUs: 1}, with("cloud-east", State{Why: "credentials expired at 09:00"}), "cloud-eu", "",
			map[string]string{"cloud-east": "unreachable: credentials expired at 09:00"}},
		// CPU-only launches go to CPU nodes, priced per core-hour.
		{"CPU-only: the cheapest cores", Launch{Team: "vision", Class: gpu.CPUClass, Cores: 8}, all, "onprem-a100",
			"placed on onprem-a100: $0.02/core-h (reserved) vs $0.045 on cloud-east; 16 cores free", map[string]string{"cloud-eu": "runs no CPU-only launches (it states no cpu nodes)"}},
		{"CPU-only, the cheapest full: the next", Launch{Team: "vision", Class: gpu.CPUClass, Cores: 24}, all, "cloud-east",
			"placed on cloud-east: $0.045/core-h vs $0.02 on onprem-a100 (full); 32 cores free", nil},
		{"CPU-only, none fits: wait at the cheapest", Launch{Team: "vision", Class: gpu.CPUClass, Cores: 48}, all, "onprem-a100",
			"waiting for onprem-a100 (no cluster has 48 cores of CPU nodes free now): $0.02/core-h (reserved) vs $0.045 on cloud-east; 16 cores free", nil},
		{"CPU-only, a team's cap on cores", Launch{Team: "nlp", Class: gpu.CPUClass, Cores: 20}, all, "onprem-a100", "",
			map[string]string{"cloud-east": "team nlp's cap here is 4 cores: 0 in use, 20 asked"}},
		{"CPU-only: a cap on any GPU class bounds no cores", Launch{Team: "data", Class: gpu.CPUClass, Cores: 20}, all, "cloud-east", "", nil},
		{"a cap on any GPU class", Launch{Team: "data", Class: "A100-80GB", GPUs: 8}, all, "onprem-a100", "",
			map[string]string{"cloud-east": "team data's cap here is 1 A100-80GB GPUs: 0 in use, 8 asked"}},
		{"CPU-only, residency holds", Launch{Team: "health", Class: gpu.CPUClass, Cores: 20}, all, "onprem-a100",
			"waiting for onprem-a100 (no cluster has 20 cores of CPU nodes free now): $0.02/core-h (reserved); 16 cores free",
			map[string]string{"cloud-east": "team health requires residency=onprem; the cluster has residency=cloud"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := f.Place(tc.l, tc.states)
			if d.Cluster() != tc.want {
				t.Fatalf("placed on %q, want %q: %s", d.Cluster(), tc.want, d.Reason)
			}
			if tc.reason != "" && d.Reason != tc.reason {
				t.Errorf("reason\n %q\nwant\n %q", d.Reason, tc.reason)
			}
			got := map[string]string{}
			for _, r := range d.Refused {
				got[r.Cluster] = r.Why
			}
			for c, why := range tc.refused {
				if c == "onprem-a100" && tc.name == "residency is a hard rule" {
					// onprem has the label but no H100s.
					why = "offers no H100-80GB"
				}
				if got[c] != why {
					t.Errorf("%s refused for %q, want %q", c, got[c], why)
				}
			}
			if tc.want == "" && d.Reason[:len("no cluster may run it")] != "no cluster may run it" {
				t.Errorf("reason %q", d.Reason)
			}
		})
	}
	// A cordoned cluster gets nothing new.
	c, err := testFleet(t).With(map[string]Change{"onprem-a100": {Cordoned: true}})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Place(Launch{Team: "vision", Class: "A100-80GB", GPUs: 1}, all); d.Cluster() != "cloud-east" || d.Refused[0].Why != "cordoned: no new work" {
		t.Errorf("cordoned: %s %+v", d.Cluster(), d.Refused)
	}
	// A drained one is cordoned too, and says it drains; the others do not.
	c, err = testFleet(t).With(map[string]Change{"onprem-a100": {Drain: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range c.Clusters() {
		if drained := cl.Name == "onprem-a100"; cl.Draining != drained || cl.Cordoned != drained {
			t.Errorf("%s: draining %v, cordoned %v", cl.Name, cl.Draining, cl.Cordoned)
		}
	}
	if d := c.Place(Launch{Team: "vision", Class: "A100-80GB", GPUs: 1}, all); d.Cluster() != "cloud-east" {
		t.Errorf("drained: %s %+v", d.Cluster(), d.Refused)
	}
}

// TestImageAllowed: an image's repository must be a listed one or under
// it, at a path boundary, with Docker Hub's short names read in full.
func TestImageAllowed(t *testing.T) {
	f, err := New(File{APIVersion: APIVersion, Kind: Kind, Clusters: []Cluster{
		{Name: "any", Region: "r", Provider: Cloud, Kubeconfig: Kubeconfig{File: "k"}, Offers: []Offer{{Class: "L4", Purchase: nodegroup.Spot, PricePerGPUHour: 1}}},
		{Name: "mirror", Region: "r", Provider: OnPremises, Kubeconfig: Kubeconfig{File: "k"}, Offers: []Offer{{Class: "L4", Purchase: nodegroup.Spot, PricePerGPUHour: 1}},
			Images: []string{"Registry.Gantry.Internal/nvidia", "localhost:5000", "docker.io/library", "docker.io/acme"}},
	}}, classes(t))
	if err != nil {
		t.Fatal(err)
	}
	anyc, _ := f.Get("any")
	mirror, _ := f.Get("mirror")
	if got := mirror.Images; strings.Join(got, " ") != "registry.gantry.internal/nvidia localhost:5000 index.docker.io/library index.docker.io/acme" {
		t.Errorf("sources read as %q", got)
	}
	for _, tc := range []struct {
		image string
		want  bool
	}{
		{"registry.gantry.internal/nvidia/cuda:12.8", true},
		{"registry.gantry.internal/nvidia@sha256:" + strings.Repeat("a", 64), true},
		{"registry.gantry.internal/nvidia-private/cuda:1", false}, // a prefix, not a parent
		{"registry.gantry.internal/library/busybox:1.35", false},
		{"localhost:5000/x/y:1", true},
		{"localhost:5001/x:1", false},
		{"python:3.12", true},                            // index.docker.io/library/python
		{"REGISTRY.gantry.internal/nvidia/cuda:1", true}, // a registry's name in any case
		{"acme/train:2", true},                           // index.docker.io/acme/train
		{"docker.io/other/train:2", false},
		{"ghcr.io/acme/train", false},
		{"Not An Image", false}, // what cannot be read is not allowed
	} {
		if got := mirror.ImageAllowed(tc.image); got != tc.want {
			t.Errorf("%s: allowed %v, want %v", tc.image, got, tc.want)
		}
		if !anyc.ImageAllowed(tc.image) {
			t.Errorf("%s refused by a cluster that lists no sources", tc.image)
		}
	}
}

// TestRound: a round dispatches by priority, then age, each launch taking
// what it fits into, so the next sees what is left.
func TestRound(t *testing.T) {
	f := testFleet(t)
	states := map[string]State{
		"onprem-a100": up(map[string]float64{"A100-80GB": 8}),
		"cloud-east":  up(map[string]float64{"A100-80GB": 16}),
		"cloud-eu":    up(nil),
	}
	ds := f.Round([]Launch{
		{ID: "old-low", Team: "vision", Class: "A100-80GB", GPUs: 8, Priority: 0, Order: 1},
		{ID: "new-high", Team: "vision", Class: "A100-80GB", GPUs: 8, Priority: 10, Order: 2},
		{ID: "older-low", Team: "vision", Class: "A100-80GB", GPUs: 8, Priority: 0, Order: 0},
	}, states)
	got := ""
	for _, d := range ds {
		got += d.Launch.ID + "→" + d.Cluster() + " "
	}
	if want := "new-high→onprem-a100 older-low→cloud-east old-low→cloud-east "; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if states["onprem-a100"].Free["A100-80GB"] != 8 {
		t.Error("the round changed its caller's states")
	}
	// CPU-only launches take cores: the second no longer fits the room.
	states["onprem-a100"] = up(map[string]float64{gpu.CPUClass: 16})
	states["cloud-east"] = up(map[string]float64{gpu.CPUClass: 16})
	ds = f.Round([]Launch{
		{ID: "a", Team: "nlp", Class: gpu.CPUClass, Cores: 10, Order: 1},
		{ID: "b", Team: "vision", Class: gpu.CPUClass, Cores: 10, Order: 2},
		{ID: "c", Team: "nlp", Class: gpu.CPUClass, Cores: 3, Order: 3},
		{ID: "d", Team: "nlp", Class: gpu.CPUClass, Cores: 4, Order: 4},
		{ID: "e", Team: "nlp", Class: gpu.CPUClass, Cores: 4, Order: 5},
	}, states)
	got = ""
	for _, d := range ds {
		got += d.Launch.ID + "→" + d.Cluster() + " "
	}
	// c fits the 6 cores the room has left; d not the 3 left then, but the
	// cloud, within nlp's cap of 4 cores there; e neither the room nor the
	// cloud, where nlp's cap is used up: it waits for the room.
	if want := "a→onprem-a100 b→cloud-east c→onprem-a100 d→cloud-east e→onprem-a100 "; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if r := ds[4].Reason; r != "waiting for onprem-a100 (no cluster has 4 cores of CPU nodes free now): $0.02/core-h (reserved); 3 cores free" ||
		ds[4].Refused[0].Why != "team nlp's cap here is 4 cores: 4 in use, 4 asked" {
		t.Errorf("e: %s (%+v)", r, ds[4].Refused)
	}
	if d := ds[3]; math.Abs(d.Candidates[0].PricePerHour-0.18) > 1e-9 {
		t.Errorf("d at $%v/h, want 4 cores at $0.045", d.Candidates[0].PricePerHour)
	}
}

// TestRoundReplay: random launches over three clusters with different
// prices, free GPUs, residency and caps; every decision is checked against
// a brute force over the same state: the chosen cluster breaks no rule, and
// is the cheapest of those where the launch fits now (when any does).
func TestRoundReplay(t *testing.T) {
	f := testFleet(t)
	rng := rand.New(rand.NewPCG(1, 2))
	teams := []string{"vision", "health", "ads", "nlp"}
	cls := []string{"A100-80GB", "H100-80GB", "L4"}
	placed, cheapest := 0, 0
	for round := range 200 {
		states := map[string]State{}
		for _, c := range f.Clusters() {
			free := map[string]float64{}
			for _, o := range c.Offers {
				free[o.Class] = float64(rng.IntN(17))
			}
			states[c.Name] = State{Reachable: rng.IntN(10) > 0, Why: "down", Free: free}
		}
		var ls []Launch
		for i := range 5 {
			ls = append(ls, Launch{ID: fmt.Sprint(round, i), Team: teams[rng.IntN(4)], Class: cls[rng.IntN(3)], GPUs: float64(1 + rng.IntN(8)), Spot: rng.IntN(2) == 0, Priority: rng.IntN(3), Order: int64(i)})
		}
		left := map[string]State{}
		for k, v := range states {
			fr := map[string]float64{}
			for c, n := range v.Free {
				fr[c] = n
			}
			v.Free = fr
			left[k] = v
		}
		for _, d := range f.Round(ls, states) {
			l := d.Launch
			var fits []Candidate
			for _, c := range f.Place(l, left).Candidates {
				if c.FitsNow {
					fits = append(fits, c)
				}
			}
			sort.SliceStable(fits, func(i, j int) bool { return fits[i].Offer.PricePerGPUHour < fits[j].Offer.PricePerGPUHour })
			chosen := d.Cluster()
			if chosen == "" {
				if len(fits) > 0 {
					t.Fatalf("%+v: nowhere, but fits %v", l, fits)
				}
				continue
			}
			c, _ := f.Get(chosen)
			if r := f.TeamRules(l.Team); r.Require["residency"] != "" && c.Labels["residency"] != r.Require["residency"] {
				t.Fatalf("%+v on %s: residency broken", l, chosen)
			}
			if !left[chosen].Reachable {
				t.Fatalf("%+v on unreachable %s", l, chosen)
			}
			if len(fits) > 0 {
				placed++
				if fits[0].Offer.PricePerGPUHour == d.Candidates[0].Offer.PricePerGPUHour {
					cheapest++
				}
				left[chosen].Free[l.Class] -= l.GPUs
			}
			s := left[chosen]
			if s.Used == nil {
				s.Used = map[string]map[string]float64{}
			}
			if s.Used[l.Team] == nil {
				s.Used[l.Team] = map[string]float64{}
			}
			s.Used[l.Team][l.Class] += l.GPUs
			left[chosen] = s
		}
	}
	if placed == 0 || cheapest != placed {
		t.Fatalf("%d of %d placed on the cheapest cluster where they fit", cheapest, placed)
	}
}

// BenchmarkPlace20: one decision over 20 worker clusters.
func BenchmarkPlace20(b *testing.B) {
	f, states := twenty(b)
	l := Launch{Team: "vision", Class: "H100-80GB", GPUs: 8, Spot: true, Images: benchImages}
	b.ReportAllocs()
	for b.Loop() {
		f.Place(l, states)
	}
}

// twenty is a fleet of 20 clusters (half of them on-premises by label)
// and what each has free.
func twenty(t testing.TB) (*Fleet, map[string]State) {
	var cs []Cluster
	states := map[string]State{}
	for i := range 20 {
		name := fmt.Sprintf("c%02d", i)
		cs = append(cs, Cluster{Name: name, Region: "r", Provider: Cloud, Kubeconfig: Kubeconfig{File: "k"}, Labels: map[string]string{"residency": []string{"onprem", "cloud"}[i%2]},
			Offers: []Offer{{Class: "H100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 6 + float64(i)/10}, {Class: "H100-80GB", Purchase: nodegroup.Spot, PricePerGPUHour: 4 + float64(i)/10},
				{Class: "A100-80GB", Purchase: nodegroup.Reserved, PricePerGPUHour: 1 + float64(i)/10}}})
		if i%2 == 0 { // the on-premises half pulls from the company's mirror only
			cs[i].Images = []string{"registry.gantry.internal", "ghcr.io/acme"}
		}
		states[name] = up(map[string]float64{"H100-80GB": float64(i % 9), "A100-80GB": 8})
	}
	f, err := New(File{APIVersion: APIVersion, Kind: Kind, Clusters: cs}, classes(t))
	if err != nil {
		t.Fatal(err)
	}
	return f, states
}

// benchImages are a launch's in the benchmarks: its main container's and
// an init container's, pinned by digest as Gantry renders them.
var benchImages = []string{"registry.gantry.internal/pytorch/train@sha256:" + strings.Repeat("a", 64), "registry.gantry.internal/library/busybox:1.35"}

// BenchmarkRound20: a dispatch round of 100 launches over 20 clusters.
func BenchmarkRound20(b *testing.B) {
	f, states := twenty(b)
	var ls []Launch
	for i := range 100 {
		ls = append(ls, Launch{ID: fmt.Sprint(i), Team: "vision", Class: []string{"H100-80GB", "A100-80GB"}[i%2], GPUs: float64(1 + i%8), Spot: i%3 == 0, Order: int64(i), Images: benchImages})
	}
	b.ReportAllocs()
	for b.Loop() {
		f.Round(ls, states)
	}
}

// TestHoldAndAvoid: a launch held on a cluster stays there while it may run
// there, even when another is cheaper now, and says so; a held cluster
// that refuses it is passed over; clusters tried in vain come last.
func TestHoldAndAvoid(t *testing.T) {
	f := testFleet(t)
	all := map[string]State{
		"onprem-a100": up(map[string]float64{"A100-80GB": 8}),
		"cloud-east":  up(map[string]float64{"A100-80GB": 8}),
		"cloud-eu":    up(nil),
	}
	l := Launch{Team: "vision", Class: "A100-80GB", GPUs: 4, Hold: "cloud-east"}
	if d := f.Place(l, all); d.Cluster() != "cloud-east" || d.Reason != "kept on cloud-east, where it was nominated: $3.20/GPU-h vs $1.10 on onprem-a100; 8 GPUs free" {
		t.Errorf("held: %s: %s", d.Cluster(), d.Reason)
	}
	l.Hold = "onprem-a100"
	if d := f.Place(l, all); d.Cluster() != "onprem-a100" || d.Reason != "placed on onprem-a100: $1.10/GPU-h (reserved) vs $3.20 on cloud-east; 8 GPUs free" {
		t.Errorf("held where merit puts it: %s: %s", d.Cluster(), d.Reason)
	}
	l.Hold = "onprem-a100"
	all["onprem-a100"] = State{Why: "down"}
	if d := f.Place(l, all); d.Cluster() != "cloud-east" {
		t.Errorf("held on a cluster out of reach: %s", d.Cluster())
	}
	all["onprem-a100"] = up(map[string]float64{"A100-80GB": 8})
	l = Launch{Team: "vision", Class: "A100-80GB", GPUs: 4, Avoid: []string{"onprem-a100"}}
	if d := f.Place(l, all); d.Cluster() != "cloud-east" || d.Candidates[1].Cluster != "onprem-a100" {
		t.Errorf("avoided: %s, then %+v", d.Cluster(), d.Candidates)
	}
}

// TestPlanned: the cluster a flexible launch was planned on goes first
// while it can start it as soon as the best can, and says so; full while
// another has room, it does not hold the launch back; a nomination held
// still comes first.
func TestPlanned(t *testing.T) {
	f := testFleet(t)
	all := map[string]State{
		"onprem-a100": up(map[string]float64{"A100-80GB": 8}),
		"cloud-east":  up(map[string]float64{"A100-80GB": 8}),
		"cloud-eu":    up(nil),
	}
	l := Launch{Team: "vision", Class: "A100-80GB", GPUs: 4, Planned: "cloud-east"}
	if d := f.Place(l, all); d.Cluster() != "cloud-east" || d.Reason != "placed on cloud-east, where its start was planned for cleaner power: $3.20/GPU-h vs $1.10 on onprem-a100; 8 GPUs free" {
		t.Errorf("planned: %s: %s", d.Cluster(), d.Reason)
	}
	all["cloud-east"] = up(map[string]float64{"A100-80GB": 2})
	if d := f.Place(l, all); d.Cluster() != "onprem-a100" {
		t.Errorf("planned but full: %s: %s", d.Cluster(), d.Reason)
	}
	all["onprem-a100"] = up(map[string]float64{"A100-80GB": 2})
	if d := f.Place(l, all); d.Cluster() != "cloud-east" || !strings.HasPrefix(d.Reason, "waiting for cloud-east") {
		t.Errorf("none fits: waits where planned: %s: %s", d.Cluster(), d.Reason)
	}
	all["cloud-east"], all["onprem-a100"] = up(map[string]float64{"A100-80GB": 8}), up(map[string]float64{"A100-80GB": 8})
	l.Hold = "onprem-a100"
	if d := f.Place(l, all); d.Cluster() != "onprem-a100" {
		t.Errorf("held beats planned: %s: %s", d.Cluster(), d.Reason)
	}
	// Where only a cluster tried in vain fits now, the planned one, full,
	// does not jump a cheaper full one.
	three, err := New(File{APIVersion: APIVersion, Kind: Kind, Clusters: []Cluster{
		{Name: "a", Region: "r", Provider: Cloud, Kubeconfig: Kubeconfig{Secret: "a"}, Offers: []Offer{{Class: "A100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 1}}},
		{Name: "b", Region: "r", Provider: Cloud, Kubeconfig: Kubeconfig{Secret: "b"}, Offers: []Offer{{Class: "A100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 2}}},
		{Name: "c", Region: "r", Provider: Cloud, Kubeconfig: Kubeconfig{Secret: "c"}, Offers: []Offer{{Class: "A100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 3}}},
	}}, classes(t))
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]State{"a": up(map[string]float64{"A100-80GB": 8}), "b": up(nil), "c": up(nil)}
	if d := three.Place(Launch{Team: "vision", Class: "A100-80GB", GPUs: 4, Avoid: []string{"a"}, Planned: "c"}, states); d.Cluster() != "b" {
		t.Errorf("planned and full behind a cheaper full one: %s (%+v)", d.Cluster(), d.Candidates)
	}
}

// TestSites: the clusters a launch may be planned on are those every rule
// allows but the moment's (Sites reads no state: reachable or full now
// does not count); cordoned, refused by a team's or a template's rule,
// without the class, without the image, or under a cap smaller than the
// launch, not.
func TestSites(t *testing.T) {
	f := testFleet(t)
	names := func(ss []Site) string {
		var out []string
		for _, s := range ss {
			out = append(out, fmt.Sprintf("%s@%s $%g", s.Cluster, s.Region, s.Offer.PricePerGPUHour))
		}
		return strings.Join(out, ", ")
	}
	for _, tc := range []struct {
		name string
		f    *Fleet
		l    Launch
		want string
	}{
		{"every cluster with the class", f, Launch{Team: "vision", Class: "H100-80GB", GPUs: 8}, "cloud-east@us-east-1 $6.9, cloud-eu@eu-west-1 $7.4"},
		{"spot where allowed", f, Launch{Team: "vision", Class: "H100-80GB", GPUs: 8, Spot: true}, "cloud-east@us-east-1 $4.5, cloud-eu@eu-west-1 $7.4"},
		{"a team's forbidden cluster", f, Launch{Team: "ads", Class: "H100-80GB", GPUs: 1}, "cloud-eu@eu-west-1 $7.4"},
		{"a template's pins", f, Launch{Team: "vision", Template: "eu-only", Class: "A100-80GB", GPUs: 1}, "onprem-a100@eu-central $1.1"},
		{"residency", f, Launch{Team: "health", Class: "A100-80GB", GPUs: 1}, "onprem-a100@eu-central $1.1"},
		{"a cap smaller than the launch", f, Launch{Team: "nlp", Class: "H100-80GB", GPUs: 16}, "cloud-eu@eu-west-1 $7.4"},
		{"an image the cluster may not run", f, Launch{Team: "vision", Class: "H100-80GB", GPUs: 1, Images: []string{"ghcr.io/acme/train:1"}}, "cloud-east@us-east-1 $6.9"},
		{"cordoned", must(f.With(map[string]Change{"cloud-east": {Cordoned: true}})), Launch{Team: "vision", Class: "H100-80GB", GPUs: 1}, "cloud-eu@eu-west-1 $7.4"},
		{"none", f, Launch{Team: "vision", Class: "T4", GPUs: 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(tc.f.Sites(tc.l)); got != tc.want {
				t.Errorf("sites %q, want %q", got, tc.want)
			}
		})
	}
}

func must(f *Fleet, err error) *Fleet {
	if err != nil {
		panic(err)
	}
	return f
}

// TestHome: a launch whose volumes are on a cluster runs there alone, even
// where another is cheaper, and waits, saying why, while its home cannot
// take it; a home no longer in the fleet binds nothing.
func TestHome(t *testing.T) {
	f := testFleet(t)
	all := map[string]State{
		"onprem-a100": up(map[string]float64{"A100-80GB": 8}),
		"cloud-east":  up(map[string]float64{"A100-80GB": 8}),
		"cloud-eu":    up(nil),
	}
	l := Launch{Team: "vision", Class: "A100-80GB", GPUs: 1, Home: "cloud-east"}
	if d := f.Place(l, all); d.Cluster() != "cloud-east" || len(d.Candidates) != 1 {
		t.Errorf("at home: %s (%+v): %s", d.Cluster(), d.Candidates, d.Reason)
	}
	f, err := f.With(map[string]Change{"cloud-east": {Cordoned: true}})
	if err != nil {
		t.Fatal(err)
	}
	if d := f.Place(l, all); d.Cluster() != "" || !strings.Contains(d.Reason, "onprem-a100: its volumes are on cloud-east, where alone it runs") ||
		!strings.Contains(d.Reason, "cloud-east: cordoned") {
		t.Errorf("home cordoned: %s: %s", d.Cluster(), d.Reason)
	}
	l.Home = "retired"
	if d := f.Place(l, all); d.Cluster() != "onprem-a100" {
		t.Errorf("a home gone from the fleet: %s: %s", d.Cluster(), d.Reason)
	}
}

// TestPlaceMIG: a MIG launch fits where instances of its profile are free,
// whatever whole GPUs are; a round takes the instances it places from
// what the next launch sees.
func TestPlaceMIG(t *testing.T) {
	f, err := New(File{APIVersion: APIVersion, Kind: Kind,
		Clusters: []Cluster{
			{Name: "onprem", Region: "eu", Provider: OnPremises, Kubeconfig: Kubeconfig{Secret: "a"},
				Offers: []Offer{{Class: "A100-80GB", Purchase: nodegroup.Reserved, PricePerGPUHour: 1.1, MIG: []string{"1g.10gb", "3g.40gb"}}}},
			{Name: "cloud", Region: "us", Provider: Cloud, Kubeconfig: Kubeconfig{Secret: "b"},
				Offers: []Offer{{Class: "A100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 3.2, MIG: []string{"1g.10gb"}}}},
		}}, classes(t))
	if err != nil {
		t.Fatal(err)
	}
	mig := func(whole float64, slices map[string]float64) State {
		return State{Reachable: true, Free: map[string]float64{"A100-80GB": whole}, FreeMIG: map[string]map[string]float64{"A100-80GB": slices}}
	}
	one := Launch{Team: "vision", Class: "A100-80GB", MIG: "1g.10gb", Slices: 1, GPUs: 1.0 / 7}
	for _, tc := range []struct {
		name   string
		l      Launch
		states map[string]State
		want   string
	}{
		{"whole GPUs free, no slices: the next", one, map[string]State{"onprem": mig(6, map[string]float64{"1g.10gb": 0}), "cloud": mig(0, map[string]float64{"1g.10gb": 3})},
			"placed on cloud: $3.20/GPU-h vs $1.10 on onprem (full); 3 1g.10gb slices free"},
		{"slices free at the cheapest", one, map[string]State{"onprem": mig(0, map[string]float64{"1g.10gb": 2}), "cloud": mig(8, map[string]float64{"1g.10gb": 3})},
			"placed on onprem: $1.10/GPU-h (reserved) vs $3.20 on cloud; 2 1g.10gb slices free"},
		{"asks more instances than any has", Launch{Team: "vision", Class: "A100-80GB", MIG: "1g.10gb", Slices: 4, GPUs: 4.0 / 7},
			map[string]State{"onprem": mig(0, map[string]float64{"1g.10gb": 2}), "cloud": mig(0, map[string]float64{"1g.10gb": 3})},
			"waiting for onprem (no cluster has 4 A100-80GB 1g.10gb slices free now): $1.10/GPU-h (reserved) vs $3.20 on cloud; 2 1g.10gb slices free"},
		{"a profile only one offers", Launch{Team: "vision", Class: "A100-80GB", MIG: "3g.40gb", Slices: 1, GPUs: 3.0 / 7},
			map[string]State{"onprem": mig(0, map[string]float64{"3g.40gb": 1}), "cloud": mig(0, map[string]float64{"1g.10gb": 3})},
			"placed on onprem: $1.10/GPU-h (reserved); 1 3g.40gb slice free"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := f.Place(tc.l, tc.states); d.Reason != tc.want {
				t.Errorf("reason\n %q\nwant\n %q", d.Reason, tc.want)
			}
		})
	}
	states := map[string]State{"onprem": mig(0, map[string]float64{"1g.10gb": 2}), "cloud": mig(0, map[string]float64{"1g.10gb": 3})}
	if got, want := roundOf(f, one, 4, states), "0→onprem 1→onprem 2→cloud 3→cloud "; got != want {
		t.Errorf("round: %s, want %s", got, want)
	}
	if states["onprem"].FreeMIG["A100-80GB"]["1g.10gb"] != 2 {
		t.Error("the round changed its caller's states")
	}
}

// TestCarbonWeight: with a carbon price, each cluster's GPU-hour gains its
// emissions there now at that price — the class's watts × the site's PUE
// × its grid's intensity — so a cleaner cluster wins what a slightly
// cheaper dirty one would, the reason says both parts, and a cluster whose
// intensity is not known is weighed by price alone. Without a carbon price
// intensity changes nothing.
func TestCarbonWeight(t *testing.T) {
	file := func(price float64) File {
		return File{APIVersion: APIVersion, Kind: Kind, CarbonPrice: price, Clusters: []Cluster{
			{Name: "coal", Region: "r1", Provider: Cloud, Kubeconfig: Kubeconfig{Secret: "a"}, PUE: 1.5,
				Offers: []Offer{{Class: "H100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 6.80}}},
			{Name: "hydro", Region: "r2", Provider: Cloud, Kubeconfig: Kubeconfig{Secret: "b"}, PUE: 1.1,
				Offers: []Offer{{Class: "H100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 6.90}}},
		}}
	}
	states := func(coal, hydro float64) map[string]State {
		return map[string]State{
			"coal":  {Reachable: true, Free: map[string]float64{"H100-80GB": 8}, Intensity: coal},
			"hydro": {Reachable: true, Free: map[string]float64{"H100-80GB": 8}, Intensity: hydro},
		}
	}
	l := Launch{Team: "vision", Class: "H100-80GB", GPUs: 1}
	priced, err := New(file(0.2), classes(t))
	if err != nil {
		t.Fatal(err)
	}
	// coal: 0.7 kW × 1.5 × 800 g/kWh = 0.84 kg/h → $0.168; hydro: 0.7 ×
	// 1.1 × 30 = 0.0231 kg/h → $0.0046.
	d := priced.Place(l, states(800, 30))
	if d.Cluster() != "hydro" || math.Abs(d.Candidates[0].Carbon-0.00462) > 1e-6 || math.Abs(d.Candidates[1].Carbon-0.168) > 1e-9 {
		t.Fatalf("with carbon at $0.20/kg: %s %+v", d.Cluster(), d.Candidates)
	}
	if want := "placed on hydro: $6.90/GPU-h + $0.00 for carbon (30 gCO2e/kWh) vs $6.80 + $0.17 for carbon on coal; 8 GPUs free"; d.Reason != want {
		t.Errorf("reason:\n got %q\nwant %q", d.Reason, want)
	}
	// Cleaner coal, or no figure for it: price decides.
	if d := priced.Place(l, states(100, 30)); d.Cluster() != "coal" {
		t.Errorf("coal at 100 g/kWh (+$0.021): %s (%s)", d.Cluster(), d.Reason)
	}
	if d := priced.Place(l, states(0, 30)); d.Cluster() != "coal" || d.Candidates[0].Carbon != 0 {
		t.Errorf("coal's intensity unknown: %s (%s)", d.Cluster(), d.Reason)
	}
	// The PUE metering counts (State.PUE: the server's energy.pue for a
	// cluster that states none) is the one placement weighs: hydro at PUE 3
	// costs 0.7 × 3 × 30 = 0.063 kg/h → $0.0126.
	st := states(800, 30)
	h := st["hydro"]
	h.PUE = 3
	st["hydro"] = h
	if d := priced.Place(l, st); d.Cluster() != "hydro" || math.Abs(d.Candidates[0].Carbon-0.0126) > 1e-9 {
		t.Errorf("hydro at the PUE metering counts (3): %s %+v", d.Cluster(), d.Candidates)
	}
	unpriced, err := New(file(0), classes(t))
	if err != nil {
		t.Fatal(err)
	}
	if d := unpriced.Place(l, states(800, 30)); d.Cluster() != "coal" || d.Reason != "placed on coal: $6.80/GPU-h vs $6.90 on hydro; 8 GPUs free" {
		t.Errorf("no carbon price: %s (%s)", d.Cluster(), d.Reason)
	}
	// A carbon price needs every offered class's watts, and is bounded.
	f := file(0.2)
	f.Clusters[0].Offers = append(f.Clusters[0].Offers, Offer{Class: "L4", Purchase: nodegroup.OnDemand, PricePerGPUHour: 0.8})
	noWatts, err := gpu.Parse("c.yaml", []byte("apiVersion: gantry.dev/v1alpha1\nkind: GPUClassList\nclasses:\n"+
		"  - {name: H100-80GB, products: [NVIDIA-H100-80GB-HBM3], memoryGiB: 80, watts: 700, price: {onDemand: 6.9}}\n"+
		"  - {name: L4, products: [NVIDIA-L4], memoryGiB: 24, price: {onDemand: 0.8}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(f, noWatts); err == nil || !strings.Contains(err.Error(), "clusters[0].offers[1].class") || !strings.Contains(err.Error(), "L4 states no watts") {
		t.Errorf("a class without watts under a carbon price: %v", err)
	}
	if _, err := New(file(-1), classes(t)); err == nil || !strings.Contains(err.Error(), "carbonPrice") {
		t.Errorf("a negative carbon price: %v", err)
	}
}

// TestPlaceVM: a VM runs only where KubeVirt does, and fits where GPUs are
// free to pass through (State.FreeVM), not where GPUs for pods are; a
// round's VMs take from those.
func TestPlaceVM(t *testing.T) {
	f, err := New(File{APIVersion: APIVersion, Kind: Kind,
		Clusters: []Cluster{
			{Name: "onprem", Region: "eu", Provider: OnPremises, Kubeconfig: Kubeconfig{Secret: "a"},
				Offers: []Offer{{Class: "A100-80GB", Purchase: nodegroup.Reserved, PricePerGPUHour: 1.1}}},
			{Name: "cloud", Region: "us", Provider: Cloud, Kubeconfig: Kubeconfig{Secret: "b"},
				Offers: []Offer{{Class: "A100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 3.2}}},
		}}, classes(t))
	if err != nil {
		t.Fatal(err)
	}
	state := func(vms bool, pods, passthrough float64) State {
		s := State{Reachable: true, Free: map[string]float64{"A100-80GB": pods}, VMs: vms}
		if vms {
			s.FreeVM = map[string]float64{"A100-80GB": passthrough}
		}
		return s
	}
	vm := Launch{Team: "vision", Class: "A100-80GB", GPUs: 2, VM: true}
	for _, tc := range []struct {
		name   string
		l      Launch
		states map[string]State
		want   string
	}{
		{"no KubeVirt at the cheapest", vm, map[string]State{"onprem": state(false, 8, 0), "cloud": state(true, 0, 4)},
			"placed on cloud: $3.20/GPU-h; 4 GPUs free"},
		{"KubeVirt nowhere", vm, map[string]State{"onprem": state(false, 8, 0), "cloud": state(false, 8, 0)},
			"no cluster may run it (onprem: runs no VMs (it does not serve KubeVirt's VirtualMachines); cloud: runs no VMs (it does not serve KubeVirt's VirtualMachines))"},
		{"GPUs free for pods, none to pass through", vm, map[string]State{"onprem": state(true, 8, 0), "cloud": state(true, 0, 2)},
			"placed on cloud: $3.20/GPU-h vs $1.10 on onprem (full); 2 GPUs free"},
		{"a Job asks for GPUs for pods", Launch{Team: "vision", Class: "A100-80GB", GPUs: 2}, map[string]State{"onprem": state(false, 8, 0), "cloud": state(true, 0, 2)},
			"placed on onprem: $1.10/GPU-h (reserved) vs $3.20 on cloud (full); 8 GPUs free"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := f.Place(tc.l, tc.states); d.Reason != tc.want {
				t.Errorf("reason\n %q\nwant\n %q", d.Reason, tc.want)
			}
		})
	}
	states := map[string]State{"onprem": state(true, 8, 2), "cloud": state(true, 8, 4)}
	if got, want := roundOf(f, vm, 3, states), "0→onprem 1→cloud 2→cloud "; got != want {
		t.Errorf("round: %s, want %s", got, want)
	}
	if states["onprem"].FreeVM["A100-80GB"] != 2 {
		t.Error("the round changed its caller's states")
	}
}

// roundOf is where a round sends n launches like l, in their order
// ("0→onprem 1→cloud ").
func roundOf(f *Fleet, l Launch, n int, states map[string]State) string {
	var ls []Launch
	for i := range n {
		l.ID, l.Order = fmt.Sprint(i), int64(i)
		ls = append(ls, l)
	}
	got := ""
	for _, d := range f.Round(ls, states) {
		got += d.Launch.ID + "→" + d.Cluster() + " "
	}
	return got
}
