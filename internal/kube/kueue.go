package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// AnnotationStopped marks a queued Job that Gantry stopped: Kueue owns the
// Job's suspend field, so the stop is said on the Job and done by
// deactivating its Kueue Workload.
const AnnotationStopped = "gantry.dev/stopped"

// Kueue's resources.
var kueueResources = map[string]schema.GroupVersionResource{
	"ResourceFlavor":        {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"},
	"ClusterQueue":          {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"},
	"LocalQueue":            {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"},
	"WorkloadPriorityClass": {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloadpriorityclasses"},
	"Cohort":                {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "cohorts"},
	"AdmissionCheck":        {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "admissionchecks"},
}

var kueueWorkloads = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// applyKueue server-side applies one Kueue object.
func (c *Cluster) applyKueue(ctx context.Context, o quota.Object) error {
	u := &unstructured.Unstructured{Object: o}
	gvr, ok := kueueResources[u.GetKind()]
	if !ok {
		return fmt.Errorf("kube: no Kueue resource known for %s", u.GetKind())
	}
	data, err := json.Marshal(u)
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)})
	if err != nil {
		return classify(err, u.GetKind(), u.GetName())
	}
	return nil
}

// SyncQuotas applies Kueue's cluster-wide objects (package quota's Objects)
// and deletes the ClusterQueues, ResourceFlavors and WorkloadPriorityClasses
// Gantry made that are no longer wanted (a team or class removed).
func (c *Cluster) SyncQuotas(ctx context.Context, objs []quota.Object) error {
	want := map[string]bool{}
	for _, o := range objs {
		if err := c.applyKueue(ctx, o); err != nil {
			return err
		}
		u := unstructured.Unstructured{Object: o}
		want[u.GetKind()+"/"+u.GetName()] = true
	}
	for _, kind := range []string{"ClusterQueue", "ResourceFlavor", "WorkloadPriorityClass", "AdmissionCheck"} {
		list, err := c.dyn.Resource(kueueResources[kind]).List(ctx, metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy})
		if err != nil {
			return classify(err, kind, "")
		}
		for _, u := range list.Items {
			if !want[kind+"/"+u.GetName()] {
				if err := c.dyn.Resource(kueueResources[kind]).Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil {
					return classify(err, kind, u.GetName())
				}
			}
		}
	}
	return nil
}

// Teams are the teams that have a namespace Gantry applied on the cluster.
func (c *Cluster) Teams(ctx context.Context) ([]string, error) {
	list, err := c.core.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy, ResourceVersion: "0"})
	if err != nil {
		return nil, classify(err, "namespace", "")
	}
	var out []string
	for _, ns := range list.Items {
		if t := ns.Labels[render.LabelTeam]; t != "" {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, nil
}

// setJobActive stops or starts a Job. A queued one (Kueue owns its
// suspend field) has its Kueue Workload deactivated (Kueue suspends the Job
// and frees its quota) or activated (it queues again), and then the
// annotation says so on the Job — last, so that a failure half way leaves
// the Job looking as it was and the lifecycle loop tries again. A Job
// without the queue label (made before Kueue was on) is suspended as ever.
func (c *Cluster) setJobActive(ctx context.Context, o workload.ObjectRef, run bool) (queued bool, err error) {
	gvr, _ := resourceOf("Job")
	job, err := c.dyn.Resource(gvr).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		return false, classify(err, "Job", o.Name)
	}
	if _, ok := job.GetLabels()[quota.LabelQueueName]; !ok {
		return false, nil
	}
	list, err := c.dyn.Resource(kueueWorkloads).Namespace(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "kueue.x-k8s.io/job-uid=" + string(job.GetUID())})
	if err != nil {
		return true, classify(err, "Kueue Workload", o.Name)
	}
	if len(list.Items) == 0 && !run {
		// Kueue has not made its Workload yet: the lifecycle loop tries
		// again (the Job still looks running).
		return true, &fault.Unavailable{What: "Kueue", Err: fmt.Errorf("no Kueue Workload for Job %s/%s yet", o.Namespace, o.Name)}
	}
	active, _ := json.Marshal(map[string]any{"spec": map[string]any{"active": run}})
	for _, w := range list.Items {
		if _, err := c.dyn.Resource(kueueWorkloads).Namespace(o.Namespace).Patch(ctx, w.GetName(), types.MergePatchType, active, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return true, classify(err, "Kueue Workload", w.GetName())
		}
	}
	ann := map[string]any{AnnotationStopped: "true"}
	if run {
		ann = map[string]any{AnnotationStopped: nil}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := c.dyn.Resource(gvr).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return true, classify(err, "Job", o.Name)
	}
	return true, nil
}

// queuedIn says whether a Kueue Workload waits for admission, and why.
func queuedIn(u *unstructured.Unstructured) (waiting bool, reason string) {
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

// ownerKey indexes Kueue Workloads by the object they admit.
func ownerKey(namespace, kind, name string) string { return namespace + "/" + kind + "/" + name }

const byOwner = "owner"

func kueueOwnerIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, r := range u.GetOwnerReferences() {
		out = append(out, ownerKey(u.GetNamespace(), r.Kind, r.Name))
	}
	return out, nil
}

// queuePosition is a waiting Kueue Workload's place in its queue (1: next):
// the workloads waiting in the same LocalQueue, by priority and then age,
// as Kueue's BestEffortFIFO orders them.
func queuePosition(all []any, w *unstructured.Unstructured) int {
	queue, _, _ := unstructured.NestedString(w.Object, "spec", "queueName")
	type entry struct {
		prio    int64
		created time.Time
		name    string
	}
	key := func(u *unstructured.Unstructured) entry {
		p, _, _ := unstructured.NestedInt64(u.Object, "spec", "priority")
		return entry{p, queuedSince(u), u.GetName()}
	}
	var waiting []entry
	for _, o := range all {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetNamespace() != w.GetNamespace() {
			continue
		}
		if q, _, _ := unstructured.NestedString(u.Object, "spec", "queueName"); q != queue {
			continue
		}
		if ok, _ := queuedIn(u); ok {
			waiting = append(waiting, key(u))
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
	for i, e := range waiting {
		if e.name == w.GetName() {
			return i + 1
		}
	}
	return 0
}

// queuedSince is when a Kueue Workload joined its queue as Kueue orders
// it: when it was made, or when it was last evicted (a stopped Job started
// again, a preempted one: its Evicted or Requeued condition) — Kueue's
// default queueing timestamp.
func queuedSince(u *unstructured.Unstructured) time.Time {
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

// kueueReason says why a workload waits, in Kueue's words, shortened.
func kueueReason(reason string, position int) string {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		reason = "waiting for Kueue to admit it"
	}
	if position > 0 {
		return fmt.Sprintf("position %d in its team's queue: %s", position, reason)
	}
	return reason
}

// QueueUsage implements estimate.Cluster: the GPUs (gpu-milli / 1000) of
// class's flavor that the team's ClusterQueue has reserved, and how many of
// its workloads wait.
func (c *Cluster) QueueUsage(ctx context.Context, team team.Name, class string) (float64, int, error) {
	cq, err := c.dyn.Resource(kueueResources["ClusterQueue"]).Get(ctx, quota.ClusterQueue(team), metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return 0, 0, nil // its queue is made with its first namespace
		}
		return 0, 0, classify(err, "ClusterQueue", quota.ClusterQueue(team))
	}
	pending, _, _ := unstructured.NestedInt64(cq.Object, "status", "pendingWorkloads")
	used := 0.0
	flavors, _, _ := unstructured.NestedSlice(cq.Object, "status", "flavorsReservation")
	for _, f := range flavors {
		fm, _ := f.(map[string]any)
		if fm["name"] != quota.Flavor(class) {
			continue
		}
		rs, _ := fm["resources"].([]any)
		for _, r := range rs {
			rm, _ := r.(map[string]any)
			if rm["name"] != quota.GPUMilli {
				continue
			}
			if q, err := resource.ParseQuantity(fmt.Sprint(rm["total"])); err == nil {
				used = float64(q.Value()) / 1000
			}
		}
	}
	return used, int(pending), nil
}

// MostOnOneNode implements workload.Cluster: the most of res any node of
// class has allocatable, cordoned ones counted, and how many nodes the
// class has (one list, from the API server's cache). A node that lists the
// resource at 0 (a device plugin that found its devices unhealthy) counts
// as offering it: most is then -1 rather than 0, which says none offers it.
func (c *Cluster) MostOnOneNode(ctx context.Context, class gpu.Class, res string) (int, int, error) {
	nodes, err := c.core.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: render.LabelGPUProduct + " in (" + strings.Join(class.Products, ",") + ")", ResourceVersion: "0"})
	if err != nil {
		return 0, 0, classify(err, "node", "")
	}
	return mostOnOne(nodes.Items, corev1.ResourceName(res)), len(nodes.Items), nil
}

// mostOnOne is the most of res any of nodes has allocatable; -1 when a node
// lists it at 0 and none has more (not known), 0 when none lists it at all.
func mostOnOne(nodes []corev1.Node, res corev1.ResourceName) int {
	most, listed := 0, false
	for _, n := range nodes {
		if q, ok := n.Status.Allocatable[res]; ok {
			most, listed = max(most, int(q.Value())), true
		}
	}
	if listed && most == 0 {
		return -1
	}
	return most
}

// FreeGPUs implements estimate.Cluster: on the schedulable nodes of the
// class's products, the units of resource (nvidia.com/gpu, a MIG profile's
// resource, or nvidia.com/pgpu) allocatable and not requested by a pod that
// has not ended — in all, and the most on one node. (Node affinity beyond
// the class — spot, confidential computing — is not weighed.)
func (c *Cluster) FreeGPUs(ctx context.Context, class gpu.Class, res string) (total, onOneNode, mostOnOneNode, nodeCount int, err error) {
	nodes, err := c.core.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: render.LabelGPUProduct + " in (" + strings.Join(class.Products, ",") + ")", ResourceVersion: "0"})
	if err != nil {
		return 0, 0, 0, 0, classify(err, "node", "")
	}
	name := corev1.ResourceName(res)
	// A cordoned node counts here: it may serve again.
	mostOnOneNode, nodeCount = mostOnOne(nodes.Items, name), len(nodes.Items)
	for _, n := range nodes.Items {
		q, ok := n.Status.Allocatable[name]
		if n.Spec.Unschedulable || !ok {
			continue
		}
		free := q.Value()
		pods, err := c.core.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name, ResourceVersion: "0"})
		if err != nil {
			return 0, 0, 0, 0, classify(err, "pod", "")
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			for _, ctr := range p.Spec.Containers {
				if l, ok := ctr.Resources.Limits[name]; ok {
					free -= l.Value()
				}
			}
		}
		if free > 0 {
			total += int(free)
			onOneNode = max(onOneNode, int(free))
		}
	}
	return total, onOneNode, mostOnOneNode, nodeCount, nil
}
