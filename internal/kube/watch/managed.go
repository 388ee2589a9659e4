package watch

import (
	"context"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/workload"
)

// Asked is what a primary object (a Job, Deployment, StatefulSet or
// VirtualMachine) says of whether it is asked to run.
type Asked struct {
	Kind                string
	Labels, Annotations map[string]string
	Suspend             bool   // a Job's spec.suspend
	Replicas            *int64 // a Deployment's or StatefulSet's spec.replicas (nil: not set, which is one)
	RunStrategy         string // a VirtualMachine's spec.runStrategy
}

// Running reports whether the object is asked to run (the opposite of what
// Gantry's stop does to it).
func (a Asked) Running() bool {
	switch a.Kind {
	case "Job":
		if _, queued := a.Labels[quota.LabelQueueName]; queued {
			// Kueue suspends and resumes it: Gantry's stop is an annotation
			// (and the Kueue Workload deactivated).
			return a.Annotations[kapi.AnnotationStopped] == ""
		}
		if kueue.MovingOff(a.Annotations) {
			return true // suspended to move it off a quarantined node, not stopped
		}
		return !a.Suspend
	case "Deployment", "StatefulSet":
		return a.Replicas == nil || *a.Replicas > 0
	case "VirtualMachine":
		if _, queued := a.Labels[quota.LabelQueueName]; queued {
			// Halted until Kueue admits it: Gantry's stop is an annotation.
			return a.Annotations[kapi.AnnotationStopped] == ""
		}
		return a.RunStrategy != "Halted"
	}
	return true
}

// AskedOf reads Asked from an object as the dynamic client gives it.
func AskedOf(u *unstructured.Unstructured) Asked {
	a := Asked{Kind: u.GetKind(), Labels: u.GetLabels(), Annotations: u.GetAnnotations()}
	a.Suspend, _, _ = unstructured.NestedBool(u.Object, "spec", "suspend")
	if n, found, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); found {
		a.Replicas = &n
	}
	a.RunStrategy, _, _ = unstructured.NestedString(u.Object, "spec", "runStrategy")
	return a
}

// Synced reports whether the caches Managed reads are filled.
func (w *Watcher) Synced() bool {
	for _, inf := range w.primaries() {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Managed lists the primary objects carrying Gantry's labels (Jobs,
// Deployments, StatefulSets and, with KubeVirt, VirtualMachines) from the
// caches, as kube.Cluster.Managed lists them from the API server: the
// lifecycle loop asks every interval, and listing thousands of Jobs each
// time cost the API server and Gantry a quarter of their CPU under a
// sustained load of launches. A cache a moment behind the cluster is
// enough for what reads it: finding what may be out of step with its
// record, which the lifecycle loop confirms with the API server before it
// stops or starts anything. Until the caches are filled it fails
// (*fault.Unavailable).
func (w *Watcher) Managed(context.Context) ([]workload.ObjectRef, error) {
	if !w.Synced() {
		return nil, &fault.Unavailable{What: "the cluster's caches (not filled yet)"}
	}
	var out []workload.ObjectRef
	add := func(m metav1.Object, a Asked) {
		out = append(out, workload.ObjectRef{Namespace: m.GetNamespace(), Kind: a.Kind, Name: m.GetName(), WorkloadID: m.GetLabels()[render.LabelWorkloadID], Running: a.Running()})
	}
	for _, obj := range w.jobs.GetStore().List() {
		if j, ok := obj.(*batchv1.Job); ok {
			add(j, Asked{Kind: "Job", Labels: j.Labels, Annotations: j.Annotations, Suspend: j.Spec.Suspend != nil && *j.Spec.Suspend})
		}
	}
	for _, obj := range w.deployments.GetStore().List() {
		if d, ok := obj.(*appsv1.Deployment); ok {
			add(d, Asked{Kind: "Deployment", Labels: d.Labels, Annotations: d.Annotations, Replicas: replicas(d.Spec.Replicas)})
		}
	}
	for _, obj := range w.statefulSets.GetStore().List() {
		if s, ok := obj.(*appsv1.StatefulSet); ok {
			add(s, Asked{Kind: "StatefulSet", Labels: s.Labels, Annotations: s.Annotations, Replicas: replicas(s.Spec.Replicas)})
		}
	}
	if w.vms != nil {
		for _, obj := range w.vms.GetStore().List() {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				a := AskedOf(u)
				a.Kind = kapi.VMKind.Kind
				add(u, a)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

func replicas(n *int32) *int64 {
	if n == nil {
		return nil
	}
	v := int64(*n)
	return &v
}
