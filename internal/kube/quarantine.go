package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/workload"
)

// Quarantine is what the quarantine loop asks of a cluster: marking nodes,
// finding and moving the work on them, preflight checks.
type Quarantine struct {
	c  *Cluster
	pf nodes.PreflightOptions
}

var _ quarantine.Cluster = Quarantine{}

// Quarantine is the cluster as the quarantine loop uses it, with preflight
// checks run as pf says.
func (c *Cluster) Quarantine(pf nodes.PreflightOptions) Quarantine { return Quarantine{c: c, pf: pf} }

// Marks implements quarantine.Cluster.
func (q Quarantine) Marks(ctx context.Context) ([]quarantine.Mark, error) {
	return q.c.nodes.Marks(ctx)
}

// Mark implements quarantine.Cluster.
func (q Quarantine) Mark(ctx context.Context, m quarantine.Mark, effect string) (quarantine.Mark, bool, error) {
	return q.c.nodes.Mark(ctx, m, effect)
}

// Unmark implements quarantine.Cluster.
func (q Quarantine) Unmark(ctx context.Context, node string) error {
	return q.c.nodes.Unmark(ctx, node)
}

// PodsOn implements quarantine.Cluster.
func (q Quarantine) PodsOn(ctx context.Context, namespace, workloadID, node string) ([]quarantine.Pod, error) {
	return q.c.nodes.PodsOn(ctx, namespace, workloadID, node)
}

// PodNodes implements quarantine.Cluster.
func (q Quarantine) PodNodes(ctx context.Context, namespace, workloadID string) ([]string, error) {
	return q.c.nodes.PodNodes(ctx, namespace, workloadID)
}

// Requeue implements quarantine.Cluster (package kueue: deactivated, then
// queued again).
func (q Quarantine) Requeue(ctx context.Context, o workload.ObjectRef, node string) (bool, error) {
	return q.c.queue.Requeue(ctx, o, node)
}

// Evict implements quarantine.Cluster.
func (q Quarantine) Evict(ctx context.Context, namespace, name string) error {
	return q.c.nodes.Evict(ctx, namespace, name)
}

// RestartVM implements quarantine.Cluster: the VM's running instance is
// deleted, and KubeVirt starts another, as its run strategy says, away
// from the tainted node.
func (q Quarantine) RestartVM(ctx context.Context, o workload.ObjectRef) error {
	err := q.c.dyn.Resource(kapi.VMIResource).Namespace(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return kapi.Classify(err, "VirtualMachineInstance", o.Name)
	}
	return nil
}

// Event implements quarantine.Cluster: an event on the workload's primary
// object, with its uid when it is there (kubectl describe matches by it).
func (q Quarantine) Event(ctx context.Context, o workload.ObjectRef, eventType, reason, message string) error {
	gvr, err := kapi.ResourceOf(o.Kind)
	if err != nil {
		return err
	}
	ref := corev1.ObjectReference{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, APIVersion: gvr.GroupVersion().String()}
	if u, err := q.c.dyn.Resource(gvr).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
		ref.UID = u.GetUID()
	}
	now := metav1.NewTime(q.c.now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: o.Name + ".", Namespace: o.Namespace},
		InvolvedObject: ref, Reason: reason, Message: message, Type: eventType,
		Source:         corev1.EventSource{Component: "gantry"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := q.c.core.CoreV1().Events(o.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return kapi.Classify(err, "events", o.Namespace)
	}
	return nil
}

// Preflight implements quarantine.Cluster.
func (q Quarantine) Preflight(ctx context.Context, node string) (quarantine.Preflight, error) {
	return q.c.nodes.Preflight(ctx, node, q.pf)
}

// ClearPreflight implements quarantine.Cluster.
func (q Quarantine) ClearPreflight(ctx context.Context, node string) error {
	return q.c.nodes.ClearPreflight(ctx, node, q.pf)
}
