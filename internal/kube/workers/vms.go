package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/render"
)

// AnnotationVMClusters lists, on a manager's FleetVM, the worker clusters
// Gantry made its VirtualMachine on (comma-separated): where an instance of
// it may still run, all of which must have none before its quota is given
// back.
const AnnotationVMClusters = "gantry.dev/vm-clusters"

// SyncVMs runs a fleet's VMs, one pass at a time from the leader's loop
// (docs/fleets.md, "VMs in a fleet"). The manager decides: a VM runs only
// on the worker its manager's Kueue Workload is admitted on, and not once
// its owner stopped it. On each worker Gantry can reach, every FleetVM copy
// MultiKueue made there of a manager's FleetVM gets its VirtualMachine —
// made from the manager's template (never from what the worker's copy
// says), halted, owned by the copy, so that it goes with it — which runs
// while that worker's Kueue admits the copy's Workload and the manager
// places it there, and halts otherwise (kueue.RunVM, as for a VM queued
// on Gantry's own cluster); the VM's status is copied into the copy's, and
// MultiKueue copies that to the manager's. In the manager, the Workload of
// a VM that Kueue evicted (its owner's stop, a preemption, a drain) gets
// its quota back once no worker it was made on runs an instance of it (a
// worker Gantry cannot reach counts as running it).
func (m *Manager) SyncVMs(ctx context.Context) error {
	// With no VMs in the manager the workers are still looked at: a VM
	// whose FleetVM went while its worker's copy stayed must not run on.
	want, err := m.placedVMs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	states, _ := m.o.Workers.States()
	for _, c := range m.o.Workers.fleet.Clusters() {
		if dyn := m.o.Workers.get(c.Name).dyn; dyn != nil && states[c.Name].Reachable {
			if err := m.runWorkerVMs(ctx, c.Name, dyn, want); err != nil {
				errs = append(errs, fmt.Errorf("worker %s: VMs: %w", c.Name, err))
			}
		}
	}
	return errors.Join(append(errs, m.releaseVMs(ctx, want))...)
}

// placedVM is a manager's FleetVM, its Kueue Workload (nil: none yet) and
// the worker the Workload is admitted on now ("": none).
type placedVM struct {
	fvm, wl *unstructured.Unstructured
	cluster string
}

// placedVMs reads the manager's FleetVMs and their Workloads, by
// namespace/name.
func (m *Manager) placedVMs(ctx context.Context) (map[string]placedVM, error) {
	dyn := m.o.Cluster.Dynamic()
	// Read from etcd, not the watch cache: the workers a VM was made on
	// (AnnotationVMClusters) must be as last written.
	fvms, err := dyn.Resource(kapi.FleetVMResource).List(ctx, metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy})
	if apierrors.IsNotFound(err) {
		return nil, nil // no FleetVM CRD in the manager: no VMs in the fleet
	}
	if err != nil {
		return nil, fmt.Errorf("the manager's FleetVMs: %w", err)
	}
	out := map[string]placedVM{}
	var errs []error
	for i := range fvms.Items {
		f := &fvms.Items[i]
		p := placedVM{fvm: f}
		wl, err := dyn.Resource(kapi.KueueWorkloads).Namespace(f.GetNamespace()).Get(ctx, f.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("the Kueue Workload of FleetVM %s/%s: %w", f.GetNamespace(), f.GetName(), err))
			continue
		default:
			p.wl = wl
			if kueue.Admitted(wl) && !kueue.Evicted(wl) {
				p.cluster, _, _ = unstructured.NestedString(wl.Object, "status", "clusterName")
			}
		}
		out[f.GetNamespace()+"/"+f.GetName()] = p
	}
	return out, errors.Join(errs...)
}

// runWorkerVMs is SyncVMs on one worker.
func (m *Manager) runWorkerVMs(ctx context.Context, cluster string, dyn dynamic.Interface, want map[string]placedVM) error {
	managed := metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy}
	fvms, err := dyn.Resource(kapi.FleetVMResource).List(ctx, managed)
	if apierrors.IsNotFound(err) {
		return nil // no FleetVM CRD there: MultiKueue reaches it not at all (docs/fleets.md)
	}
	if err != nil {
		return fmt.Errorf("list FleetVMs: %w", err)
	}
	if len(fvms.Items) == 0 {
		return nil
	}
	vms, err := dyn.Resource(kapi.VMResource).List(ctx, managed)
	if err != nil {
		return fmt.Errorf("list VirtualMachines: %w", err)
	}
	have := map[string]*unstructured.Unstructured{}
	for i := range vms.Items {
		have[vms.Items[i].GetNamespace()+"/"+vms.Items[i].GetName()] = &vms.Items[i]
	}
	var errs []error
	for i := range fvms.Items {
		f := &fvms.Items[i]
		key := f.GetNamespace() + "/" + f.GetName()
		p, ours := want[key]
		if by, _, _ := unstructured.NestedString(f.Object, "spec", "managedBy"); by != "" || f.GetDeletionTimestamp() != nil {
			continue // a manager's own (this cluster is one too), or going (its VM with it)
		}
		if !ours {
			// No manager's FleetVM of that name (deleted while MultiKueue
			// could not remove this copy, or never one): a VM Gantry made
			// for the copy is halted, never left running.
			if vm := have[key]; vm != nil && ownedBy(vm, f) {
				if err := haltVM(ctx, dyn, vm); err != nil {
					errs = append(errs, fmt.Errorf("FleetVM %s, no longer the manager's: %w", key, err))
				}
			}
			continue
		}
		if err := m.runWorkerVM(ctx, cluster, dyn, f, have[key], p); err != nil {
			errs = append(errs, fmt.Errorf("FleetVM %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// ownedBy says whether vm is the VM Gantry made for the FleetVM copy f.
func ownedBy(vm, f *unstructured.Unstructured) bool {
	ref := metav1.GetControllerOf(vm)
	return vm.GetDeletionTimestamp() == nil && ref != nil && ref.UID == f.GetUID()
}

// haltVM halts a VM that runs, on the VM as read (a conflict is retried at
// the next pass, on what changed it).
func haltVM(ctx context.Context, dyn dynamic.Interface, vm *unstructured.Unstructured) error {
	if rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs == "Halted" {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": vm.GetResourceVersion()}, "spec": map[string]any{"runStrategy": "Halted"}})
	_, err := dyn.Resource(kapi.VMResource).Namespace(vm.GetNamespace()).Patch(ctx, vm.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager})
	return kapi.Classify(err, "VirtualMachine", vm.GetName())
}

// runWorkerVM makes the VM of a worker's FleetVM copy when it has none,
// runs or halts it as the copy's Workload there and the manager say, and
// copies its status.
func (m *Manager) runWorkerVM(ctx context.Context, cluster string, dyn dynamic.Interface, f, vm *unstructured.Unstructured, p placedVM) error {
	if vm != nil && !ownedBy(vm, f) {
		return nil // an earlier copy's, going with it: the next pass makes this one's
	}
	if vm == nil {
		if err := m.noteVMCluster(ctx, p.fvm, cluster); err != nil {
			return err
		}
		made, err := makeVM(ctx, dyn, f, p.fvm)
		if err != nil {
			return err
		}
		vm = made
	}
	// The worker's Workload for this copy is MultiKueue's copy of the
	// manager's, of the same name — never the one the copy's label names,
	// which whoever may write FleetVMs there could point at another's
	// Workload (to run under its admission, or give its quota back).
	name := p.fvm.GetName()
	if label := f.GetLabels()[render.LabelPrebuiltWorkload]; label != name {
		return haltVM(ctx, dyn, vm) // not the copy MultiKueue made
	}
	wl, err := dyn.Resource(kapi.KueueWorkloads).Namespace(f.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// No Workload there (not yet, or deleted): nothing admits the VM
		// on that worker, so it does not run.
		if err := haltVM(ctx, dyn, vm); err != nil {
			return err
		}
	case err != nil:
		return kapi.Classify(err, "Kueue Workload", name)
	default:
		hold := p.cluster != cluster || p.fvm.GetAnnotations()[kapi.AnnotationStopped] != ""
		if err := kueue.RunVM(ctx, dyn, wl, vm.GetName(), kueue.VMRun{Hold: hold, AfterInstance: true}); err != nil {
			return err
		}
	}
	status, _, _ := unstructured.NestedMap(vm.Object, "status")
	if len(status) == 0 {
		// KubeVirt has said nothing of it yet: said so, so that what
		// MultiKueue copies back replaces a status an earlier copy of the
		// VM left on the manager's FleetVM (before a move or an eviction).
		status = map[string]any{"printableStatus": "Provisioning"}
	}
	was, _, _ := unstructured.NestedMap(f.Object, "status")
	if equality.Semantic.DeepEqual(status, was) {
		return nil
	}
	out := f.DeepCopy()
	out.Object["status"] = status
	_, err = dyn.Resource(kapi.FleetVMResource).Namespace(f.GetNamespace()).UpdateStatus(ctx, out, metav1.UpdateOptions{FieldManager: kapi.FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // changed or gone since the list: the next pass copies it
	}
	return kapi.Classify(err, "FleetVM", f.GetName())
}

// noteVMCluster adds cluster to the manager FleetVM's
// AnnotationVMClusters, before its VM is made there.
func (m *Manager) noteVMCluster(ctx context.Context, fvm *unstructured.Unstructured, cluster string) error {
	on := vmClusters(fvm)
	if slices.Contains(on, cluster) {
		return nil
	}
	on = append(on, cluster)
	slices.Sort(on)
	return m.setVMClusters(ctx, fvm, strings.Join(on, ","))
}

// setVMClusters writes a manager FleetVM's AnnotationVMClusters ("":
// removes it), as it was read.
func (m *Manager) setVMClusters(ctx context.Context, fvm *unstructured.Unstructured, on string) error {
	var v any
	if on != "" {
		v = on
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": fvm.GetResourceVersion(), "annotations": map[string]any{AnnotationVMClusters: v}}})
	out, err := m.o.Cluster.Dynamic().Resource(kapi.FleetVMResource).Namespace(fvm.GetNamespace()).Patch(ctx, fvm.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager})
	if err != nil {
		return kapi.Classify(err, "FleetVM", fvm.GetName())
	}
	out.DeepCopyInto(fvm)
	return nil
}

// vmClusters is a manager FleetVM's AnnotationVMClusters.
func vmClusters(fvm *unstructured.Unstructured) []string {
	if on := fvm.GetAnnotations()[AnnotationVMClusters]; on != "" {
		return strings.Split(on, ",")
	}
	return nil
}

// makeVM creates the VirtualMachine of a worker's FleetVM copy from the
// manager's FleetVM's template — what Gantry rendered, not what the
// worker's copy says — halted (RunVM starts it), owned by the copy.
func makeVM(ctx context.Context, dyn dynamic.Interface, cp, manager *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	tmpl, _, _ := unstructured.NestedMap(manager.Object, "spec", "template")
	spec, _, _ := unstructured.NestedMap(tmpl, "spec")
	if spec == nil {
		return nil, errors.New("the manager's FleetVM has no spec.template.spec")
	}
	spec["runStrategy"] = "Halted"
	vm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": kapi.VMKind.GroupVersion().String(), "kind": kapi.VMKind.Kind, "spec": spec}}
	vm.SetName(cp.GetName())
	vm.SetNamespace(cp.GetNamespace())
	labels, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "labels")
	annotations, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "annotations")
	vm.SetLabels(labels)
	vm.SetAnnotations(annotations)
	vm.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: cp.GetAPIVersion(), Kind: cp.GetKind(), Name: cp.GetName(), UID: cp.GetUID(), Controller: kapi.Ptr(true)}})
	res := dyn.Resource(kapi.VMResource).Namespace(cp.GetNamespace())
	out, err := res.Create(ctx, vm, metav1.CreateOptions{FieldManager: kapi.FieldManager, FieldValidation: "Strict"})
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("a VirtualMachine %s is there already, not this copy's: the next pass looks again", cp.GetName())
	}
	if err != nil {
		return nil, kapi.Classify(err, "VirtualMachine", cp.GetName())
	}
	return out, nil
}

// releaseVMs gives back the manager's quota of each evicted VM's Workload
// once no worker its VM was made on (nor the one it was last placed on)
// runs an instance of it, and clears what its last copies said (their
// status, the clusters noted): the next run's copy says it afresh.
func (m *Manager) releaseVMs(ctx context.Context, want map[string]placedVM) error {
	var errs []error
	for key, p := range want {
		if p.wl == nil || !kueue.Evicted(p.wl) {
			continue
		}
		on := vmClusters(p.fvm)
		name, _, _ := unstructured.NestedString(p.wl.Object, "status", "clusterName")
		for _, c := range []string{name, p.wl.GetAnnotations()[kapi.AnnotationDispatchedTo]} {
			if c != "" && !slices.Contains(on, c) {
				on = append(on, c)
			}
		}
		stopped := true
		for _, c := range on {
			ok, err := m.o.Workers.VMStopped(ctx, c, p.fvm.GetNamespace(), p.fvm.GetName())
			if err != nil {
				errs = append(errs, fmt.Errorf("FleetVM %s on %s: %w", key, c, err))
			}
			stopped = stopped && ok && err == nil
		}
		if !stopped {
			continue
		}
		dyn := m.o.Cluster.Dynamic()
		var nf *fault.NotFound
		var cf *fault.Conflict
		out, err := dyn.Resource(kapi.FleetVMResource).Namespace(p.fvm.GetNamespace()).Patch(ctx, p.fvm.GetName(), types.MergePatchType, []byte(`{"status":null}`), metav1.PatchOptions{FieldManager: kapi.FieldManager}, "status")
		switch {
		case apierrors.IsNotFound(err):
			continue // deleted: its Workload goes with it
		case err != nil:
			errs = append(errs, fmt.Errorf("FleetVM %s: clear its last copy's status: %w", key, err))
			continue
		}
		out.DeepCopyInto(p.fvm) // the annotation's write below is on this version
		if len(vmClusters(p.fvm)) > 0 {
			if err := m.setVMClusters(ctx, p.fvm, ""); errors.As(err, &nf) || errors.As(err, &cf) {
				continue // deleted, or changed since: the next pass looks again
			} else if err != nil {
				errs = append(errs, fmt.Errorf("FleetVM %s: %w", key, err))
				continue
			}
		}
		if err := kueue.Release(ctx, dyn, p.wl); err != nil && !errors.As(err, &cf) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// VMStopped reports whether the worker runs no instance of the VM
// namespace/name: its VirtualMachine gone or halted, and its instance
// (VirtualMachineInstance, which outlives a deleted VM while it shuts
// down) gone. A worker not read, or out of reach at the last read, may run
// one: false. dispatch.Remote.
func (w *Workers) VMStopped(ctx context.Context, cluster, namespace, name string) (bool, error) {
	if _, listed := w.fleet.Get(cluster); !listed {
		return true, nil // no longer one of the fleet's: nothing there counts
	}
	states, _ := w.States()
	dyn := w.get(cluster).dyn
	if dyn == nil || !states[cluster].Reachable {
		return false, nil // cannot tell: it may run there
	}
	vm, err := dyn.Resource(kapi.VMResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("worker %s: VirtualMachine %s/%s: %w", cluster, namespace, name, err)
	default:
		if rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs != "Halted" {
			return false, nil
		}
	}
	_, err = dyn.Resource(kapi.VMIResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("worker %s: VirtualMachineInstance %s/%s: %w", cluster, namespace, name, err)
	}
	return false, nil
}
