package dispatch

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// TestWaits: a Workload is dispatched once its quota is reserved and its
// other checks (Gantry's approval) are ready, while MultiKueue's waits and
// no worker runs it: MultiKueue runs a nominated Workload whatever the
// manager's other checks say.
func TestWaits(t *testing.T) {
	d := &Dispatcher{o: Options{Check: "gantry-fleet"}}
	wl := func(reserved bool, approval, fleet, cluster string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		status := "False"
		if reserved {
			status = "True"
		}
		unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "QuotaReserved", "status": status}}, "status", "conditions")
		var checks []any
		if approval != "" {
			checks = append(checks, map[string]any{"name": "gantry-approval", "state": approval})
		}
		checks = append(checks, map[string]any{"name": "gantry-fleet", "state": fleet})
		unstructured.SetNestedSlice(u.Object, checks, "status", "admissionChecks")
		if cluster != "" {
			unstructured.SetNestedField(u.Object, cluster, "status", "clusterName")
		}
		return u
	}
	for _, tc := range []struct {
		name string
		u    *unstructured.Unstructured
		want bool
	}{
		{"reserved and approved", wl(true, "Ready", "Pending", ""), true},
		{"no other check", wl(true, "", "Pending", ""), true},
		{"awaiting approval", wl(true, "Pending", "Pending", ""), false},
		{"approval refused", wl(true, "Rejected", "Pending", ""), false},
		{"no quota yet", wl(false, "Ready", "Pending", ""), false},
		{"running on a worker", wl(true, "Ready", "Ready", "onprem"), false},
		{"the check ready", wl(true, "Ready", "Ready", ""), false},
		{"deactivated (drained)", func() *unstructured.Unstructured {
			u := wl(true, "Ready", "Pending", "")
			unstructured.SetNestedField(u.Object, false, "spec", "active")
			return u
		}(), false},
		// Its worker lost: placed again while Kueue still holds its quota.
		{"evicted for its check, its quota not yet back", func() *unstructured.Unstructured {
			u := wl(true, "Ready", "Pending", "")
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			unstructured.SetNestedSlice(u.Object, append(conds, map[string]any{"type": "Evicted", "status": "True"}), "status", "conditions")
			return u
		}(), true},
	} {
		if got := d.waits(tc.u); got != tc.want {
			t.Errorf("%s: waits %v", tc.name, got)
		}
	}
}

// TestWithIntensity: a round reads each region's grid intensity once and
// gives it to every cluster there; a region the source has no figure for
// is 0 (carbon weighs nothing there), and a cluster with no state gets
// none.
func TestWithIntensity(t *testing.T) {
	classes, err := gpu.LoadFile("../../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	offer := []fleet.Offer{{Class: "H100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 6.9}}
	fl, err := fleet.New(fleet.File{APIVersion: fleet.APIVersion, Kind: fleet.Kind, CarbonPrice: 0.1, Clusters: []fleet.Cluster{
		{Name: "a", Region: "eu", Provider: fleet.Cloud, Kubeconfig: fleet.Kubeconfig{Secret: "a"}, Offers: offer},
		{Name: "b", Region: "eu", Provider: fleet.Cloud, Kubeconfig: fleet.Kubeconfig{Secret: "b"}, Offers: offer},
		{Name: "c", Region: "us", Provider: fleet.Cloud, Kubeconfig: fleet.Kubeconfig{Secret: "c"}, Offers: offer},
		{Name: "d", Region: "ap", Provider: fleet.Cloud, Kubeconfig: fleet.Kubeconfig{Secret: "d"}, Offers: offer},
	}}, classes)
	if err != nil {
		t.Fatal(err)
	}
	asked := map[string]int{}
	at := time.Date(2026, 12, 4, 10, 30, 0, 0, time.UTC)
	d := &Dispatcher{o: Options{Fleet: fl, Intensity: func(_ context.Context, region string, when time.Time) (float64, bool) {
		asked[region]++
		if !when.Equal(at) {
			t.Errorf("asked for %v, want %v", when, at)
		}
		v, ok := map[string]float64{"eu": 120, "us": 410}[region]
		return v, ok
	}, PUE: func(cluster string) float64 { return map[string]float64{"a": 1.4}[cluster] }}}
	in := map[string]fleet.State{"a": {Reachable: true}, "b": {Reachable: true}, "c": {Reachable: true}}
	out := d.withIntensity(context.Background(), in, at)
	if out["a"].Intensity != 120 || out["b"].Intensity != 120 || out["c"].Intensity != 410 || in["a"].Intensity != 0 || out["a"].PUE != 1.4 || out["b"].PUE != 0 {
		t.Fatalf("intensities %+v (the round's states left as they were: %+v)", out, in)
	}
	if _, ok := out["d"]; ok || asked["eu"] != 1 || asked["ap"] != 1 {
		t.Fatalf("a cluster with no state got one, or a region asked twice: %+v %v", out, asked)
	}
}
