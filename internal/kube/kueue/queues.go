package kueue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// Apply server-side applies one Kueue object.
func (k *Kueue) Apply(ctx context.Context, o quota.Object) error {
	_, err := k.apply(ctx, o)
	return err
}

// apply server-side applies one Kueue object and returns it as the API
// server has it now.
func (k *Kueue) apply(ctx context.Context, o quota.Object) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: o}
	gvr, ok := kapi.KueueResources[u.GetKind()]
	if !ok {
		return nil, fmt.Errorf("kueue: no Kueue resource known for %s", u.GetKind())
	}
	data, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	out, err := k.dyn.Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: kapi.FieldManager, Force: kapi.Ptr(true)})
	if err != nil {
		return nil, kapi.Classify(err, u.GetKind(), u.GetName())
	}
	return out, nil
}

// applied is what SyncQuotas last applied of an object: the hash of what
// it applied, and the object's uid and generation as the API server
// returned them. While the object is that uid at that generation, nobody
// changed what it says (every change but its metadata's and, where it has
// a status subresource, its status's bumps its generation), and applying
// the same again would change nothing.
type applied struct {
	hash       string
	uid        types.UID
	generation int64
}

// unchanged says whether o is what was last applied as key and live (as
// the API server's watch cache has it; nil: not there) is still as that
// apply left it.
func (k *Kueue) unchanged(key, hash string, live *unstructured.Unstructured) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	a, ok := k.applied[key]
	return ok && live != nil && a.hash == hash && a.uid == live.GetUID() && a.generation == live.GetGeneration()
}

func (k *Kueue) remember(key string, a *applied) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a == nil {
		delete(k.applied, key)
		return
	}
	k.applied[key] = *a
}

// SyncQuotas applies Kueue's cluster-wide objects (package quota's Objects)
// and deletes the ClusterQueues, ResourceFlavors, WorkloadPriorityClasses
// and AdmissionChecks Gantry made that are no longer wanted (a team or class
// removed) — in a MultiKueue manager, its MultiKueueClusters too (a worker
// removed). Those of a fleet no longer configured at all are left.
//
// An object that is what this Kueue last applied, and has not changed on
// the cluster since (the same uid and generation in the API server's watch
// cache), is not applied again: a sync pass of a policy that did not
// change costs a list of each kind, not an apply of every object. An edit
// by hand of anything but its metadata bumps its generation and is applied
// back at the next call; an edit of its labels or annotations alone is left
// until Gantry restarts or the object's wanted form changes (one that takes
// Gantry's managed-by label off is applied again).
//
// A ClusterQueue whose team has a Gantry namespace on the cluster now, read
// after the queues were listed, is never deleted: the team's first launch
// made the namespace after objs were worked out (another Gantry on the same
// cluster made it, and its queue, meanwhile). Deleting such a queue left it
// Terminating, and inactive, for as long as it held admitted workloads.
func (k *Kueue) SyncQuotas(ctx context.Context, objs []quota.Object) error {
	kinds := []string{"ClusterQueue", "ResourceFlavor", "WorkloadPriorityClass", "AdmissionCheck"}
	for _, o := range objs {
		if (&unstructured.Unstructured{Object: o}).GetKind() == "MultiKueueConfig" {
			// A MultiKueue manager: its workers' objects are pruned too
			// (only there may Gantry read them).
			kinds = append(kinds, "MultiKueueConfig", "MultiKueueCluster")
			break
		}
	}
	// What Gantry made of each kind, from the API server's watch cache (a
	// moment behind is fine: what changed meanwhile is seen next pass).
	live := map[string]*unstructured.Unstructured{}
	lists := map[string][]unstructured.Unstructured{}
	for _, kind := range kinds {
		list, err := k.dyn.Resource(kapi.KueueResources[kind]).List(ctx, metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy, ResourceVersion: "0"})
		if err != nil {
			return kapi.Classify(err, kind, "")
		}
		lists[kind] = list.Items
		for i := range list.Items {
			live[kind+"/"+list.Items[i].GetName()] = &list.Items[i]
		}
	}
	want := map[string]bool{}
	for _, o := range objs {
		u := unstructured.Unstructured{Object: o}
		key := u.GetKind() + "/" + u.GetName()
		want[key] = true
		data, err := json.Marshal(o)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		hash := hex.EncodeToString(sum[:])
		if k.unchanged(key, hash, live[key]) {
			continue
		}
		out, err := k.apply(ctx, o)
		if err != nil {
			k.remember(key, nil)
			return err
		}
		k.remember(key, &applied{hash: hash, uid: out.GetUID(), generation: out.GetGeneration()})
	}
	for _, kind := range kinds {
		var teams map[string]bool // read once, when a queue is to go
		for _, u := range lists[kind] {
			if want[kind+"/"+u.GetName()] {
				continue
			}
			if kind == "ClusterQueue" {
				if teams == nil {
					// A consistent list (no resourceVersion): at least
					// as new as the queues' list above.
					var err error
					if teams, err = k.teams(ctx, ""); err != nil {
						return err
					}
				}
				if t := u.GetLabels()[render.LabelTeam]; t != "" && teams[t] {
					continue
				}
			}
			if err := k.dyn.Resource(kapi.KueueResources[kind]).Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return kapi.Classify(err, kind, u.GetName())
			}
			k.remember(kind+"/"+u.GetName(), nil)
		}
	}
	return nil
}

// Teams are the teams that have a namespace Gantry applied on the cluster,
// from the API server's watch cache (a moment behind is fine for a sync
// pass).
func (k *Kueue) Teams(ctx context.Context) ([]string, error) {
	set, err := k.teams(ctx, "0")
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// teams lists the namespaces Gantry applied at resourceVersion and returns
// their teams.
func (k *Kueue) teams(ctx context.Context, resourceVersion string) (map[string]bool, error) {
	list, err := k.core.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy, ResourceVersion: resourceVersion})
	if err != nil {
		return nil, kapi.Classify(err, "namespace", "")
	}
	out := map[string]bool{}
	for _, ns := range list.Items {
		if t := ns.Labels[render.LabelTeam]; t != "" {
			out[t] = true
		}
	}
	return out, nil
}

// QueueUsage (estimate.Cluster, through kube.Cluster): the GPUs (gpu-milli / 1000) of
// class's flavor that the team's ClusterQueue has reserved — for the CPU
// class (gpu.CPUClass), the cores of the CPU nodes' flavor — and how many of
// its workloads wait.
func (k *Kueue) QueueUsage(ctx context.Context, team team.Name, class string) (float64, int, error) {
	res, per := quota.GPUMilli, 1000.0
	if class == gpu.CPUClass {
		res, per = string(corev1.ResourceCPU), 1
	}
	// ResourceVersion "0": served from the API server's watch cache, not
	// read from etcd — every launch's estimate asks, and a moment-old
	// usage is what it shows anyway.
	cq, err := k.dyn.Resource(kapi.KueueResources["ClusterQueue"]).Get(ctx, quota.ClusterQueue(team), metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return 0, 0, nil // its queue is made with its first namespace
		}
		return 0, 0, kapi.Classify(err, "ClusterQueue", quota.ClusterQueue(team))
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
			if rm["name"] != res {
				continue
			}
			if q, err := resource.ParseQuantity(fmt.Sprint(rm["total"])); err == nil {
				used = q.AsApproximateFloat64() / per
			}
		}
	}
	return used, int(pending), nil
}

// HoldQueue (workload.Cluster, through kube.Cluster): the team's ClusterQueue gets
// stopPolicy Hold now (Kueue admits nothing new from it), ahead of the quota
// sync that keeps it so while the team's budget blocks launches.
func (k *Kueue) HoldQueue(ctx context.Context, t team.Name) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"stopPolicy": "Hold"}})
	_, err := k.dyn.Resource(kapi.KueueResources["ClusterQueue"]).Patch(ctx, quota.ClusterQueue(t), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		return kapi.Classify(err, "ClusterQueue", quota.ClusterQueue(t))
	}
	return nil
}

// SetJobActive stops or starts a Job. A queued one (Kueue owns its
// suspend field) has its Kueue Workload deactivated (Kueue suspends the Job
// and frees its quota) or activated (it queues again), and then the
// annotation says so on the Job — last, so that a failure half way leaves
// the Job looking as it was and the lifecycle loop tries again. A Job
// without the queue label (made before Kueue was on) is suspended as ever.
func (k *Kueue) SetJobActive(ctx context.Context, o workload.ObjectRef, run bool) (queued bool, err error) {
	gvr, _ := kapi.ResourceOf("Job")
	job, err := k.dyn.Resource(gvr).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		return false, kapi.Classify(err, "Job", o.Name)
	}
	if _, ok := job.GetLabels()[quota.LabelQueueName]; !ok {
		return false, nil
	}
	list, err := k.dyn.Resource(kapi.KueueWorkloads).Namespace(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "kueue.x-k8s.io/job-uid=" + string(job.GetUID())})
	if err != nil {
		return true, kapi.Classify(err, "Kueue Workload", o.Name)
	}
	if len(list.Items) == 0 && !run {
		// Kueue has not made its Workload yet: the lifecycle loop tries
		// again (the Job still looks running).
		return true, &fault.Unavailable{What: "Kueue", Err: fmt.Errorf("no Kueue Workload for Job %s/%s yet", o.Namespace, o.Name)}
	}
	// A stop or a start is the owner's: a move off a quarantined node under
	// way is forgotten (its next step finds the Workload changed).
	active, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{kapi.AnnotationMovingOff: nil}},
		"spec": map[string]any{"active": run}})
	for _, w := range list.Items {
		if _, err := k.dyn.Resource(kapi.KueueWorkloads).Namespace(o.Namespace).Patch(ctx, w.GetName(), types.MergePatchType, active, metav1.PatchOptions{FieldManager: kapi.FieldManager}); err != nil {
			return true, kapi.Classify(err, "Kueue Workload", w.GetName())
		}
	}
	ann := map[string]any{kapi.AnnotationStopped: "true"}
	if run {
		ann = map[string]any{kapi.AnnotationStopped: nil}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := k.dyn.Resource(gvr).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager}); err != nil {
		return true, kapi.Classify(err, "Job", o.Name)
	}
	return true, nil
}

// SetVMActive stops or starts a VM that Gantry queues (its VirtualMachine
// labelled for the queue, with a Kueue Workload of the same name): a stop
// deactivates the Kueue Workload (freeing its quota), halts the VM and says
// so on it; a start clears the mark and activates the Kueue Workload, and
// the VM starts once Kueue admits it again (syncVM). A VM without the label
// (made before Kueue was on) is halted or started as ever.
func (k *Kueue) SetVMActive(ctx context.Context, o workload.ObjectRef, run bool) (queued bool, err error) {
	vm, err := k.dyn.Resource(kapi.VMResource).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		return false, kapi.Classify(err, "VirtualMachine", o.Name)
	}
	if _, ok := vm.GetLabels()[quota.LabelQueueName]; !ok {
		return false, nil
	}
	ann := map[string]any{kapi.AnnotationStopped: nil}
	spec := map[string]any{}
	if !run {
		ann[kapi.AnnotationStopped] = "true"
		spec["runStrategy"] = "Halted"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": spec})
	markVM := func() error {
		if _, err := k.dyn.Resource(kapi.VMResource).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager}); err != nil {
			return kapi.Classify(err, "VirtualMachine", o.Name)
		}
		return nil
	}
	// The VM's mark goes on the side that syncVM, woken by the Workload's
	// change, reads right: a start clears it before the Workload is
	// active again (or the admission's sync could find it still stopped,
	// and no later change of the Workload would wake it), a stop sets it
	// after the Workload is inactive.
	if run {
		if err := markVM(); err != nil {
			return true, err
		}
	}
	active, _ := json.Marshal(map[string]any{"spec": map[string]any{"active": run}})
	if _, err := k.dyn.Resource(kapi.KueueWorkloads).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, active, metav1.PatchOptions{FieldManager: kapi.FieldManager}); err != nil && !apierrors.IsNotFound(err) {
		return true, kapi.Classify(err, "Kueue Workload", o.Name)
	}
	if !run {
		return true, markVM()
	}
	return true, nil
}

// SetFleetVMActive stops or starts a VM in a fleet (its FleetVM, with a
// Kueue Workload of the same name). A stop deactivates the Workload —
// Kueue evicts it, MultiKueue deletes its copies on the worker (the VM goes
// with its FleetVM there), and once no instance of the VM runs there
// Gantry gives the manager's quota back (workers.SyncVMs) — and then marks
// the FleetVM stopped. A start clears the status the last run's worker
// copied back, activates the Workload (queued and dispatched again) and
// then clears the mark. Each says so on the FleetVM last, so that a
// failure half way leaves the FleetVM looking as it was and the lifecycle
// loop tries again; until its mark is cleared no worker runs the VM.
func (k *Kueue) SetFleetVMActive(ctx context.Context, o workload.ObjectRef, run bool) error {
	res := k.dyn.Resource(kapi.FleetVMResource).Namespace(o.Namespace)
	if run {
		if _, err := res.Patch(ctx, o.Name, types.MergePatchType, []byte(`{"status":null}`), metav1.PatchOptions{FieldManager: kapi.FieldManager}, "status"); err != nil {
			return kapi.Classify(err, "FleetVM", o.Name)
		}
	}
	active, _ := json.Marshal(map[string]any{"spec": map[string]any{"active": run}})
	if _, err := k.dyn.Resource(kapi.KueueWorkloads).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, active, metav1.PatchOptions{FieldManager: kapi.FieldManager}); err != nil && !apierrors.IsNotFound(err) {
		return kapi.Classify(err, "Kueue Workload", o.Name)
	}
	ann := map[string]any{kapi.AnnotationStopped: nil}
	if !run {
		ann[kapi.AnnotationStopped] = "true"
	}
	mark, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	_, err := res.Patch(ctx, o.Name, types.MergePatchType, mark, metav1.PatchOptions{FieldManager: kapi.FieldManager})
	return kapi.Classify(err, "FleetVM", o.Name)
}
