package kueue

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/workload"
)

// Requeue moves a Job off a quarantined node (implements half of
// quarantine.Cluster). The first call deactivates its Kueue Workload,
// marked kapi.AnnotationMovingOff: Kueue evicts it, suspends the Job (pods
// ended by a suspension do not count against its backoffLimit) and takes
// its quota back. A later call, once that is done and its pods are gone,
// activates it again: Kueue queues it and admits it anew, and the
// scheduler places it away from the tainted node. Done is true once it is
// queued again — or when there is nothing to move: the Job is gone, its
// owner stopped it, or someone else deactivated or activated it. A Job
// without the queue label (a cluster without Kueue) is suspended and
// resumed alike.
func (k *Kueue) Requeue(ctx context.Context, o workload.ObjectRef, node string) (done bool, err error) {
	gvr, _ := kapi.ResourceOf("Job")
	jobs := k.dyn.Resource(gvr).Namespace(o.Namespace)
	job, err := jobs.Get(ctx, o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, kapi.Classify(err, "Job", o.Name)
	}
	if job.GetAnnotations()[kapi.AnnotationStopped] == "true" {
		return true, nil // stopped by its owner meanwhile: left stopped
	}
	podsActive, _, _ := unstructured.NestedInt64(job.Object, "status", "active")
	terminating, _, _ := unstructured.NestedInt64(job.Object, "status", "terminating")
	podsActive += terminating
	if _, queued := job.GetLabels()[quota.LabelQueueName]; !queued {
		suspended, _, _ := unstructured.NestedBool(job.Object, "spec", "suspend")
		switch mark := job.GetAnnotations()[kapi.AnnotationMovingOff]; {
		case mark == movedPrefix+node:
			return true, nil
		case mark != node:
			if suspended {
				return true, nil // suspended by someone else
			}
			return false, patch(ctx, jobs, o.Name, job.GetResourceVersion(), node, map[string]any{"suspend": true}, "Job")
		case podsActive > 0 && suspended:
			return false, nil
		}
		err := patch(ctx, jobs, o.Name, job.GetResourceVersion(), movedPrefix+node, map[string]any{"suspend": false}, "Job")
		if apierrors.IsConflict(err) {
			return false, nil // changed meanwhile (its owner stopped it): read again on the next pass
		}
		return err == nil, err
	}
	wls := k.dyn.Resource(kapi.KueueWorkloads).Namespace(o.Namespace)
	list, err := wls.List(ctx, metav1.ListOptions{LabelSelector: "kueue.x-k8s.io/job-uid=" + string(job.GetUID())})
	if err != nil {
		return false, kapi.Classify(err, "Kueue Workload", o.Name)
	}
	if len(list.Items) == 0 {
		return false, &fault.Unavailable{What: "Kueue", Err: fmt.Errorf("no Kueue Workload for Job %s/%s yet", o.Namespace, o.Name)}
	}
	done = true
	requeued := movedPrefix + node
	for _, w := range list.Items {
		active, found, _ := unstructured.NestedBool(w.Object, "spec", "active")
		active = active || !found
		_, reserved, _ := unstructured.NestedMap(w.Object, "status", "admission")
		switch mark := w.GetAnnotations()[kapi.AnnotationMovingOff]; {
		case mark == requeued:
			// Queued again for this node already (a pass whose record of
			// it failed, or a leader that changed): nothing more to do.
		case mark != node:
			// Not taken off this node yet (a mark left from an earlier
			// node, or none).
			if !active {
				continue // deactivated by someone else: theirs to activate
			}
			if err := patch(ctx, wls, w.GetName(), "", node, map[string]any{"active": false}, "Kueue Workload"); err != nil {
				return false, err
			}
			done = false
		case active:
			// Activated by someone else meanwhile: it is queued.
			if err := patch(ctx, wls, w.GetName(), "", requeued, map[string]any{}, "Kueue Workload"); err != nil {
				return false, err
			}
		case reserved || podsActive > 0:
			done = false // Kueue has not taken it off yet
		default:
			// Queued again — unless the Workload changed since it was read
			// (its owner stopped it meanwhile: SetJobActive clears the
			// mark), which the resourceVersion makes the API server refuse.
			err := patch(ctx, wls, w.GetName(), w.GetResourceVersion(), requeued, map[string]any{"active": true}, "Kueue Workload")
			if apierrors.IsConflict(err) {
				return false, nil // read again on the next pass
			}
			if err != nil {
				return false, err
			}
		}
	}
	return done, nil
}

// movedPrefix marks a Kueue Workload (or Job) that Gantry queued again
// after taking it off the named node: kept, so that a repeated call does
// not take it off again wherever it runs now.
const movedPrefix = "requeued:"

// MovingOff reports whether a Job is being moved off a quarantined node
// (taken off, not yet queued again): its suspension is Gantry's move, not
// a stop.
func MovingOff(annotations map[string]string) bool {
	m := annotations[kapi.AnnotationMovingOff]
	return m != "" && !strings.HasPrefix(m, movedPrefix)
}

type patcher interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, options metav1.PatchOptions, subresources ...string) (*unstructured.Unstructured, error)
}

// patch sets the spec fields and the moving-off mark ("": removes it),
// with resourceVersion when given (the API server refuses the patch of a
// changed object).
func patch(ctx context.Context, r patcher, name, resourceVersion, mark string, spec map[string]any, what string) error {
	meta := map[string]any{"annotations": map[string]any{kapi.AnnotationMovingOff: nilIfEmpty(mark)}}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	b, err := json.Marshal(map[string]any{"metadata": meta, "spec": spec})
	if err != nil {
		return fmt.Errorf("kueue: patch %s %s: %w", what, name, err)
	}
	if _, err := r.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: kapi.FieldManager}); err != nil {
		if apierrors.IsConflict(err) {
			return err
		}
		return kapi.Classify(err, what, name)
	}
	return nil
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
