package workers

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/render"
)

// SyncVMs runs a fleet's VMs, one pass at a time from the leader's loop
// (docs/fleets.md, "VMs in a fleet"). On each worker Gantry can reach,
// every FleetVM MultiKueue copied there gets its VirtualMachine — made once
// from its template, halted, owned by it, so that it goes with it — which
// runs while the worker's Kueue admits the FleetVM's Workload and halts
// when Kueue evicts it (kueue.RunVM, as for a VM queued on Gantry's own
// cluster); the VM's status is copied into the FleetVM's, and MultiKueue
// copies that to the manager's. In the manager, the Workload of a VM that
// Kueue evicted (its owner's stop, a preemption, a drain) gets its quota
// back once its worker runs no instance of the VM: never a VM in two
// clusters at once, and one on a worker Gantry cannot reach keeps its quota
// until the worker answers again.
func (m *Manager) SyncVMs(ctx context.Context) error {
	var errs []error
	states, _ := m.o.Workers.States()
	for _, c := range m.o.Workers.fleet.Clusters() {
		if dyn := m.o.Workers.get(c.Name).dyn; dyn != nil && states[c.Name].Reachable {
			if err := runWorkerVMs(ctx, dyn); err != nil {
				errs = append(errs, fmt.Errorf("worker %s: VMs: %w", c.Name, err))
			}
		}
	}
	return errors.Join(append(errs, m.releaseVMs(ctx))...)
}

// runWorkerVMs is SyncVMs on one worker.
func runWorkerVMs(ctx context.Context, dyn dynamic.Interface) error {
	managed := metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy}
	fvms, err := dyn.Resource(kapi.FleetVMResource).List(ctx, managed)
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
		if by, _, _ := unstructured.NestedString(f.Object, "spec", "managedBy"); by != "" || f.GetDeletionTimestamp() != nil {
			continue // a manager's own (this cluster is one too), or going
		}
		if err := runWorkerVM(ctx, dyn, f, have[f.GetNamespace()+"/"+f.GetName()]); err != nil {
			errs = append(errs, fmt.Errorf("FleetVM %s/%s: %w", f.GetNamespace(), f.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// runWorkerVM makes a FleetVM's VM when it has none, runs or halts it as
// the FleetVM's Workload there says, and copies its status.
func runWorkerVM(ctx context.Context, dyn dynamic.Interface, f, vm *unstructured.Unstructured) error {
	if vm == nil {
		made, err := makeVM(ctx, dyn, f)
		if err != nil {
			return err
		}
		vm = made
	}
	if name := f.GetLabels()[render.LabelPrebuiltWorkload]; name != "" {
		wl, err := dyn.Resource(kapi.KueueWorkloads).Namespace(f.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return kapi.Classify(err, "Kueue Workload", name)
		default:
			if err := kueue.RunVM(ctx, dyn, wl, vm.GetName()); err != nil {
				return err
			}
		}
	}
	status, _, _ := unstructured.NestedMap(vm.Object, "status")
	was, _, _ := unstructured.NestedMap(f.Object, "status")
	if equality.Semantic.DeepEqual(status, was) || (len(status) == 0 && len(was) == 0) {
		return nil
	}
	out := f.DeepCopy()
	out.Object["status"] = status
	_, err := dyn.Resource(kapi.FleetVMResource).Namespace(f.GetNamespace()).UpdateStatus(ctx, out, metav1.UpdateOptions{FieldManager: kapi.FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // changed or gone since the list: the next pass copies it
	}
	return kapi.Classify(err, "FleetVM", f.GetName())
}

// makeVM creates the VirtualMachine of a worker's FleetVM from its
// template, halted (RunVM starts it once the worker admits it), owned by
// the FleetVM.
func makeVM(ctx context.Context, dyn dynamic.Interface, f *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	tmpl, _, _ := unstructured.NestedMap(f.Object, "spec", "template")
	spec, _, _ := unstructured.NestedMap(tmpl, "spec")
	if spec == nil {
		return nil, errors.New("no spec.template.spec")
	}
	spec["runStrategy"] = "Halted"
	vm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": kapi.VMKind.GroupVersion().String(), "kind": kapi.VMKind.Kind, "spec": spec}}
	vm.SetName(f.GetName())
	vm.SetNamespace(f.GetNamespace())
	labels, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "labels")
	annotations, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "annotations")
	vm.SetLabels(labels)
	vm.SetAnnotations(annotations)
	vm.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: f.GetAPIVersion(), Kind: f.GetKind(), Name: f.GetName(), UID: f.GetUID(), Controller: kapi.Ptr(true)}})
	res := dyn.Resource(kapi.VMResource).Namespace(f.GetNamespace())
	out, err := res.Create(ctx, vm, metav1.CreateOptions{FieldManager: kapi.FieldManager, FieldValidation: "Strict"})
	if apierrors.IsAlreadyExists(err) {
		out, err = res.Get(ctx, f.GetName(), metav1.GetOptions{})
	}
	if err != nil {
		return nil, kapi.Classify(err, "VirtualMachine", f.GetName())
	}
	return out, nil
}

// releaseVMs gives back the manager's quota of each evicted VM's Workload
// once the VM runs nowhere (see SyncVMs).
func (m *Manager) releaseVMs(ctx context.Context) error {
	dyn := m.o.Cluster.Dynamic()
	fvms, err := dyn.Resource(kapi.FleetVMResource).List(ctx, metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy, ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		return nil // no FleetVM CRD in the manager: no VMs in the fleet
	}
	if err != nil {
		return fmt.Errorf("the manager's FleetVMs: %w", err)
	}
	var errs []error
	for _, f := range fvms.Items {
		wl, err := dyn.Resource(kapi.KueueWorkloads).Namespace(f.GetNamespace()).Get(ctx, f.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("the Kueue Workload of FleetVM %s/%s: %w", f.GetNamespace(), f.GetName(), err))
			continue
		}
		if !kueue.Evicted(wl) {
			continue
		}
		cluster, _, _ := unstructured.NestedString(wl.Object, "status", "clusterName")
		if cluster == "" {
			cluster = wl.GetAnnotations()[kapi.AnnotationDispatchedTo]
		}
		if cluster != "" {
			stopped, err := m.o.Workers.VMStopped(ctx, cluster, f.GetNamespace(), f.GetName())
			if err != nil || !stopped {
				if err != nil {
					errs = append(errs, fmt.Errorf("FleetVM %s/%s on %s: %w", f.GetNamespace(), f.GetName(), cluster, err))
				}
				continue
			}
		}
		if err := kueue.Release(ctx, dyn, wl); err != nil && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// VMStopped reports whether the worker runs no instance of the VM
// namespace/name: its VirtualMachine gone or halted, and its instance
// (VirtualMachineInstance, which outlives a deleted VM while it shuts
// down) gone. dispatch.Remote.
func (w *Workers) VMStopped(ctx context.Context, cluster, namespace, name string) (bool, error) {
	if _, listed := w.fleet.Get(cluster); !listed {
		return true, nil // no longer one of the fleet's: nothing there counts
	}
	dyn := w.get(cluster).dyn
	if dyn == nil {
		return false, fmt.Errorf("worker %s not read yet", cluster)
	}
	vm, err := dyn.Resource(kapi.VMResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, err
	default:
		if rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs != "Halted" {
			return false, nil
		}
	}
	_, err = dyn.Resource(kapi.VMIResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}
