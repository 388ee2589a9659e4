package devagent

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/telemetry"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func fleetNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	for _, n := range devcluster.Nodes(devcluster.Fleet) {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s in the fleet", name)
	return nil
}

// TestSimulatedGPUs: each node of gantry dev's fleet gets the GPUs its
// labels and capacity say: whole GPUs of the product's model and memory,
// MIG instances sized by profile and laid out as the MIG config would,
// none for passthrough GPUs; ids are UUID-shaped, unique and the same on
// every start.
func TestSimulatedGPUs(t *testing.T) {
	seen := map[string]string{}
	for _, n := range devcluster.Nodes(devcluster.Fleet) {
		s, err := newSimNode(n, nil, quiet)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if n.Labels["nvidia.com/cc.mode"] == "on" {
			if s != nil {
				t.Fatalf("%s: passthrough GPUs simulated", n.Name)
			}
			continue
		}
		inv, _ := s.node.Inventory(context.Background())
		again, _ := newSimNode(n, nil, quiet)
		inv2, _ := again.node.Inventory(context.Background())
		for i, g := range inv {
			if g.GPU != inv2[i].GPU || !strings.HasPrefix(g.GPU, "GPU-") || len(g.GPU) != len("GPU-")+36 {
				t.Fatalf("%s: GPU id %s, then %s", n.Name, g.GPU, inv2[i].GPU)
			}
			ids := []string{g.GPU}
			for _, m := range g.MIG {
				ids = append(ids, m.UUID)
			}
			for _, id := range ids {
				if o, dup := seen[id]; dup {
					t.Fatalf("%s and %s share the id %s", o, n.Name, id)
				}
				seen[id] = n.Name
			}
		}
		switch n.Name {
		case "h100-0":
			if len(inv) != 8 || len(s.whole) != 8 || inv[0].Model != "NVIDIA H100 80GB HBM3" || inv[0].MemoryMiB != 81559 || inv[0].MIGEnabled {
				t.Fatalf("h100-0: %+v", inv)
			}
		case "l4-0":
			if len(inv) != 4 || inv[3].Index != 3 || inv[0].MemoryMiB != 23034 || len(inv[0].Unsupported) != 1 {
				t.Fatalf("l4-0 (no GPM): %+v", inv)
			}
		case "h100-mig-0":
			// all-balanced on 4 H100s: 2 × 1g.10gb, 1 × 2g.20gb, 1 × 3g.40gb each.
			if len(inv) != 4 || len(s.whole) != 0 || len(s.mig["1g.10gb"]) != 8 || len(s.mig["2g.20gb"]) != 4 || len(s.mig["3g.40gb"]) != 4 {
				t.Fatalf("h100-mig-0: %d GPUs, %d whole, MIG %v", len(inv), len(s.whole), s.mig)
			}
			mem := map[string]float64{}
			for _, d := range s.node.Devices() {
				if d.MIG != nil {
					mem[d.MIG.Profile] = d.MemoryMiB
				}
			}
			if mem["1g.10gb"] != 10194 || mem["2g.20gb"] != 20389 || mem["3g.40gb"] != 40779 {
				t.Fatalf("MIG memory by profile: %v", mem)
			}
			for _, g := range inv {
				slices := 0
				for _, m := range g.MIG {
					slices += int(m.Profile[0] - '0')
				}
				if !g.MIGEnabled || len(g.MIG) != 4 || slices != 7 {
					t.Fatalf("GPU %d: %+v", g.Index, g.MIG)
				}
			}
		}
	}
}

// pods is a PodLister over a fixed set of pods.
func pods(t *testing.T, ps ...*corev1.Pod) listersv1.PodLister {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range ps {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return listersv1.NewPodLister(idx)
}

var created = metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))

func pod(name, uid, node string, phase corev1.PodPhase, profile string, limits ...map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid), CreationTimestamp: created, Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase, StartTime: &created},
	}
	if profile != "" {
		p.Annotations[ProfileAnnotation] = profile
	}
	for i, l := range limits {
		c := corev1.Container{Name: []string{"main", "sidecar"}[i], Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
		for r, q := range l {
			c.Resources.Limits[corev1.ResourceName(r)] = resource.MustParse(q)
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

// holders is who the node's PodResources stand-in says holds each device.
func holders(t *testing.T, s *simNode) map[string]string {
	t.Helper()
	s.sync()
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pd := range list {
		for res, ids := range pd.Resources {
			for _, id := range ids {
				if o, dup := out[id]; dup {
					t.Fatalf("%s held by %s and %s", id, o, pd.Pod.Name)
				}
				out[id] = pd.Pod.Name + "/" + pd.Pod.Container + " " + res
			}
		}
	}
	return out
}

// TestAssignment: running pods on the node get free devices of the kind
// they ask for, per container, the oldest (then lowest UID) first; the same
// pods get the same devices on every start; pods elsewhere, not running,
// or asking for more than is free get none; a deleted pod's devices go
// idle and to the next pod; a changed annotation changes the profile.
func TestAssignment(t *testing.T) {
	n := fleetNode(t, "h100-mig-0")
	one := map[string]string{"nvidia.com/mig-1g.10gb": "1"}
	three := map[string]string{"nvidia.com/mig-3g.40gb": "3", "cpu": "2"}
	all := []*corev1.Pod{
		pod("b", "uid-2", n.Name, corev1.PodRunning, "near-oom", one),
		pod("a", "uid-1", n.Name, corev1.PodRunning, "idle", one, map[string]string{"nvidia.com/mig-2g.20gb": "1"}),
		pod("elsewhere", "uid-3", "h100-0", corev1.PodRunning, "", one),
		pod("pending", "uid-4", n.Name, corev1.PodPending, "", one),
		pod("cpu-only", "uid-5", n.Name, corev1.PodRunning, "", map[string]string{"cpu": "1"}),
		pod("big", "uid-6", n.Name, corev1.PodRunning, "", three),
		pod("toobig", "uid-7", n.Name, corev1.PodRunning, "", map[string]string{"nvidia.com/mig-3g.40gb": "2"}),
	}
	s, err := newSimNode(n, pods(t, all...), quiet)
	if err != nil {
		t.Fatal(err)
	}
	got := holders(t, s)
	want := map[string]string{
		s.mig["1g.10gb"][0]: "a/main nvidia.com/mig-1g.10gb",
		s.mig["2g.20gb"][0]: "a/sidecar nvidia.com/mig-2g.20gb",
		s.mig["1g.10gb"][1]: "b/main nvidia.com/mig-1g.10gb",
		s.mig["3g.40gb"][0]: "big/main nvidia.com/mig-3g.40gb",
		s.mig["3g.40gb"][1]: "big/main nvidia.com/mig-3g.40gb",
		s.mig["3g.40gb"][2]: "big/main nvidia.com/mig-3g.40gb",
	}
	if len(got) != len(want) {
		t.Fatalf("holders %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("%s held by %q, want %q (all: %v)", id, got[id], w, got)
		}
	}
	// The same pods, listed in another order, on a restarted agent.
	rev := append([]*corev1.Pod(nil), all...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	s2, _ := newSimNode(n, pods(t, rev...), quiet)
	if got2 := holders(t, s2); len(got2) != len(got) {
		t.Fatalf("after a restart: %v, before %v", got2, got)
	} else {
		for id := range got {
			if got2[id] != got[id] {
				t.Fatalf("after a restart %s is held by %q, before by %q", id, got2[id], got[id])
			}
		}
	}
	// Each device plays its pod's profile.
	now := created.Add(time.Hour)
	values := func(s *simNode) map[string]telemetry.Values {
		ss, _ := s.Sample(context.Background(), now)
		out := map[string]telemetry.Values{}
		for _, d := range ss {
			out[d.Device.ID()] = d.Values
		}
		return out
	}
	v := values(s)
	b := v[s.mig["1g.10gb"][1]]
	if b[telemetry.FBUsed]/b[telemetry.FBTotal] < 0.95 || b[telemetry.FBTotal] != 10194 {
		t.Fatalf("b plays near-oom on a 1g.10gb: %v", b)
	}
	if a := v[s.mig["2g.20gb"][0]]; a[telemetry.SMActive] != 0 || a[telemetry.FBUsed] == 0 {
		t.Fatalf("a plays idle (memory held, no activity): %v", a)
	}
	// b is deleted, toobig now fits nowhere still, a new pod takes b's slice;
	// a's annotation changes.
	a := all[1].DeepCopy()
	a.Annotations[ProfileAnnotation] = "compute-bound"
	c := pod("c", "uid-8", n.Name, corev1.PodRunning, "", one)
	c.CreationTimestamp = metav1.NewTime(created.Add(time.Minute))
	s.pods = pods(t, a, all[5], all[6], c)
	got = holders(t, s)
	if got[s.mig["1g.10gb"][1]] != "c/main nvidia.com/mig-1g.10gb" || got[s.mig["1g.10gb"][0]] != "a/main nvidia.com/mig-1g.10gb" || len(got) != 6 {
		t.Fatalf("after b went: %v", got)
	}
	v = values(s)
	if x := v[s.mig["2g.20gb"][0]]; x[telemetry.SMActive] < 0.85 {
		t.Fatalf("a's new profile (compute-bound) not played: %v", x)
	}
	s.pods = pods(t)
	if got = holders(t, s); len(got) != 0 {
		t.Fatalf("no pods, yet %v", got)
	}
	for id, x := range values(s) {
		if x[telemetry.FBUsed] != 0 || x[telemetry.GPUUtil] != 0 {
			t.Fatalf("%s idle but %v", id, x)
		}
	}
}

var _ agent.PodResources = (*simNode)(nil)
var _ agent.GPUs = (*simNode)(nil)
