package dispatch

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
