// Package watch owns Gantry's view of the cluster's state: informers (watches,
// not polling) on the pods, Jobs, KubeVirt VirtualMachines and Kueue
// Workloads Gantry manages, indexed by workload id (Watcher), and what they
// say about a workload (Observe, ObserveVM): its phase, why it waits or
// failed, its node, its place in its team's queue and the pods the cluster
// disrupted — and the cached Jobs themselves, which the lifecycle loop
// converges (Jobs).
package watch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
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
	// NodeGroups are the node groups of its running pods' nodes, one per
	// pod ("" for a node in none), when the cluster scales node groups.
	NodeGroups []string
	Position   int // Queued: its place in its team's queue (1: next), 0 if not known
	// Cluster is the worker cluster a dispatched Job runs on (its Kueue
	// Workload's status.clusterName), HourPrice the run's price per hour
	// there and GPUHourPrice that cluster's price per GPU-hour for it, as
	// the dispatcher chose it (0: not said; releases before the hourly
	// price said only the GPU-hour's).
	Cluster                 string
	HourPrice, GPUHourPrice float64
	// ExitCode is what its main container exited with, when it has
	// Succeeded or Failed and a pod of it says (nil otherwise).
	ExitCode *int
	// Evicted are the UIDs of its Job's pods the cluster disrupted (the
	// DisruptionTarget condition: evicted, preempted, their node drained
	// or reclaimed), terminating ones included.
	Evicted []string
	// At is when the cluster says Phase began, Running, Succeeded or
	// Failed: a Job's completion or failure, its pod's containers started
	// or finished (zero: not said). Metering counts from it.
	At time.Time
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
	fvms    cache.SharedIndexInformer                    // FleetVMs, in a fleet's manager; nil otherwise
	kf      dynamicinformer.DynamicSharedInformerFactory // nil without Kueue
	queued  cache.SharedIndexInformer                    // Kueue's Workloads
	obs     Observer
	// capacity says why an unschedulable pod waits for machines (nil: no
	// node groups are scaled here); unhear removes the Watcher's handler.
	capacity Explainer
	unhear   func()

	// orders are the waiting workloads' positions (kueue.Positions) per
	// queue (kueue.QueueKey), kept until a workload of that queue changes:
	// ordering a queue of hundreds on every observation was half of gantry
	// dev's CPU under a burst of launches.
	ordersMu sync.Mutex
	orders   map[string]map[string]int
}

// Options are what a Watcher is made of.
type Options struct {
	Core    kubernetes.Interface // required
	Dynamic dynamic.Interface    // required
	// Resync re-delivers every object that often (0: never).
	Resync time.Duration
	// KubeVirt watches VirtualMachines too; Kueue watches Kueue's
	// Workloads (what queues a workload and where); FleetVMs, in a fleet's
	// manager, the FleetVMs of VMs run on its workers.
	KubeVirt, Kueue, FleetVMs bool
	// Observer is told how far behind the cluster the informers are
	// (required).
	Observer Observer
	// Capacity, when the cluster scales node groups, says why a pod the
	// scheduler cannot place waits for machines; its reason replaces the
	// scheduler's.
	Capacity Explainer
}

// Explainer says why a pod the scheduler cannot place waits for capacity
// (the node autoscaler's side: a machine booting, a group at its max), and
// tells when that may have changed until remove is called. It runs on its
// own (every replica keeps one); the Watcher only asks it.
type Explainer interface {
	Explain(p *corev1.Pod) (reason string, ok bool)
	// NodeGroup is the node group of a node ("" when it is in none or not
	// known).
	NodeGroup(node string) string
	OnChange(changed func()) (remove func(), err error)
}

// Observer is told how far the informers lag behind the cluster.
type Observer interface {
	ObserveLag(resource string, lag time.Duration)
}

// New returns informers on the cluster's Gantry-managed objects.
func New(o Options) (*Watcher, error) {
	if o.Core == nil || o.Dynamic == nil || o.Observer == nil {
		return nil, errors.New("watch: clients and an observer are required")
	}
	resync := o.Resync
	managed := func(o *metav1.ListOptions) { o.LabelSelector = render.LabelManagedBy + "=" + render.ManagedBy }
	f := informers.NewSharedInformerFactoryWithOptions(o.Core, resync, informers.WithTweakListOptions(managed))
	w := &Watcher{factory: f, pods: f.Core().V1().Pods().Informer(), jobs: f.Batch().V1().Jobs().Informer(), obs: o.Observer, capacity: o.Capacity}
	infs := []cache.SharedIndexInformer{w.pods, w.jobs}
	if o.KubeVirt || o.FleetVMs {
		w.vmf = dynamicinformer.NewFilteredDynamicSharedInformerFactory(o.Dynamic, resync, metav1.NamespaceAll, managed)
	}
	if o.KubeVirt {
		w.vms = w.vmf.ForResource(kapi.VMResource).Informer()
		infs = append(infs, w.vms)
	}
	if o.FleetVMs {
		w.fvms = w.vmf.ForResource(kapi.FleetVMResource).Informer()
		infs = append(infs, w.fvms)
	}
	for _, inf := range infs {
		if err := inf.AddIndexers(cache.Indexers{byWorkload: workloadIndex}); err != nil {
			return nil, fmt.Errorf("watch: index informer: %w", err)
		}
		if err := inf.SetTransform(slim); err != nil {
			return nil, fmt.Errorf("watch: informer transform: %w", err)
		}
	}
	if o.Kueue {
		w.kf = dynamicinformer.NewDynamicSharedInformerFactory(o.Dynamic, resync)
		w.queued = w.kf.ForResource(kapi.KueueWorkloads).Informer()
		if err := w.queued.AddIndexers(cache.Indexers{kueue.ByOwner: kueue.OwnerIndex, kueue.ByQueue: kueue.QueueIndex}); err != nil {
			return nil, fmt.Errorf("watch: index informer: %w", err)
		}
		if err := w.queued.SetTransform(slimWorkload); err != nil {
			return nil, fmt.Errorf("watch: informer transform: %w", err)
		}
	}
	return w, nil
}

// slim drops from a cached object what no reader of the caches uses, its
// managed fields (often a third of it), so that the thousands of objects a
// busy cluster holds stay small. The caches are read, never written back.
func slim(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// slimWorkload is slim for a Kueue Workload, which also loses its pod sets
// (a copy of each pod template): the cache is read for its labels, queue,
// priority, activity, owner, annotations, UID, resourceVersion and status
// alone (queue positions here; the admission checks' controller,
// kueue.RunQueueController). The informer holds every Workload of the
// cluster, not only Gantry's.
func slimWorkload(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		unstructured.RemoveNestedField(u.Object, "spec", "podSets")
	}
	return slim(obj)
}

// KueueWorkloads is the informer on every Kueue Workload of the cluster
// (pod sets and managed fields dropped), nil without Kueue: the leader's
// one cache of them, which the admission checks' controller shares
// (kueue.RunQueueController). It runs with the Watcher (Run, Shutdown).
func (w *Watcher) KueueWorkloads() cache.SharedIndexInformer { return w.queued }

// Jobs are the Jobs Gantry manages as the cache holds them (kube.JobCache:
// what the lifecycle loop converges); filled is false until the cache is.
func (w *Watcher) Jobs() (jobs []*batchv1.Job, filled bool) {
	if !w.jobs.HasSynced() {
		return nil, false
	}
	objs := w.jobs.GetStore().List()
	jobs = make([]*batchv1.Job, 0, len(objs))
	for _, o := range objs {
		if j, ok := o.(*batchv1.Job); ok {
			jobs = append(jobs, j)
		}
	}
	return jobs, true
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
		return fmt.Errorf("watch: event handler: %w", err)
	}
	for _, inf := range []cache.SharedIndexInformer{w.pods, w.jobs, w.vms, w.fvms} {
		if inf == nil {
			continue
		}
		if _, err := inf.AddEventHandler(funcs); err != nil {
			return fmt.Errorf("watch: event handler: %w", err)
		}
	}
	if w.capacity != nil {
		// The machines changed: every pod waiting for them may say
		// something new.
		remove, err := w.capacity.OnChange(func() {
			for _, o := range w.pods.GetStore().List() {
				if p, ok := o.(*corev1.Pod); ok && p.Status.Phase == corev1.PodPending && p.Spec.NodeName == "" {
					h(p)
				}
			}
		})
		if err != nil {
			return err
		}
		w.unhear = remove
	}
	if w.queued != nil {
		// A Kueue Workload speaks for the Job or pod it admits: the change
		// is that object's workload's.
		owner := func(u *unstructured.Unstructured) {
			for _, r := range u.GetOwnerReferences() {
				inf := map[string]cache.SharedIndexInformer{"Job": w.jobs, "Pod": w.pods, "VirtualMachine": w.vms, kapi.FleetVMKind.Kind: w.fvms}[r.Kind]
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
			// waiting in its queue: their positions change. The queue is
			// ordered again when one of them is next observed (the
			// indexer holds this change before handlers hear of it).
			queue, _, _ := unstructured.NestedString(u.Object, "spec", "queueName")
			key := kueue.QueueKey(u.GetNamespace(), queue)
			w.ordersMu.Lock()
			delete(w.orders, key)
			w.ordersMu.Unlock()
			same, err := w.queued.GetIndexer().ByIndex(kueue.ByQueue, key)
			if err != nil {
				return
			}
			for _, o := range same {
				if v, ok := o.(*unstructured.Unstructured); ok && v.GetName() != u.GetName() {
					owner(v)
				}
			}
		}
		if _, err := w.queued.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: k, UpdateFunc: func(_, n any) { k(n) }, DeleteFunc: k}); err != nil {
			return fmt.Errorf("watch: event handler: %w", err)
		}
	}
	return nil
}

// Run starts the informers, waits until their caches are filled (synced
// false if ctx ended first), and returns; stop ends them and waits.
func (w *Watcher) Run(ctx context.Context) (synced bool) {
	// Every informer starts at once (the Kueue Workloads' feeds the
	// admission checks too), then the caches are waited for.
	w.factory.Start(ctx.Done())
	for _, f := range []dynamicinformer.DynamicSharedInformerFactory{w.vmf, w.kf} {
		if f != nil {
			f.Start(ctx.Done())
		}
	}
	ok := !slices.Contains(slices.Collect(maps.Values(w.factory.WaitForCacheSync(ctx.Done()))), false)
	for _, f := range []dynamicinformer.DynamicSharedInformerFactory{w.vmf, w.kf} {
		if f != nil {
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
	if w.unhear != nil {
		w.unhear()
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
					if q, waiting := w.queuedBy(id, kueue.OwnerKey(u.GetNamespace(), "VirtualMachine", u.GetName())); waiting {
						return q, true
					}
				}
				return o, ok
			}
		}
	}
	if w.fvms != nil {
		if objs, _ := w.fvms.GetIndexer().ByIndex(byWorkload, id); len(objs) > 0 {
			if u, ok := objs[0].(*unstructured.Unstructured); ok {
				return w.observeFleetVM(id, u)
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
	if ok && o.Phase == workload.Pending && w.capacity != nil {
		for _, p := range pods {
			if r, said := w.capacity.Explain(p); said {
				o.Reason = r
				break
			}
		}
	}
	if ok && o.Phase == workload.Running && w.capacity != nil {
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				o.NodeGroups = append(o.NodeGroups, w.capacity.NodeGroup(p.Spec.NodeName))
			}
		}
		slices.Sort(o.NodeGroups)
	}
	if ok && o.Phase == workload.Running && w.queued != nil && !slices.ContainsFunc(pods, onANode) {
		// Running with no pod on a node here: MultiKueue runs it on a
		// worker (a Job's pods are there alone; a service's pods here
		// stay gated, with the status of their copies there). Where no
		// Kueue Workload says which, its copy there was evicted (its
		// worker lost, preempted) and the status here is the lost copy's
		// until a new one runs: it waits in its queue again.
		if o.Cluster, o.HourPrice, o.GPUHourPrice = w.dispatched(jobs, pods); o.Cluster == "" {
			o.Phase, o.Reason, o.Node, o.At = workload.Pending, "its run on a worker cluster was evicted: queued again", "", time.Time{}
		}
	}
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

func onANode(p *corev1.Pod) bool { return p.Spec.NodeName != "" }

// observeFleetVM is what a VM in a fleet says: why it waits in the
// manager's queue (for quota, for a worker, moving off a drained one) while
// it does, else its status as its worker's VM last said it (copied back by
// MultiKueue) and the cluster it runs on. The queue speaks first: the
// status copied back is the last copy's, which a VM evicted or moving no
// longer has. A FleetVM stopped by its owner says nothing (the stop is
// recorded when asked for).
func (w *Watcher) observeFleetVM(id string, u *unstructured.Unstructured) (Observation, bool) {
	if u.GetAnnotations()[kapi.AnnotationStopped] != "" {
		return Observation{}, false
	}
	key := kueue.OwnerKey(u.GetNamespace(), kapi.FleetVMKind.Kind, u.GetName())
	if w.queued != nil {
		if q, waiting := w.queuedBy(id, key); waiting {
			return q, true
		}
	}
	o, ok := ObserveVM(u)
	if !ok || w.queued == nil {
		return o, ok
	}
	if o.Cluster, o.HourPrice, o.GPUHourPrice = w.dispatchedBy(key); o.Cluster == "" {
		// Evicted, its quota not yet given back: what was copied back is
		// the last copy's.
		return Observation{WorkloadID: id, Phase: workload.Pending, Reason: "its run on a worker cluster was evicted: queued again once its VM has stopped there"}, true
	}
	return o, ok
}

// dispatched is where MultiKueue runs a Job or pod of these (the worker
// cluster its Kueue Workload names), at what price per hour and per
// GPU-hour.
func (w *Watcher) dispatched(jobs []*batchv1.Job, pods []*corev1.Pod) (cluster string, hour, gpuHour float64) {
	var keys []string
	for _, j := range jobs {
		keys = append(keys, kueue.OwnerKey(j.Namespace, "Job", j.Name))
	}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed { // an ended pod's run is not this one
			keys = append(keys, kueue.OwnerKey(p.Namespace, "Pod", p.Name))
		}
	}
	return w.dispatchedBy(keys...)
}

// dispatchedBy is dispatched for the objects keys name (kueue.OwnerKey).
func (w *Watcher) dispatchedBy(keys ...string) (cluster string, hour, gpuHour float64) {
	for _, key := range keys {
		objs, _ := w.queued.GetIndexer().ByIndex(kueue.ByOwner, key)
		for _, obj := range objs {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok || kueue.Condition(u, "Finished") {
				continue
			}
			name, _, _ := unstructured.NestedString(u.Object, "status", "clusterName")
			if name == "" && kueue.Condition(u, "QuotaReserved") && !kueue.Condition(u, "Evicted") {
				// Its copy runs before MultiKueue records where (it waits
				// for the dispatcher to withdraw the nomination): the
				// cluster it was nominated to.
				name = u.GetAnnotations()[kapi.AnnotationDispatchedTo]
			}
			if name != "" {
				hour, _ := strconv.ParseFloat(u.GetAnnotations()[kapi.AnnotationHourPrice], 64)
				gpuHour, _ := strconv.ParseFloat(u.GetAnnotations()[kapi.AnnotationGPUHourPrice], 64)
				return name, hour, gpuHour
			}
		}
	}
	return "", 0, 0
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
		keys = append(keys, kueue.OwnerKey(j.Namespace, "Job", j.Name))
	}
	for _, p := range pods {
		keys = append(keys, kueue.OwnerKey(p.Namespace, "Pod", p.Name))
	}
	return w.queuedBy(id, keys...)
}

// position is a waiting Kueue Workload's place in its queue, from its
// queue's waiting workloads alone (kueue.ByQueue; listing every one the
// cluster holds on each observation was 45 % of gantry dev's CPU with a few
// hundred launches queued), ordered once until one of them changes (the
// Kueue Workloads' event handler forgets the order). A workload the kept
// order does not know yet orders the queue again.
func (w *Watcher) position(u *unstructured.Unstructured) int {
	queue, _, _ := unstructured.NestedString(u.Object, "spec", "queueName")
	key := kueue.QueueKey(u.GetNamespace(), queue)
	w.ordersMu.Lock()
	defer w.ordersMu.Unlock()
	if pos, known := w.orders[key][u.GetName()]; known {
		return pos
	}
	same, err := w.queued.GetIndexer().ByIndex(kueue.ByQueue, key)
	if err != nil {
		return 0
	}
	pos := kueue.Positions(same, u.GetNamespace(), queue)
	if w.orders == nil {
		w.orders = map[string]map[string]int{}
	}
	w.orders[key] = pos
	return pos[u.GetName()]
}

// queuedBy says whether a Kueue Workload owned by one of the objects keys
// name (kueue.OwnerKey) waits for admission, why, and where.
func (w *Watcher) queuedBy(id string, keys ...string) (Observation, bool) {
	for _, k := range keys {
		objs, _ := w.queued.GetIndexer().ByIndex(kueue.ByOwner, k)
		for _, obj := range objs {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			if waiting, reason := kueue.Waiting(u); waiting {
				pos := w.position(u)
				return Observation{WorkloadID: id, Phase: "Queued", Reason: kueue.Reason(reason, pos), Position: pos}, true
			}
			if waiting, reason := kueue.Dispatching(u); waiting {
				return Observation{WorkloadID: id, Phase: "Queued", Reason: reason}, true
			}
		}
	}
	return Observation{}, false
}
