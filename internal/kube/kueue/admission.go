package kueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/workload"
)

// admissionManager is the field manager of Gantry's AdmissionCheck states:
// Kueue owns the rest of a Workload's status.
const admissionManager = "gantry-approval"

// SetAdmission (workload.Cluster, through kube.Cluster): Gantry's AdmissionCheck on the
// Kueue Workloads of workload id (found by the gantry.dev/workload-id label
// Kueue copies from the Job or pod) is set to a, by server-side apply of
// that one entry of status.admissionChecks. A Workload that does not carry
// the check (a queue without it) is left alone.
func (k *Kueue) SetAdmission(ctx context.Context, namespace, id string, a workload.Admission) error {
	list, err := k.dyn.Resource(kapi.KueueWorkloads).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
	if err != nil {
		return kapi.Classify(err, "Kueue Workload", id)
	}
	for i := range list.Items {
		if _, _, found := CheckState(&list.Items[i]); !found {
			continue
		}
		if _, err := k.setCheck(ctx, &list.Items[i], a); err != nil {
			return err
		}
	}
	return nil
}

// setCheck applies Gantry's check entry on u as a says, adding it when Kueue
// has not listed it yet; gone reports that the Workload no longer exists.
func (k *Kueue) setCheck(ctx context.Context, u *unstructured.Unstructured, a workload.Admission) (gone bool, err error) {
	if state, msg, found := CheckState(u); found && state == a.State && msg == a.Message {
		return false, nil
	}
	if len(a.Message) > 32768 {
		a.Message = a.Message[:32768]
	}
	patch, _ := json.Marshal(map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
		"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
		"status": map[string]any{"admissionChecks": []any{map[string]any{
			"name": quota.ApprovalCheck, "state": a.State, "message": a.Message,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), //clock:allow a condition on a Kubernetes object: the cluster compares wall times
		}}},
	})
	_, err = k.dyn.Resource(kapi.KueueWorkloads).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, patch,
		metav1.PatchOptions{FieldManager: admissionManager, Force: kapi.Ptr(true)}, "status")
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, kapi.Classify(err, "Kueue Workload", u.GetName())
	}
	return false, nil
}

// ActivateCheck marks Gantry's AdmissionCheck Active: Kueue holds every
// queue whose checks are not active, so it is said once Gantry's controller
// runs.
func (k *Kueue) ActivateCheck(ctx context.Context) error {
	res := k.dyn.Resource(kapi.KueueResources["AdmissionCheck"])
	// Active already (by this Gantry or another): left as it is. Marked
	// again, its condition's new time is a write, and Kueue looks again at
	// every queue that names the check. A consistent read, not the watch
	// cache's: a check just deleted and made anew must not pass for the
	// old one, active.
	if cur, err := res.Get(ctx, quota.ApprovalCheck, metav1.GetOptions{}); err == nil && Condition(cur, "Active") {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
		"metadata": map[string]any{"name": quota.ApprovalCheck},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": "Active", "status": "True", "reason": "Active", "message": "Gantry's approval controller is running",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), //clock:allow a condition on a Kubernetes object: the cluster compares wall times
		}}},
	})
	_, err := res.Patch(ctx, quota.ApprovalCheck, types.ApplyPatchType, patch,
		metav1.PatchOptions{FieldManager: admissionManager, Force: kapi.Ptr(true)}, "status")
	if err != nil {
		return kapi.Classify(err, "AdmissionCheck", quota.ApprovalCheck)
	}
	return nil
}

// Decider says what Gantry's AdmissionCheck should say of a launch whose
// Kueue Workload is in namespace (workload.Service.Admission); State ""
// leaves the check as it is.
type Decider func(ctx context.Context, namespace, workloadID string) (workload.Admission, error)

// RunQueueController is Gantry's controller of Kueue's Workloads (on the
// leader, until ctx ends): every Kueue Workload is queued on a workqueue, on
// each change and every resync, with retries and backoff on failure. Each of
// Gantry's launches gets the check decide says — Ready, Pending (held for
// approval) or Rejected — as soon as its Workload appears, before Kueue
// lists the check (then kept as Kueue lists it); one that queues a VM starts or
// halts it as Kueue admits it or takes the admission back. The
// AdmissionCheck object is marked Active once it exists (quota.Syncer applies
// it).
//
// inf is an informer on Kueue's Workloads that its owner runs — the
// leader's watcher's (watch.Watcher.KueueWorkloads), so that the leader
// holds one watch and one cache of them, not one for each reader; it may
// drop a Workload's pod sets and managed fields, which the controller does
// not read. The controller adds its handler (removed when it returns) and
// queues every Workload the cache holds again each resync (0: never).
//
// Only Kueue Workloads in namespaces starting with namespacePrefix (this
// install's teams) are decided: another install's are its own.
func (k *Kueue) RunQueueController(ctx context.Context, inf cache.SharedIndexInformer, namespacePrefix string, decide Decider, resync time.Duration, log *slog.Logger) error {
	if inf == nil {
		return errors.New("kueue: admission checks: no informer on Kueue's Workloads")
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kueue_workloads", MetricsProvider: k.queues})
	defer q.ShutDown()
	enqueue := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil && strings.HasPrefix(k, namespacePrefix) {
			q.Add(k)
		}
	}
	update := func(o, n any) {
		ou, _ := o.(*unstructured.Unstructured)
		nu, _ := n.(*unstructured.Unstructured)
		if ou != nil && nu != nil && !Admitted(ou) && Admitted(nu) && strings.HasPrefix(nu.GetNamespace(), namespacePrefix) {
			if at, ok := AdmittedAt(nu); ok {
				k.obs.ObserveAdmission(at.Sub(nu.GetCreationTimestamp().Time))
			}
		}
		enqueue(n)
	}
	early := &earlyChecks{uids: map[types.UID]bool{}}
	forget := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			early.forget(u.GetUID())
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: update, DeleteFunc: forget})
	if err != nil {
		return fmt.Errorf("kueue: admission checks: %w", err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }() // nothing to do when it fails: the informer has stopped
	if resync > 0 {
		// The backstop: every Workload decided again each resync.
		go func() {
			t := time.NewTicker(resync)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					for _, key := range inf.GetStore().ListKeys() {
						if strings.HasPrefix(key, namespacePrefix) {
							q.Add(key)
						}
					}
				}
			}
		}()
	}
	go func() {
		// Active once the AdmissionCheck exists; tried until it does.
		for ctx.Err() == nil {
			if err := k.ActivateCheck(ctx); err == nil {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	// Several workers: a burst of launches is a burst of Workloads, each
	// waiting on its check (docs/benchmarks.md times the check's stage for
	// 100 at once). The queue never hands one key to two workers at a time.
	var wg sync.WaitGroup
	for range checkWorkers {
		wg.Go(func() {
			for {
				key, quit := q.Get()
				if quit {
					return
				}
				err := k.checkOne(ctx, inf, key, decide, early)
				var conflict *fault.Conflict
				switch {
				case err != nil && ctx.Err() == nil && errors.As(err, &conflict):
					// Written over while it worked: read again.
					log.Debug("a Kueue Workload or its VM changed after it was read; retrying", "kueue_workload", key, "err", err)
					q.AddRateLimited(key)
				case err != nil && ctx.Err() == nil:
					log.Warn("admission check not set; retrying", "kueue_workload", key, "err", err)
					q.AddRateLimited(key)
				default:
					q.Forget(key)
				}
				q.Done(key)
			}
		})
	}
	wg.Wait()
	return nil
}

// checkWorkers is how many Kueue Workloads the controller works on at once.
const checkWorkers = 8

// earlyChecks are the Kueue Workloads Gantry added its check to before
// Kueue listed it. Each gets that once: a queue without the check (a
// platform team's edit) has Kueue take the entry away again, and adding it
// back on every event would never end.
type earlyChecks struct {
	mu   sync.Mutex
	uids map[types.UID]bool
}

func (e *earlyChecks) added(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.uids[uid]
}

func (e *earlyChecks) add(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.uids[uid] = true
}

func (e *earlyChecks) forget(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.uids, uid)
}

func (k *Kueue) checkOne(ctx context.Context, inf cache.SharedIndexInformer, key string, decide Decider, early *earlyChecks) error {
	obj, exists, err := inf.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	if err := k.syncVM(ctx, u); err != nil {
		return err
	}
	id := u.GetLabels()[render.LabelWorkloadID]
	if id == "" {
		return nil // not Gantry's launch (or labelKeysToCopy lacks the label): its check stays Pending
	}
	// The check is decided as soon as the Workload exists, before Kueue
	// lists it (Kueue adds it Pending once it syncs the queue's checks, and
	// keeps a state already there): Ready by the time quota is reserved,
	// Kueue admits in that reconcile instead of two rounds later
	// (docs/benchmarks.md, Seams 11). Every queue of this install's teams
	// carries the check; one that lost it gets the early entry once.
	_, _, listed := CheckState(u)
	if !listed && (Admitted(u) || early.added(u.GetUID())) {
		return nil
	}
	a, err := decide(ctx, u.GetNamespace(), id)
	if err != nil || a.State == "" {
		return err
	}
	gone, err := k.setCheck(ctx, u, a)
	if err != nil || listed || gone {
		return err
	}
	early.add(u.GetUID())
	return nil
}

// syncVM runs a queued VM while Kueue admits its Workload and halts it when
// Kueue takes the admission back (preemption, eviction) — unless Gantry
// stopped it (RunVM). A Workload that queues no VM is left alone.
func (k *Kueue) syncVM(ctx context.Context, u *unstructured.Unstructured) error {
	name := ""
	for _, r := range u.GetOwnerReferences() {
		if r.Kind == "VirtualMachine" {
			name = r.Name
		}
	}
	if name == "" {
		return nil
	}
	return RunVM(ctx, k.dyn, u, name, VMRun{})
}

// VMRun is what RunVM weighs beside Kueue's word.
type VMRun struct {
	// Hold halts the VM whatever Kueue says: a fleet's manager has not
	// placed it on this cluster (or its owner stopped it there).
	Hold bool
	// AfterInstance gives an evicted Workload's quota back only once the
	// VM's instance (VirtualMachineInstance) is gone, not as soon as the
	// VM is halted: on a worker, where its Kueue would otherwise admit
	// other work onto GPUs the VM still holds.
	AfterInstance bool
}

// RunVM runs the VirtualMachine name (in u's namespace) while Kueue admits
// u, the Workload that queues it, and halts it when Kueue takes the
// admission back — unless Gantry stopped it (kapi.AnnotationStopped on the
// VM) or o holds it; once an evicted u's VM is halted, u's quota is given
// back (Release; with o.AfterInstance, once its instance is gone too). The
// VM is written only as it was read (its resourceVersion): a conflict is
// retried. A VM not there (yet, or any more) is left alone. On Gantry's
// own cluster for a VM it queues there, and on a worker for a FleetVM's VM
// (workers.SyncVMs).
func RunVM(ctx context.Context, dyn dynamic.Interface, u *unstructured.Unstructured, name string, o VMRun) error {
	vm, err := dyn.Resource(kapi.VMResource).Namespace(u.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return kapi.Classify(err, "VirtualMachine", name)
	}
	want := "Halted"
	if Admitted(u) && !Evicted(u) && vm.GetAnnotations()[kapi.AnnotationStopped] == "" && !o.Hold {
		want = "Always"
	}
	if current, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); current != want {
		// On the VM as read: a stop (SetVMActive) that lands between the
		// read and this write makes it a conflict, retried on what the stop
		// left, instead of starting the VM its owner just stopped.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": vm.GetResourceVersion()},
			"spec": map[string]any{"runStrategy": want}})
		_, err = dyn.Resource(kapi.VMResource).Namespace(u.GetNamespace()).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager})
		if err != nil {
			return kapi.Classify(err, "VirtualMachine", name)
		}
	}
	if !Evicted(u) {
		return nil
	}
	if o.AfterInstance {
		_, err := dyn.Resource(kapi.VMIResource).Namespace(u.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			return nil // still shutting down: the next pass looks again
		case !apierrors.IsNotFound(err):
			return kapi.Classify(err, "VirtualMachineInstance", name)
		}
	}
	return Release(ctx, dyn, u)
}

// Release gives an evicted Workload's quota reservation back once what it
// admitted has stopped, as Kueue's job integrations do for their jobs: no
// admission, and QuotaReserved and Admitted false. Kueue then queues it
// again (when active).
func Release(ctx context.Context, dyn dynamic.Interface, u *unstructured.Unstructured) error {
	now := time.Now().UTC().Format(time.RFC3339) //clock:allow a condition on a Kubernetes object: the cluster compares wall times
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for i, cond := range conds {
		m, _ := cond.(map[string]any)
		switch m["type"] {
		case "QuotaReserved", "Admitted":
			m["status"], m["reason"], m["message"], m["lastTransitionTime"] = "False", "Pending", "The VM was halted after its eviction", now
			conds[i] = m
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
		"status": map[string]any{"admission": nil, "conditions": conds}})
	_, err := dyn.Resource(kapi.KueueWorkloads).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return kapi.Classify(err, "Kueue Workload", u.GetName())
	}
	return nil
}
