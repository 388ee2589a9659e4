package watch

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/quota"
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
