package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// admissionManager is the field manager of Gantry's AdmissionCheck states:
// Kueue owns the rest of a Workload's status.
const admissionManager = "gantry-approval"

// SetAdmission implements workload.Cluster: Gantry's AdmissionCheck on the
// Kueue Workloads of workload id (found by the gantry.dev/workload-id label
// Kueue copies from the Job or pod) is set to a, by server-side apply of
// that one entry of status.admissionChecks. A Workload that does not carry
// the check (a queue without it) is left alone.
func (c *Cluster) SetAdmission(ctx context.Context, namespace, id string, a workload.Admission) error {
	list, err := c.dyn.Resource(kueueWorkloads).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
	if err != nil {
		return classify(err, "Kueue Workload", id)
	}
	for i := range list.Items {
		if err := c.setCheck(ctx, &list.Items[i], a); err != nil {
			return err
		}
	}
	return nil
}

// checkState is Gantry's AdmissionCheck entry on a Kueue Workload.
func checkState(u *unstructured.Unstructured) (state, message string, found bool) {
	checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
	for _, ch := range checks {
		m, _ := ch.(map[string]any)
		if m["name"] == quota.ApprovalCheck {
			state, _ = m["state"].(string)
			message, _ = m["message"].(string)
			return state, message, true
		}
	}
	return "", "", false
}

func (c *Cluster) setCheck(ctx context.Context, u *unstructured.Unstructured, a workload.Admission) error {
	state, msg, found := checkState(u)
	if !found || (state == a.State && msg == a.Message) {
		return nil
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
	_, err := c.dyn.Resource(kueueWorkloads).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, patch,
		metav1.PatchOptions{FieldManager: admissionManager, Force: ptr(true)}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "Kueue Workload", u.GetName())
	}
	return nil
}

// ActivateCheck marks Gantry's AdmissionCheck Active: Kueue holds every
// queue whose checks are not active, so it is said once Gantry's controller
// runs.
func (c *Cluster) ActivateCheck(ctx context.Context) error {
	patch, _ := json.Marshal(map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
		"metadata": map[string]any{"name": quota.ApprovalCheck},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": "Active", "status": "True", "reason": "Active", "message": "Gantry's approval controller is running",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), //clock:allow a condition on a Kubernetes object: the cluster compares wall times
		}}},
	})
	_, err := c.dyn.Resource(kueueResources["AdmissionCheck"]).Patch(ctx, quota.ApprovalCheck, types.ApplyPatchType, patch,
		metav1.PatchOptions{FieldManager: admissionManager, Force: ptr(true)}, "status")
	if err != nil {
		return classify(err, "AdmissionCheck", quota.ApprovalCheck)
	}
	return nil
}

// Decider says what Gantry's AdmissionCheck should say of a launch whose
// Kueue Workload is in namespace (workload.Service.Admission); State ""
// leaves the check as it is.
type Decider func(ctx context.Context, namespace, workloadID string) (workload.Admission, error)

// RunQueueController is Gantry's controller of Kueue's Workloads (on the
// leader, until ctx ends): every Kueue Workload is queued on a workqueue, on
// each change and every resync, with retries and backoff on failure. One
// carrying Gantry's AdmissionCheck gets the check decide says — Ready,
// Pending (held for approval) or Rejected; one that queues a VM starts or
// halts it as Kueue admits it or takes the admission back. The
// AdmissionCheck object is marked Active once it exists (quota.Syncer applies
// it).
//
// Only Kueue Workloads in namespaces starting with namespacePrefix (this
// install's teams) are decided: another install's are its own.
func (c *Cluster) RunQueueController(ctx context.Context, namespacePrefix string, decide Decider, resync time.Duration, log *slog.Logger) error {
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, resync)
	inf := f.ForResource(kueueWorkloads).Informer()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kueue_workloads", MetricsProvider: c.queues})
	defer q.ShutDown()
	enqueue := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil && strings.HasPrefix(k, namespacePrefix) {
			q.Add(k)
		}
	}
	update := func(o, n any) {
		ou, _ := o.(*unstructured.Unstructured)
		nu, _ := n.(*unstructured.Unstructured)
		if ou != nil && nu != nil && !admitted(ou) && admitted(nu) && strings.HasPrefix(nu.GetNamespace(), namespacePrefix) {
			if at, ok := admittedAt(nu); ok {
				c.obs.ObserveAdmission(at.Sub(nu.GetCreationTimestamp().Time))
			}
		}
		enqueue(n)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: update}); err != nil {
		return fmt.Errorf("kube: admission checks: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	go func() {
		// Active once the AdmissionCheck exists; tried until it does.
		for ctx.Err() == nil {
			if err := c.ActivateCheck(ctx); err == nil {
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
	for {
		key, quit := q.Get()
		if quit {
			return nil
		}
		err := c.checkOne(ctx, inf, key, decide)
		if err != nil && ctx.Err() == nil {
			log.Warn("admission check not set; retrying", "kueue_workload", key, "err", err)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

func (c *Cluster) checkOne(ctx context.Context, inf cache.SharedIndexInformer, key string, decide Decider) error {
	obj, exists, err := inf.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	if err := c.syncVM(ctx, u); err != nil {
		return err
	}
	if _, _, found := checkState(u); !found {
		return nil
	}
	id := u.GetLabels()[render.LabelWorkloadID]
	if id == "" {
		return nil // not Gantry's launch (or labelKeysToCopy lacks the label): its check stays Pending
	}
	a, err := decide(ctx, u.GetNamespace(), id)
	if err != nil || a.State == "" {
		return err
	}
	return c.setCheck(ctx, u, a)
}

// setVMActive stops or starts a VM that Gantry queues (its VirtualMachine
// labelled for the queue, with a Kueue Workload of the same name): a stop
// deactivates the Kueue Workload (freeing its quota), halts the VM and says
// so on it; a start activates the Kueue Workload and clears the mark, and
// the VM starts once Kueue admits it again (syncVM). A VM without the label
// (made before Kueue was on) is halted or started as ever.
func (c *Cluster) setVMActive(ctx context.Context, o workload.ObjectRef, run bool) (queued bool, err error) {
	vm, err := c.dyn.Resource(vmResource).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		return false, classify(err, "VirtualMachine", o.Name)
	}
	if _, ok := vm.GetLabels()[quota.LabelQueueName]; !ok {
		return false, nil
	}
	active, _ := json.Marshal(map[string]any{"spec": map[string]any{"active": run}})
	if _, err := c.dyn.Resource(kueueWorkloads).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, active, metav1.PatchOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsNotFound(err) {
		return true, classify(err, "Kueue Workload", o.Name)
	}
	ann := map[string]any{AnnotationStopped: nil}
	spec := map[string]any{}
	if !run {
		ann[AnnotationStopped] = "true"
		spec["runStrategy"] = "Halted"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": spec})
	if _, err := c.dyn.Resource(vmResource).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return true, classify(err, "VirtualMachine", o.Name)
	}
	return true, nil
}

// admitted reports whether Kueue admits a Workload now.
func admitted(u *unstructured.Unstructured) bool {
	if active, found, _ := unstructured.NestedBool(u.Object, "spec", "active"); found && !active {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Admitted" {
			return m["status"] == "True"
		}
	}
	return false
}

// admittedAt is when a Kueue Workload's Admitted condition last turned.
func admittedAt(u *unstructured.Unstructured) (time.Time, bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Admitted" {
			s, _ := m["lastTransitionTime"].(string)
			t, err := time.Parse(time.RFC3339, s)
			return t, err == nil
		}
	}
	return time.Time{}, false
}

// syncVM runs a queued VM while Kueue admits its Workload and halts it when
// Kueue takes the admission back (preemption, eviction) — unless Gantry
// stopped it. A Workload that queues no VM is left alone.
func (c *Cluster) syncVM(ctx context.Context, u *unstructured.Unstructured) error {
	name := ""
	for _, r := range u.GetOwnerReferences() {
		if r.Kind == "VirtualMachine" {
			name = r.Name
		}
	}
	if name == "" {
		return nil
	}
	vm, err := c.dyn.Resource(vmResource).Namespace(u.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return classify(err, "VirtualMachine", name)
	}
	want := "Halted"
	if admitted(u) && !evicted(u) && vm.GetAnnotations()[AnnotationStopped] == "" {
		want = "Always"
	}
	if current, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); current != want {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"runStrategy": want}})
		_, err = c.dyn.Resource(vmResource).Namespace(u.GetNamespace()).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if err != nil {
			return classify(err, "VirtualMachine", name)
		}
	}
	if evicted(u) {
		return c.release(ctx, u)
	}
	return nil
}

// evicted reports whether Kueue evicted a Workload that still holds its
// quota reservation (deactivated, preempted): the job's controller — for a
// VM, Gantry — must stop it and give the reservation back.
func evicted(u *unstructured.Unstructured) bool {
	if _, found, _ := unstructured.NestedMap(u.Object, "status", "admission"); !found {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Evicted" {
			return m["status"] == "True"
		}
	}
	return false
}

// release gives an evicted Workload's quota reservation back once its VM is
// halted, as Kueue's job integrations do for their jobs: no admission, and
// QuotaReserved and Admitted false. Kueue then queues it again (when active).
func (c *Cluster) release(ctx context.Context, u *unstructured.Unstructured) error {
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
	_, err := c.dyn.Resource(kueueWorkloads).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "Kueue Workload", u.GetName())
	}
	return nil
}

// HoldQueue implements workload.Cluster: the team's ClusterQueue gets
// stopPolicy Hold now (Kueue admits nothing new from it), ahead of the quota
// sync that keeps it so while the team's budget blocks launches.
func (c *Cluster) HoldQueue(ctx context.Context, t team.Name) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"stopPolicy": "Hold"}})
	_, err := c.dyn.Resource(kueueResources["ClusterQueue"]).Patch(ctx, quota.ClusterQueue(t), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "ClusterQueue", quota.ClusterQueue(t))
	}
	return nil
}
