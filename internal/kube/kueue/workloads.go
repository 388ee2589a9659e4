package kueue

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/quota"
)

// Waiting says whether a Kueue Workload waits for admission, and why.
func Waiting(u *unstructured.Unstructured) (waiting bool, reason string) {
	if active, found, _ := unstructured.NestedBool(u.Object, "spec", "active"); found && !active {
		return false, ""
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	reserved, finished := false, false
	var why, preempted string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		msg, _ := m["message"].(string)
		switch m["type"] {
		case "QuotaReserved":
			if m["status"] == "True" {
				reserved = true
			} else {
				why = msg
			}
		case "Finished":
			finished = m["status"] == "True"
		case "Preempted":
			// Preemption is said as such: it is why the workload waits
			// again, not a failure.
			if m["status"] == "True" && msg != "" {
				preempted = "preempted by Kueue: " + msg
			}
		}
	}
	reason = why
	if preempted != "" {
		reason = strings.TrimSuffix(preempted+"; "+why, "; ")
	}
	return !reserved && !finished, reason
}

// Condition says whether a Kueue Workload's condition typ (Finished,
// QuotaReserved, Evicted, …) is true.
func Condition(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			return m["status"] == "True"
		}
	}
	return false
}

// Dispatching says whether a manager's Kueue Workload, its quota reserved,
// waits for MultiKueue to run it on a worker cluster, and why: Gantry's
// placement in words (kapi.AnnotationPlacement), or the check's message.
func Dispatching(u *unstructured.Unstructured) (waiting bool, reason string) {
	if from := u.GetAnnotations()[kapi.AnnotationDrainedFrom]; from != "" {
		return true, fmt.Sprintf("moving off %s, which is drained: queued again once it has stopped there", from)
	}
	if name, _, _ := unstructured.NestedString(u.Object, "status", "clusterName"); name != "" {
		return false, ""
	}
	if Admitted(u) {
		return false, ""
	}
	checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
	for _, ch := range checks {
		m, _ := ch.(map[string]any)
		if m["name"] != quota.FleetCheck || m["state"] == "Ready" {
			continue
		}
		reason = u.GetAnnotations()[kapi.AnnotationPlacement]
		if reason == "" {
			reason, _ = m["message"].(string)
		}
		if reason == "" {
			reason = "waiting for Gantry to choose a worker cluster"
		}
		return true, reason
	}
	return false, ""
}

// OwnerKey is the key under which OwnerIndex files a Kueue Workload: the
// object it admits.
func OwnerKey(namespace, kind, name string) string { return namespace + "/" + kind + "/" + name }

// ByOwner names the OwnerIndex index on an informer of Kueue Workloads.
const ByOwner = "owner"

// OwnerIndex indexes Kueue Workloads by the objects they admit (OwnerKey).
func OwnerIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, r := range u.GetOwnerReferences() {
		out = append(out, OwnerKey(u.GetNamespace(), r.Kind, r.Name))
	}
	return out, nil
}

// ByQueue names the QueueIndex index on an informer of Kueue Workloads.
const ByQueue = "queue"

// QueueKey is the key under which QueueIndex files a waiting Kueue
// Workload: its LocalQueue.
func QueueKey(namespace, queue string) string { return namespace + "/" + queue }

// QueueIndex indexes the Kueue Workloads that wait for admission by their
// LocalQueue (QueueKey); the others are not indexed. A workload's position
// then reads its own queue's waiting workloads, not every one the cluster
// holds.
func QueueIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	if waiting, _ := Waiting(u); !waiting {
		return nil, nil
	}
	queue, _, _ := unstructured.NestedString(u.Object, "spec", "queueName")
	return []string{QueueKey(u.GetNamespace(), queue)}, nil
}

// Positions are the places (1: next) of the Kueue Workloads of all that
// wait in the LocalQueue queue of namespace ns, by name: by priority and then
// age, as Kueue's BestEffortFIFO orders them. Others in all (other queues,
// not waiting) are skipped.
func Positions(all []any, ns, queue string) map[string]int {
	type entry struct {
		prio    int64
		created time.Time
		name    string
	}
	var waiting []entry
	for _, o := range all {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetNamespace() != ns {
			continue
		}
		if q, _, _ := unstructured.NestedString(u.Object, "spec", "queueName"); q != queue {
			continue
		}
		if ok, _ := Waiting(u); ok {
			p, _, _ := unstructured.NestedInt64(u.Object, "spec", "priority")
			waiting = append(waiting, entry{p, Since(u), u.GetName()})
		}
	}
	sort.Slice(waiting, func(i, j int) bool {
		a, b := waiting[i], waiting[j]
		if a.prio != b.prio {
			return a.prio > b.prio
		}
		if !a.created.Equal(b.created) {
			return a.created.Before(b.created)
		}
		return a.name < b.name
	})
	out := make(map[string]int, len(waiting))
	for i, e := range waiting {
		out[e.name] = i + 1
	}
	return out
}

// Since is when a Kueue Workload joined its queue as Kueue orders
// it: when it was made, or when it was last evicted (a stopped Job started
// again, a preempted one: its Evicted or Requeued condition) — Kueue's
// default queueing timestamp.
func Since(u *unstructured.Unstructured) time.Time {
	t := u.GetCreationTimestamp().Time
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if (m["type"] == "Evicted" || m["type"] == "Requeued") && m["status"] == "True" {
			if at, err := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"])); err == nil && at.After(t) {
				t = at
			}
		}
	}
	return t
}

// Reason says why a workload waits, in Kueue's words, shortened.
func Reason(reason string, position int) string {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		reason = "waiting for Kueue to admit it"
	}
	if position > 0 {
		return fmt.Sprintf("position %d in its team's queue: %s", position, reason)
	}
	return reason
}

// Admitted reports whether Kueue admits a Workload now.
func Admitted(u *unstructured.Unstructured) bool {
	if active, found, _ := unstructured.NestedBool(u.Object, "spec", "active"); found && !active {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Admitted" {
			return m["status"] == "True"
		}
	}
	return false
}

// AdmittedAt is when a Kueue Workload's Admitted condition last turned.
func AdmittedAt(u *unstructured.Unstructured) (time.Time, bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Admitted" {
			s, _ := m["lastTransitionTime"].(string)
			t, err := time.Parse(time.RFC3339, s)
			return t, err == nil
		}
	}
	return time.Time{}, false
}

// Evicted reports whether Kueue evicted a Workload that still holds its
// quota reservation (deactivated, preempted): the job's controller — for a
// VM, Gantry — must stop it and give the reservation back.
func Evicted(u *unstructured.Unstructured) bool {
	if _, found, _ := unstructured.NestedMap(u.Object, "status", "admission"); !found {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Evicted" {
			return m["status"] == "True"
		}
	}
	return false
}

// CheckState is Gantry's AdmissionCheck entry on a Kueue Workload.
func CheckState(u *unstructured.Unstructured) (state, message string, found bool) {
	checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
	for _, ch := range checks {
		m, _ := ch.(map[string]any)
		if m["name"] == quota.ApprovalCheck {
			state, _ = m["state"].(string)
			message, _ = m["message"].(string)
			return state, message, true
		}
	}
	return "", "", false
}
