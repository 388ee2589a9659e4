package kube

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/quota"
)

// TestRunning: whether each kind of primary object is asked to run, as
// Gantry's stop and start leave it (what the lifecycle loop converges).
func TestRunning(t *testing.T) {
	queued := map[string]string{quota.LabelQueueName: "q"}
	stopped := map[string]string{kapi.AnnotationStopped: "2026-12-05T04:00:00Z"}
	moving := map[string]string{kapi.AnnotationMovingOff: "node-3"}
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want bool
	}{
		{"a Job", job(nil, nil, false), true},
		{"a suspended Job", job(nil, nil, true), false},
		{"a Job without spec.suspend", obj("Job", nil, nil, map[string]any{}), true},
		{"a suspended Job being moved off a node", job(nil, moving, true), true},
		{"a queued Job Kueue suspended", job(queued, nil, true), true},
		{"a queued Job Gantry stopped", job(queued, stopped, true), false},
		{"a Deployment without replicas set", obj("Deployment", nil, nil, map[string]any{}), true},
		{"a Deployment of 1", obj("Deployment", nil, nil, map[string]any{"replicas": int64(1)}), true},
		{"a Deployment scaled to 0", obj("Deployment", nil, nil, map[string]any{"replicas": int64(0)}), false},
		{"a StatefulSet scaled to 0", obj("StatefulSet", nil, nil, map[string]any{"replicas": int64(0)}), false},
		{"a VM", obj("VirtualMachine", nil, nil, map[string]any{"runStrategy": "Always"}), true},
		{"a halted VM", obj("VirtualMachine", nil, nil, map[string]any{"runStrategy": "Halted"}), false},
		{"a queued VM Kueue halted", obj("VirtualMachine", queued, nil, map[string]any{"runStrategy": "Halted"}), true},
		{"a queued VM Gantry stopped", obj("VirtualMachine", queued, stopped, map[string]any{"runStrategy": "Halted"}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: tc.obj}
			if got := running(u); got != tc.want {
				t.Fatalf("Running() = %v, want %v", got, tc.want)
			}
			if u.GetKind() != "Job" {
				return
			}
			// The same Job as the watcher's cache holds it (typed).
			var j batchv1.Job
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tc.obj, &j); err != nil {
				t.Fatal(err)
			}
			if got := jobRunning(&j); got != tc.want {
				t.Fatalf("jobRunning() = %v, want %v", got, tc.want)
			}
		})
	}
}

func job(labels, annotations map[string]string, suspend bool) map[string]any {
	return obj("Job", labels, annotations, map[string]any{"suspend": suspend})
}

func obj(kind string, labels, annotations map[string]string, spec map[string]any) map[string]any {
	u := &unstructured.Unstructured{Object: map[string]any{"kind": kind, "spec": spec}}
	u.SetLabels(labels)
	u.SetAnnotations(annotations)
	return u.Object
}
