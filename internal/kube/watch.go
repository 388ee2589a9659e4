package kube

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/workload"
)

// Observation is what the cluster says about one workload.
type Observation struct {
	WorkloadID string
	Phase      workload.Status // Pending, Queued, Scheduled, Running, Succeeded or Failed ("": nothing to say)
	Reason     string          // why it is pending, queued or failed, in the cluster's words
	Node       string
	Position   int // Queued: its place in its team's queue (1: next), 0 if not known
	// ExitCode is what its main container exited with, when it has
	// Succeeded or Failed and a pod of it says (nil otherwise).
	ExitCode *int
	// Evicted are the UIDs of its Job's pods the cluster disrupted (the
	// DisruptionTarget condition: evicted, preempted, their node drained
	// or reclaimed), terminating ones included.
	Evicted []string
}

// byWorkload indexes the informers' caches by the workload id label.
const byWorkload = "workload"

func workloadIndex(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if id := m.GetLabels()[render.LabelWorkloadID]; id != "" {
		return []string{id}, nil
	}
	return nil, nil
}

// Watcher keeps informers (watches, not polling) on the pods, Jobs and
// KubeVirt VirtualMachines Gantry manages, indexed by workload id, so that a
// workload's state can be read from memory.
type Watcher struct {
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	jobs    cache.SharedIndexInformer
	vmf     dynamicinformer.DynamicSharedInformerFactory // nil without KubeVirt
	vms     cache.SharedIndexInformer
	kf      dynamicinformer.DynamicSharedInformerFactory // nil without Kueue
	queued  cache.SharedIndexInformer                    // Kueue's Workloads
	obs     Observer
}

// Watcher returns informers on the cluster's Gantry-managed objects; resync
// re-delivers every object that often (0: never).
func (c *Cluster) Watcher(resync time.Duration) (*Watcher, error) {
	managed := func(o *metav1.ListOptions) { o.LabelSelector = render.LabelManagedBy + "=" + render.ManagedBy }
	f := informers.NewSharedInformerFactoryWithOptions(c.core, resync, informers.WithTweakListOptions(managed))
	w := &Watcher{factory: f, pods: f.Core().V1().Pods().Informer(), jobs: f.Batch().V1().Jobs().Informer(), obs: c.obs}
	infs := []cache.SharedIndexInformer{w.pods, w.jobs}
	if c.hasKubeVirt() {
		w.vmf = dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.dyn, resync, metav1.NamespaceAll, managed)
		w.vms = w.vmf.ForResource(vmResource).Informer()
		infs = append(infs, w.vms)
	}
	for _, inf := range infs {
		if err := inf.AddIndexers(cache.Indexers{byWorkload: workloadIndex}); err != nil {
			return nil, fmt.Errorf("kube: index informer: %w", err)
		}
	}
	if c.kueue {
		w.kf = dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, resync)
		w.queued = w.kf.ForResource(kueueWorkloads).Informer()
		if err := w.queued.AddIndexers(cache.Indexers{byOwner: kueueOwnerIndex}); err != nil {
			return nil, fmt.Errorf("kube: index informer: %w", err)
		}
	}
	return w, nil
}

// OnChange calls changed with the workload id of every added, updated or
// deleted object. Call it before Run.
func (w *Watcher) OnChange(changed func(workloadID string)) error {
	h := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if ids, _ := workloadIndex(obj); len(ids) == 1 {
			changed(ids[0])
		}
	}
	funcs := cache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, n any) { h(n) }, DeleteFunc: h}
	// A pod whose conditions changed says when (to the second): how far
	// behind the cluster the informer is.
	if _, err := w.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		op, _ := o.(*corev1.Pod)
		np, _ := n.(*corev1.Pod)
		if op == nil || np == nil {
			return
		}
		if before, after := lastTransition(op), lastTransition(np); after.After(before) {
			w.obs.ObserveLag("pods", time.Since(after))
		}
	}}); err != nil {
		return fmt.Errorf("kube: watch: %w", err)
	}
	for _, inf := range []cache.SharedIndexInformer{w.pods, w.jobs, w.vms} {
		if inf == nil {
			continue
		}
		if _, err := inf.AddEventHandler(funcs); err != nil {
			return fmt.Errorf("kube: watch: %w", err)
		}
	}
	if w.queued != nil {
		// A Kueue Workload speaks for the Job or pod it admits: the change
		// is that object's workload's.
		owner := func(u *unstructured.Unstructured) {
			for _, r := range u.GetOwnerReferences() {
				inf := map[string]cache.SharedIndexInformer{"Job": w.jobs, "Pod": w.pods, "VirtualMachine": w.vms}[r.Kind]
				if inf == nil {
					continue
				}
				if o, exists, _ := inf.GetIndexer().GetByKey(u.GetNamespace() + "/" + r.Name); exists {
					if ids, _ := workloadIndex(o); len(ids) == 1 {
						changed(ids[0])
					}
				}
			}
		}
		k := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return
			}
			owner(u)
			// One workload admitted, queued or gone moves the others
			// waiting in its namespace's queue: their positions change.
			for _, o := range w.queued.GetStore().List() {
				if v, ok := o.(*unstructured.Unstructured); ok && v.GetNamespace() == u.GetNamespace() && v.GetName() != u.GetName() {
					if waiting, _ := queuedIn(v); waiting {
						owner(v)
					}
				}
			}
		}
		if _, err := w.queued.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: k, UpdateFunc: func(_, n any) { k(n) }, DeleteFunc: k}); err != nil {
			return fmt.Errorf("kube: watch: %w", err)
		}
	}
	return nil
}

// Run starts the informers, waits until their caches are filled (synced
// false if ctx ended first), and returns; stop ends them and waits.
func (w *Watcher) Run(ctx context.Context) (synced bool) {
	w.factory.Start(ctx.Done())
	ok := !slices.Contains(slices.Collect(maps.Values(w.factory.WaitForCacheSync(ctx.Done()))), false)
	for _, f := range []dynamicinformer.DynamicSharedInformerFactory{w.vmf, w.kf} {
		if f != nil {
			f.Start(ctx.Done())
			ok = ok && !slices.Contains(slices.Collect(maps.Values(f.WaitForCacheSync(ctx.Done()))), false)
		}
	}
	return ok
}

// Shutdown stops the informers and waits for their goroutines.
func (w *Watcher) Shutdown() {
	w.factory.Shutdown()
	if w.vmf != nil {
		w.vmf.Shutdown()
	}
	if w.kf != nil {
		w.kf.Shutdown()
	}
}

// Observe derives what the cluster says about a workload from the caches; ok
// is false when there is nothing to say (no objects yet, a stopped VM).
func (w *Watcher) Observe(id string) (Observation, bool) {
	if w.vms != nil {
		if vms, _ := w.vms.GetIndexer().ByIndex(byWorkload, id); len(vms) > 0 {
			if u, ok := vms[0].(*unstructured.Unstructured); ok {
				o, ok := ObserveVM(u)
				if _, queued := u.GetLabels()[quota.LabelQueueName]; queued && w.queued != nil && (!ok || o.Phase == "Pending") {
					if q, waiting := w.queuedBy(id, ownerKey(u.GetNamespace(), "VirtualMachine", u.GetName())); waiting {
						return q, true
					}
				}
				return o, ok
			}
		}
	}
	var jobs []*batchv1.Job
	var pods []*corev1.Pod
	if objs, _ := w.jobs.GetIndexer().ByIndex(byWorkload, id); len(objs) > 0 {
		for _, o := range objs {
			if j, ok := o.(*batchv1.Job); ok {
				jobs = append(jobs, j)
			}
		}
	}
	objs, _ := w.pods.GetIndexer().ByIndex(byWorkload, id)
	var evicted []string
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if len(jobs) > 0 && disrupted(p) {
			evicted = append(evicted, string(p.UID))
		}
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	slices.Sort(evicted)
	o, ok := Observe(id, jobs, pods)
	if len(evicted) > 0 {
		o.WorkloadID, o.Evicted, ok = id, evicted, true // Phase "" when that is all there is to say
	}
	if w.queued != nil && (!ok || o.Phase == "" || o.Phase == "Pending") {
		if q, waiting := w.queuedFor(id, jobs, pods); waiting {
			q.Evicted = evicted
			return q, true
		}
	}
	return o, ok
}

// disrupted reports whether the cluster disrupted a pod (DisruptionTarget).
func disrupted(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// queuedFor says whether Kueue holds the workload's Job or a pod of it in
// its queue, why, and where.
func (w *Watcher) queuedFor(id string, jobs []*batchv1.Job, pods []*corev1.Pod) (Observation, bool) {
	var keys []string
	for _, j := range jobs {
		keys = append(keys, ownerKey(j.Namespace, "Job", j.Name))
	}
	for _, p := range pods {
		keys = append(keys, ownerKey(p.Namespace, "Pod", p.Name))
	}
	return w.queuedBy(id, keys...)
}

// queuedBy says whether a Kueue Workload owned by one of the objects keys
// name (ownerKey) waits for admission, why, and where.
func (w *Watcher) queuedBy(id string, keys ...string) (Observation, bool) {
	for _, k := range keys {
		objs, _ := w.queued.GetIndexer().ByIndex(byOwner, k)
		for _, obj := range objs {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			if waiting, reason := queuedIn(u); waiting {
				pos := queuePosition(w.queued.GetStore().List(), u)
				return Observation{WorkloadID: id, Phase: "Queued", Reason: kueueReason(reason, pos), Position: pos}, true
			}
		}
	}
	return Observation{}, false
}

// Observe derives a workload's phase from its Job (if any) and pods. ok is false
// when there is nothing to say yet. Only a Job's own conditions end a workload
// (Succeeded, Failed): a failed pod is retried by its Job (up to its backoff
// limit) or replaced by its Deployment or StatefulSet, so it speaks only while
// no other pod does, and then as Pending with its reason.
func Observe(id string, jobs []*batchv1.Job, pods []*corev1.Pod) (Observation, bool) {
	o := Observation{WorkloadID: id}
	for _, j := range jobs {
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				o.Phase, o.ExitCode = "Succeeded", exitCode(pods, corev1.PodSucceeded)
				return o, true
			case batchv1.JobFailed:
				o.Phase, o.Reason, o.ExitCode = "Failed", jobFailure(c, pods), exitCode(pods, corev1.PodFailed)
				return o, true
			}
		}
	}
	// The most advanced live pod speaks for the workload.
	best := -1
	var finished *corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			if finished == nil || p.CreationTimestamp.After(finished.CreationTimestamp.Time) {
				finished = p
			}
			continue
		}
		phase, reason, rank := podPhase(p)
		if rank > best {
			best, o.Phase, o.Reason, o.Node = rank, phase, reason, p.Spec.NodeName
		}
	}
	if best >= 0 {
		return o, true
	}
	if finished == nil || (len(jobs) > 0 && finished.Status.Phase == corev1.PodSucceeded) {
		return o, false // nothing yet, or a Job that is about to say it completed
	}
	_, reason, _ := podPhase(finished)
	o.Phase, o.Reason = "Pending", "a pod ended and is being replaced or retried"
	if reason != "" {
		o.Reason += ": " + reason
	}
	return o, true
}

func podPhase(p *corev1.Pod) (phase workload.Status, reason string, rank int) {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			if p.Status.Phase == corev1.PodFailed {
				return "Failed", "OOMKilled: the container used more memory than its limit", 5
			}
			// A pod that restarts its containers (a service, a notebook)
			// runs again: not the end of the workload.
			return "Scheduled", "OOMKilled: the container used more memory than its limit and is restarting", 2
		}
		if w := cs.State.Waiting; w != nil && (w.Reason == "ImagePullBackOff" || w.Reason == "ErrImagePull" || w.Reason == "CrashLoopBackOff") {
			return "Scheduled", strings.TrimSpace(w.Reason + ": " + w.Message), 2
		}
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return "Succeeded", "", 6
	case corev1.PodFailed:
		return "Failed", strings.TrimSpace(p.Status.Reason + " " + p.Status.Message), 5
	case corev1.PodRunning:
		return "Running", "", 4
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			if c.Status == corev1.ConditionTrue {
				return "Scheduled", "", 3
			}
			if c.Reason != "" {
				return "Pending", pendingReason(c.Reason, c.Message), 1
			}
		}
	}
	return "Pending", "", 0
}

// exitCode is the exit code of the first container of the newest pod that
// ended in phase (nil when none says).
func exitCode(pods []*corev1.Pod, phase corev1.PodPhase) *int {
	var newest *corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == phase && (newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = p
		}
	}
	if newest == nil || len(newest.Spec.Containers) == 0 {
		return nil
	}
	for _, cs := range newest.Status.ContainerStatuses {
		if cs.Name == newest.Spec.Containers[0].Name && cs.State.Terminated != nil {
			code := int(cs.State.Terminated.ExitCode)
			return &code
		}
	}
	return nil
}

func jobFailure(c batchv1.JobCondition, pods []*corev1.Pod) string {
	for _, p := range pods {
		if phase, reason, _ := podPhase(p); phase == "Failed" && strings.HasPrefix(reason, "OOMKilled") {
			return reason
		}
	}
	return strings.TrimSpace(c.Reason + ": " + c.Message)
}

// unboundClaim finds the claim a scheduler message says is missing or unbound.
var unboundClaim = regexp.MustCompile(`persistentvolumeclaim "([^"]+)" (?:not found|is being deleted)`)

// pendingReason says why a pod waits, plainly: waiting for a volume is said
// as such rather than in the scheduler's words ("persistentvolumeclaim … not
// found. not found", "pod has unbound immediate PersistentVolumeClaims").
func pendingReason(reason, message string) string {
	if m := unboundClaim.FindStringSubmatch(message); m != nil {
		return fmt.Sprintf("waiting for its volume %q: the claim is not yet bound to a volume (%s: %s)", m[1], reason, message)
	}
	if strings.Contains(message, "unbound immediate PersistentVolumeClaims") || strings.Contains(message, "unbound PersistentVolumeClaims") {
		return fmt.Sprintf("waiting for its volumes: a claim is not yet bound to a volume (%s: %s)", reason, message)
	}
	return fmt.Sprintf("%s: %s", reason, message)
}

// lastTransition is when the newest of a pod's conditions last changed.
func lastTransition(p *corev1.Pod) time.Time {
	var t time.Time
	for _, c := range p.Status.Conditions {
		if c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}
