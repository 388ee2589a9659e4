package kueue

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// kw is a Kueue Workload in namespace ns of LocalQueue gantry.
func kw(name string, prio int64, created time.Time, active bool, conds ...map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "x-k8s.io/v1beta2", "kind": "Workload",
		"metadata": map[string]any{"name": name, "namespace": "ns"},
		"spec":     map[string]any{"queueName": "gantry", "priority": prio, "active": active},
	}}
	u.SetCreationTimestamp(metav1.NewTime(created))
	var cs []any
	for _, c := range conds {
		cs = append(cs, c)
	}
	unstructured.SetNestedSlice(u.Object, cs, "status", "conditions")
	return u
}

func cond(typ, status string, at time.Time, msg string) map[string]any {
	return map[string]any{"type": typ, "status": status, "lastTransitionTime": at.UTC().Format(time.RFC3339), "message": msg}
}

// TestQueuePosition: the waiting Workloads of a queue, by priority, then by
// when each joined (made, or evicted and requeued); admitted, finished and
// deactivated ones do not wait.
func TestQueuePosition(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	pending := cond("QuotaReserved", "False", t0, "couldn't assign flavors: insufficient unused quota")
	all := []*unstructured.Unstructured{
		kw("old", 10, t0, true, pending),
		kw("new", 10, t0.Add(time.Minute), true, pending),
		kw("urgent", 100, t0.Add(2*time.Minute), true, pending),
		kw("requeued", 10, t0.Add(-time.Hour), true, pending, cond("Evicted", "True", t0.Add(3*time.Minute), "deactivated")),
		kw("Admitted", 10, t0.Add(-time.Hour), true, cond("QuotaReserved", "True", t0, "")),
		kw("done", 10, t0.Add(-time.Hour), true, cond("Finished", "True", t0, "")),
		kw("stopped", 10, t0.Add(-time.Hour), false, pending),
	}
	var objs []any
	for _, u := range all {
		objs = append(objs, u)
	}
	want := map[string]int{"urgent": 1, "old": 2, "new": 3, "requeued": 4, "Admitted": 0, "done": 0, "stopped": 0}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{ByQueue: QueueIndex})
	for _, u := range all {
		if err := idx.Add(u); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range all {
		waiting, reason := Waiting(u)
		if waiting != (want[u.GetName()] > 0) {
			t.Errorf("%s: waiting %v", u.GetName(), waiting)
		}
		if !waiting {
			continue
		}
		if got := Positions(objs, "ns", "gantry")[u.GetName()]; got != want[u.GetName()] {
			t.Errorf("%s: position %d, want %d", u.GetName(), got, want[u.GetName()])
		}
		// The same from the queue's index alone, as the watcher reads it.
		queue, _, _ := unstructured.NestedString(u.Object, "spec", "queueName")
		same, err := idx.ByIndex(ByQueue, QueueKey(u.GetNamespace(), queue))
		if err != nil || len(same) != 4 {
			t.Fatalf("%s: the queue's index holds %d (%v), want the 4 waiting", u.GetName(), len(same), err)
		}
		if got := Positions(same, "ns", "gantry")[u.GetName()]; got != want[u.GetName()] {
			t.Errorf("%s: position from the index %d, want %d", u.GetName(), got, want[u.GetName()])
		}
		if reason == "" {
			t.Errorf("%s: no reason", u.GetName())
		}
	}
	if got := Reason("insufficient unused quota", 2); got != "position 2 in its team's queue: insufficient unused quota" {
		t.Errorf("reason %q", got)
	}
}

// TestDispatching: a manager's Workload with its quota reserved waits for
// a worker until one runs it, with Gantry's placement as the reason.
func TestDispatching(t *testing.T) {
	now := time.Now()
	withChecks := func(state string, placement string, cluster string) *unstructured.Unstructured {
		u := kw("w", 0, now, true, cond("QuotaReserved", "True", now, ""))
		unstructured.SetNestedSlice(u.Object, []any{
			map[string]any{"name": "gantry-approval", "state": "Ready"},
			map[string]any{"name": "gantry-fleet", "state": state, "message": "The workload got reservation on \"onprem\""},
		}, "status", "admissionChecks")
		if placement != "" {
			u.SetAnnotations(map[string]string{"gantry.dev/placement": placement})
		}
		if cluster != "" {
			unstructured.SetNestedField(u.Object, cluster, "status", "clusterName")
		}
		return u
	}
	for _, tc := range []struct {
		name    string
		u       *unstructured.Unstructured
		waiting bool
		reason  string
	}{
		{"placed, not yet admitted there", withChecks("Pending", "placed on onprem: $1.10/GPU-h", ""), true, "placed on onprem: $1.10/GPU-h"},
		{"nowhere to go", withChecks("Pending", "no cluster may run it (cloud: cordoned)", ""), true, "no cluster may run it (cloud: cordoned)"},
		{"no decision yet: the check's words", withChecks("Pending", "", ""), true, "The workload got reservation on \"onprem\""},
		{"running on a worker", withChecks("Ready", "placed on onprem", "onprem"), false, ""},
		{"a worker reserved, the check not yet ready", withChecks("Pending", "placed on onprem", "onprem"), false, ""},
		{"a queue without MultiKueue", kw("w", 0, now, true, cond("QuotaReserved", "True", now, "")), false, ""},
		{"moving off a drained cluster", func() *unstructured.Unstructured {
			u := withChecks("Pending", "placed on onprem", "onprem")
			u.SetAnnotations(map[string]string{"gantry.dev/drained-from": "onprem"})
			return u
		}(), true, "moving off onprem, which is drained: queued again once it has stopped there"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waiting, reason := Dispatching(tc.u)
			if waiting != tc.waiting || reason != tc.reason {
				t.Errorf("Dispatching: %v %q", waiting, reason)
			}
		})
	}
}
