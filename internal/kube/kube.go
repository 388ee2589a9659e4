// Package kube is Gantry's adapter to one Kubernetes cluster (client-go): the
// Cluster that the workload, estimate and telemetry services see. It applies
// team namespaces labelled for Pod Security "restricted", server-side applies
// a workload's rendered objects under one field manager (idempotent) with
// owner references from the primary object to the rest, stops and starts
// primary objects without losing them, lists events, logs and the objects
// Gantry manages, and loads its kubeconfig lazily (Lazy). The rest of
// Gantry's Kubernetes side is in the packages beneath it, one job each:
// kapi (what they share: the field manager, resources, errors), kueue
// (Kueue's objects, queues and Gantry's AdmissionCheck controller), watch
// (informers and what they say about a workload), lead (leader election)
// and nodes (token reviews, pod places, unhealthy GPUs, free GPUs).
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/karpenter"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/projected"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// Cluster talks to one Kubernetes API server.
type Cluster struct {
	dyn  dynamic.Interface
	core kubernetes.Interface
	// namespaces this process has applied, and when: a launch into a team's
	// namespace applied less than namespaceTTL ago costs no request for it.
	// Forgotten when the API server says one is gone; applied again after
	// the TTL, so that labels changed behind Gantry's back (Pod Security)
	// are put back within it.
	namespaces sync.Map // name → time.Time
	kueue      bool
	obs        Observer
	queue      *kueue.Kueue
	nodes      *nodes.Nodes
	groups     *nodegroup.Set
	classes    *gpu.Catalog
	now        func() time.Time
	poolsOnce  sync.Once
	pools      *karpenter.Pools // nil: no node groups, or no Karpenter
	poolsErr   error
	workers    Workers // nil: no worker clusters
}

// Workers are the worker clusters of a MultiKueue manager, where its Jobs
// run (package workers).
type Workers interface {
	// Client is a worker's client (nil: its credentials cannot be read).
	Client(cluster string) kubernetes.Interface
}

// Options configure a Cluster.
type Options struct {
	// Kueue says that Kueue admits Gantry's workloads (render.Meta.Kueue).
	Kueue bool
	// Observer is told how long applies and admissions take and how far
	// the informers lag; none: nothing is measured.
	Observer Observer
	// Queues measures the work queues of the controllers here; none:
	// client-go's default (nothing).
	Queues workqueue.MetricsProvider
	// NodeGroups and Classes, when groups are declared and the cluster
	// runs Karpenter, let the watcher say why a workload waits for
	// machines (karpenter.Pools), on the clock Now.
	NodeGroups *nodegroup.Set
	Classes    *gpu.Catalog
	Now        func() time.Time
	// Workers, when the cluster is a MultiKueue manager, are where its
	// dispatched Jobs run: their logs and events are read there.
	Workers Workers
}

// Observer receives the cluster's measurements (Gantry's own metrics).
type Observer interface {
	ObserveApply(took time.Duration, err error)
	ObserveAdmission(wait time.Duration)
	ObserveLag(resource string, lag time.Duration)
}

// unobserved is the Observer of a cluster given none.
type unobserved struct{}

func (unobserved) ObserveApply(time.Duration, error) {}

func (unobserved) ObserveAdmission(time.Duration) {}

func (unobserved) ObserveLag(string, time.Duration) {}

// namespaceTTL is how long an applied namespace is taken as it was applied.
const namespaceTTL = time.Minute

// Client rate limits when the configuration sets none: client-go's default of
// 5 requests a second would throttle more than one launch a second. A launch
// is one request per object (2–3), plus one the first time for its team's
// namespace; the API server's own priority and fairness protects it from a
// busy client, so the client's limit only needs to stop a runaway loop.
const (
	DefaultQPS   = 400
	DefaultBurst = 800
)

// New returns a Cluster for the configuration, with DefaultQPS and
// DefaultBurst unless it sets client rate limits of its own.
func New(cfg *rest.Config, o Options) (*Cluster, error) {
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	core, err := kubernetes.NewForConfig(Protobuf(cfg))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if o.Observer == nil {
		o.Observer = unobserved{}
	}
	queue, err := kueue.New(kueue.Options{Dynamic: dyn, Core: core, Observer: o.Observer, Queues: o.Queues})
	if err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now //clock:allow a cluster made without the server's clock (tests, tools) says how long ago on the wall clock
	}
	return &Cluster{dyn: dyn, core: core, kueue: o.Kueue, obs: o.Observer, queue: queue, nodes: nodes.New(core),
		groups: o.NodeGroups, classes: o.Classes, now: o.Now, workers: o.Workers}, nil
}

// Protobuf is cfg for a typed client that speaks protobuf to the API
// server, as Kubernetes' own controllers do, unless cfg names a content
// type of its own. Built-in objects (the pods, Jobs and nodes the informers
// watch) cost both sides several times less to encode and decode than as
// JSON: under a sustained load of launches the API server was the busiest
// process, and decoding watch events a sixth of Gantry's CPU. The dynamic
// client, which applies a launch's objects and reads custom resources
// (Kueue's, KubeVirt's, which have no protobuf form), speaks JSON.
func Protobuf(cfg *rest.Config) *rest.Config {
	if cfg.ContentType != "" {
		return cfg
	}
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg
}

// Ping checks that the API server answers.
func (c *Cluster) Ping(ctx context.Context) error {
	_, err := c.core.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return kapi.Classify(err, "kubernetes API server", "")
	}
	return nil
}

// EnsureNamespace applies a team's namespace, enforcing Pod Security
// "restricted", and its default-deny ingress NetworkPolicy, at most once a
// minute per process (see Cluster.namespaces).
func (c *Cluster) EnsureNamespace(ctx context.Context, name string, t team.Name) error {
	if at, ok := c.namespaces.Load(name); ok && time.Since(at.(time.Time)) < namespaceTTL {
		return nil
	}
	var queue *kueue.Kueue
	if c.kueue {
		queue = c.queue
	}
	if err := ApplyNamespace(ctx, c.core, queue, name, t); err != nil {
		return err
	}
	c.namespaces.Store(name, time.Now()) //clock:allow a cache of its own, expired by wall time
	return nil
}

// PodSecurityRestricted is labels with a namespace's Pod Security labels
// added: "restricted" enforced (the latest version) and warned of, as on
// every team's namespace.
func PodSecurityRestricted(labels map[string]string) map[string]string {
	labels["pod-security.kubernetes.io/enforce"] = "restricted"
	labels["pod-security.kubernetes.io/enforce-version"] = "latest"
	labels["pod-security.kubernetes.io/warn"] = "restricted"
	return labels
}

// ApplyNamespace applies a team's namespace on a cluster: Pod Security
// "restricted" enforced, a default-deny ingress NetworkPolicy and, with
// queue, the team's LocalQueue.
func ApplyNamespace(ctx context.Context, core kubernetes.Interface, queue *kueue.Kueue, name string, t team.Name) error {
	team := t.String()
	ns := &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: PodSecurityRestricted(map[string]string{
			render.LabelManagedBy: render.ManagedBy,
			render.LabelTeam:      team,
		})},
	}
	data, err := json.Marshal(ns)
	if err != nil {
		return err
	}
	_, err = core.CoreV1().Namespaces().Patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: kapi.FieldManager, Force: kapi.Ptr(true)})
	if err != nil {
		return kapi.Classify(err, "namespace", name)
	}
	// Nothing reaches a team's pods unless a workload's own NetworkPolicy
	// (rendered with it) lets it: the namespace's default is no ingress.
	deny := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: DefaultDenyPolicy, Namespace: name, Labels: map[string]string{render.LabelManagedBy: render.ManagedBy}},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if data, err = json.Marshal(deny); err != nil {
		return err
	}
	_, err = core.NetworkingV1().NetworkPolicies(name).Patch(ctx, DefaultDenyPolicy, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: kapi.FieldManager, Force: kapi.Ptr(true)})
	if err != nil {
		return kapi.Classify(err, "network policy", DefaultDenyPolicy)
	}
	if queue != nil {
		return queue.Apply(ctx, quota.LocalQueueObject(name, t))
	}
	return nil
}

// TeamNamespaces are the team namespaces Gantry applied on the cluster, with
// their teams.
func (c *Cluster) TeamNamespaces(ctx context.Context) (map[string]team.Name, error) {
	list, err := c.core.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy, ResourceVersion: "0"})
	if err != nil {
		return nil, kapi.Classify(err, "namespace", "")
	}
	out := map[string]team.Name{}
	for _, ns := range list.Items {
		if t := ns.Labels[render.LabelTeam]; t != "" {
			out[ns.Name] = team.Name(t)
		}
	}
	return out, nil
}

// DefaultDenyPolicy names the NetworkPolicy that gives every team namespace
// a default of no ingress.
const DefaultDenyPolicy = "gantry-default-deny-ingress"

// namespaceGone reports whether err says that the namespace of an object is
// not there (deleted behind Gantry's back), and forgets it if so.
func (c *Cluster) namespaceGone(err error, namespace string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	if d := status.Status().Details; d == nil || d.Kind != "namespaces" {
		return false
	}
	c.namespaces.Delete(namespace)
	return true
}

// Apply server-side applies a workload's objects: its primary object (Job,
// Deployment, StatefulSet, VirtualMachine or FleetVM) first, then the
// others owned by it. A Job, VirtualMachine or FleetVM already on the
// cluster is left as it is (see createOnce); the other objects are applied
// again.
func (c *Cluster) Apply(ctx context.Context, objs []render.Object) (err error) {
	defer func(start time.Time) { c.obs.ObserveApply(time.Since(start), err) }(time.Now()) //clock:allow measures a duration
	var primary *unstructured.Unstructured
	var rest []render.Object
	for _, o := range objs {
		if primary == nil && render.IsPrimary(o.GetObjectKind().GroupVersionKind().Kind) {
			u, err := c.apply(ctx, o, nil)
			if err != nil {
				return err
			}
			primary = u
			continue
		}
		rest = append(rest, o)
	}
	if primary == nil {
		return errors.New("kube: no Job, Deployment, StatefulSet or VirtualMachine among the objects")
	}
	owner := metav1.OwnerReference{
		APIVersion: primary.GetAPIVersion(), Kind: primary.GetKind(), Name: primary.GetName(), UID: primary.GetUID(),
		Controller: kapi.Ptr(true), BlockOwnerDeletion: kapi.Ptr(true),
	}
	for _, o := range rest {
		own := owner
		if o.GetObjectKind().GroupVersionKind().Kind == "Workload" {
			own.Controller = nil // Kueue must not take the VM for a job of one of its integrations
		}
		if _, err := c.apply(ctx, o, &own); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) apply(ctx context.Context, o render.Object, owner *metav1.OwnerReference) (*unstructured.Unstructured, error) {
	gvk := o.GetObjectKind().GroupVersionKind()
	gvr, ok := kapi.Resources[gvk]
	if !ok {
		return nil, fmt.Errorf("kube: no resource known for %s", gvk)
	}
	m, err := toMap(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	if owner != nil {
		u.SetOwnerReferences([]metav1.OwnerReference{*owner})
	}
	data, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	patch := func() (*unstructured.Unstructured, error) {
		return c.dyn.Resource(gvr).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: kapi.FieldManager, Force: kapi.Ptr(true)})
	}
	if owner == nil && render.CreatedOnce(gvk.Kind) {
		patch = func() (*unstructured.Unstructured, error) { return c.createOnce(ctx, gvr, u) }
	}
	out, err := patch()
	if err != nil && c.namespaceGone(err, o.GetNamespace()) {
		// The namespace this process applied is gone: apply it again, once.
		if err = c.EnsureNamespace(ctx, o.GetNamespace(), team.Name(o.GetLabels()[render.LabelTeam])); err == nil {
			out, err = patch()
		}
	}
	if err != nil {
		return nil, kapi.Classify(err, gvk.Kind, o.GetName())
	}
	return out, nil
}

// createOnce creates a Job or VirtualMachine that is not on the cluster yet
// and returns one already there as it is. Once it exists its run state — a
// queued Job's spec.suspend, a queued VM's runStrategy — belongs to Kueue
// and to Gantry's stop and start: applying the rendered object again (a
// launch retried by the reconcile loop while its first apply was in flight,
// or after a crash) would suspend a Job Kueue had just resumed, ending its
// pod and starting it again, or halt a running VM.
func (c *Cluster) createOnce(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	res := c.dyn.Resource(gvr).Namespace(u.GetNamespace())
	out, err := res.Create(ctx, u, metav1.CreateOptions{FieldManager: kapi.FieldManager, FieldValidation: "Strict"})
	if apierrors.IsAlreadyExists(err) {
		return res.Get(ctx, u.GetName(), metav1.GetOptions{})
	}
	return out, err
}

// Delete removes a workload's primary object in the background; the garbage
// collector removes the objects it owns and the pods.
func (c *Cluster) Delete(ctx context.Context, namespace, kind, name string) error {
	gvr, err := kapi.ResourceOf(kind)
	if err != nil {
		return err
	}
	err = c.dyn.Resource(gvr).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: kapi.Ptr(metav1.DeletePropagationBackground)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return kapi.Classify(err, kind, name)
}

// SetRunning implements workload.Cluster: it starts or stops a workload's
// primary object and keeps it. A Job is suspended (its pods end; resuming
// starts them afresh and restarts its deadline), a Deployment or StatefulSet
// scaled to zero (a StatefulSet keeps its volume claims when scaled), a
// VirtualMachine halted (KubeVirt removes the running instance).
func (c *Cluster) SetRunning(ctx context.Context, o workload.ObjectRef, run bool) error {
	if o.Kind == "Job" && c.kueue {
		if queued, err := c.queue.SetJobActive(ctx, o, run); queued || err != nil {
			return err
		}
	}
	if o.Kind == "VirtualMachine" && c.kueue {
		if queued, err := c.queue.SetVMActive(ctx, o, run); queued || err != nil {
			return err
		}
	}
	if o.Kind == kapi.FleetVMKind.Kind {
		if !c.kueue {
			return errors.New("kube: a FleetVM is started and stopped through Kueue, which this Gantry does not use")
		}
		return c.queue.SetFleetVMActive(ctx, o, run)
	}
	var spec map[string]any
	switch o.Kind {
	case "Job":
		spec = map[string]any{"suspend": !run}
	case "Deployment", "StatefulSet":
		spec = map[string]any{"replicas": map[bool]int{true: 1, false: 0}[run]}
	case "VirtualMachine":
		spec = map[string]any{"runStrategy": map[bool]string{true: "Always", false: "Halted"}[run]}
	default:
		return fmt.Errorf("kube: cannot start or stop a %s", o.Kind)
	}
	gvr, err := kapi.ResourceOf(o.Kind)
	if err != nil {
		return err
	}
	body := map[string]any{"spec": spec}
	if o.Kind == "Job" {
		// The owner's stop or start: a move off a quarantined node under
		// way is forgotten (its next step finds the Job changed).
		body["metadata"] = map[string]any{"annotations": map[string]any{kapi.AnnotationMovingOff: nil}}
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(gvr).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager})
	return kapi.Classify(err, o.Kind, o.Name)
}

// Primary implements workload.Cluster: the object as the API server has
// it now.
func (c *Cluster) Primary(ctx context.Context, o workload.ObjectRef) (workload.ObjectRef, error) {
	gvr, err := kapi.ResourceOf(o.Kind)
	if err != nil {
		return o, err
	}
	u, err := c.dyn.Resource(gvr).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		return o, kapi.Classify(err, o.Kind, o.Name)
	}
	return workload.ObjectRef{Namespace: u.GetNamespace(), Kind: o.Kind, Name: u.GetName(), WorkloadID: u.GetLabels()[render.LabelWorkloadID], Running: running(u)}, nil
}

// running reports whether a primary object is asked to run (the opposite of
// what SetRunning(false) does).
func running(u *unstructured.Unstructured) bool {
	a := asked{kind: u.GetKind(), labels: u.GetLabels(), annotations: u.GetAnnotations()}
	a.suspend, _, _ = unstructured.NestedBool(u.Object, "spec", "suspend")
	if n, found, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); found {
		a.replicas = &n
	}
	a.runStrategy, _, _ = unstructured.NestedString(u.Object, "spec", "runStrategy")
	return a.running()
}

// jobRunning is running for a Job as the typed client gives it (the
// watcher's cache).
func jobRunning(j *batchv1.Job) bool {
	return asked{kind: "Job", labels: j.Labels, annotations: j.Annotations, suspend: j.Spec.Suspend != nil && *j.Spec.Suspend}.running()
}

// asked is what a primary object says of whether it is asked to run.
type asked struct {
	kind                string
	labels, annotations map[string]string
	suspend             bool   // a Job's spec.suspend
	replicas            *int64 // a Deployment's or StatefulSet's spec.replicas (nil: not set, which is one)
	runStrategy         string // a VirtualMachine's spec.runStrategy
}

func (a asked) running() bool {
	switch a.kind {
	case "Job":
		if _, queued := a.labels[quota.LabelQueueName]; queued {
			// Kueue suspends and resumes it: Gantry's stop is an annotation
			// (and the Kueue Workload deactivated).
			return a.annotations[kapi.AnnotationStopped] == ""
		}
		if kueue.MovingOff(a.annotations) {
			return true // suspended to move it off a quarantined node, not stopped
		}
		return !a.suspend
	case "Deployment", "StatefulSet":
		return a.replicas == nil || *a.replicas > 0
	case kapi.FleetVMKind.Kind:
		return a.annotations[kapi.AnnotationStopped] == "" // always queued: see SetFleetVMActive
	case "VirtualMachine":
		if _, queued := a.labels[quota.LabelQueueName]; queued {
			// Halted until Kueue admits it: Gantry's stop is an annotation.
			return a.annotations[kapi.AnnotationStopped] == ""
		}
		return a.runStrategy != "Halted"
	}
	return true
}

// Events lists the events of the namespace's objects whose names start with
// prefix (a workload's objects and pods all do), oldest first; those of a
// workload dispatched to a worker cluster are read there too.
func (c *Cluster) Events(ctx context.Context, namespace, prefix, id string) ([]workload.Event, error) {
	out, err := events(ctx, c.core, namespace, prefix, "")
	if err != nil {
		return nil, err
	}
	// A dispatched workload's pods live on its worker: their events are
	// told there, named for the cluster.
	cluster, worker, err := c.worker(ctx, namespace, id)
	if err == nil && worker != nil {
		var more []workload.Event
		if more, err = events(ctx, worker, namespace, prefix, cluster); err == nil {
			out = append(out, more...)
		}
	}
	if err != nil {
		// The worker's events cannot be read now: the manager's are told,
		// with why the rest are missing.
		out = append(out, workload.Event{Time: c.now().UTC(), Type: "Warning", Reason: "WorkerUnreadable", Object: "cluster/" + cluster,
			Message: "the events of the worker cluster it runs on cannot be read: " + err.Error(), Count: 1})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}

// ReviewRunToken asks the cluster where workloadID runs about a run's
// token: a workload dispatched to a worker cluster runs its pods there, and
// their tokens are that worker's, which only its API server can review.
// The token's own word for its namespace only picks where to look: the
// review and the pod it is bound to decide.
func (c *Cluster) ReviewRunToken(ctx context.Context, token, audience, workloadID string) (runs.Review, error) {
	claims, err := projected.Peek(token)
	if c.workers == nil || err != nil || len(validation.IsDNS1123Label(claims.Namespace)) > 0 || !workload.ValidID(workloadID) {
		return c.nodes.ReviewRunToken(ctx, token, audience)
	}
	cluster, worker, err := c.worker(ctx, claims.Namespace, workloadID)
	if err != nil {
		return runs.Review{}, err
	}
	if worker == nil {
		return c.nodes.ReviewRunToken(ctx, token, audience)
	}
	// The worker's client streams (logs) and so has no timeout of its own.
	ctx, cancel := context.WithTimeout(ctx, workerReviewTimeout)
	defer cancel()
	r, err := nodes.New(worker).ReviewRunToken(ctx, token, audience)
	if err != nil {
		return runs.Review{}, &fault.Unavailable{What: "worker cluster " + cluster, Err: err}
	}
	r.Cluster = cluster
	return r, nil
}

// workerReviewTimeout bounds a worker's review of a run's token.
const workerReviewTimeout = 10 * time.Second

// worker is the worker cluster where a dispatched workload runs (its Kueue
// Workload's status.clusterName) and its client; "" and nil when it runs
// here or nowhere yet.
func (c *Cluster) worker(ctx context.Context, namespace, workloadID string) (string, kubernetes.Interface, error) {
	if c.workers == nil || workloadID == "" {
		return "", nil, nil
	}
	list, err := c.dyn.Resource(kapi.KueueWorkloads).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + workloadID, ResourceVersion: "0"})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil, nil
		}
		return "", nil, kapi.Classify(err, "Kueue Workload", workloadID)
	}
	for _, u := range list.Items {
		if name, _, _ := unstructured.NestedString(u.Object, "status", "clusterName"); name != "" {
			core := c.workers.Client(name)
			if core == nil {
				return "", nil, &fault.Unavailable{What: "worker cluster " + name, Err: errors.New("its credentials cannot be read")}
			}
			return name, core, nil
		}
	}
	return "", nil, nil
}

// events lists the namespace's events of the objects whose names start
// with prefix; cluster, when not "", names the worker they come from.
func events(ctx context.Context, core kubernetes.Interface, namespace, prefix, cluster string) ([]workload.Event, error) {
	list, err := core.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return []workload.Event{}, nil
		}
		if cluster != "" {
			return nil, &fault.Unavailable{What: "worker cluster " + cluster, Err: err}
		}
		return nil, kapi.Classify(err, "events", namespace)
	}
	out := []workload.Event{}
	for _, e := range list.Items {
		if !strings.HasPrefix(e.InvolvedObject.Name, prefix) {
			continue
		}
		t := e.LastTimestamp.Time
		if t.IsZero() {
			t = e.EventTime.Time
		}
		if t.IsZero() {
			t = e.CreationTimestamp.Time
		}
		count := int(e.Count)
		if count == 0 {
			count = 1
		}
		object := e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name
		if cluster != "" {
			object = cluster + ": " + object
		}
		out = append(out, workload.Event{Time: t.UTC(), Type: e.Type, Reason: e.Reason, Message: e.Message, Object: object, Count: count})
	}
	return out, nil
}

// Logs implements workload.Cluster through the pods/log API.
func (c *Cluster) Logs(ctx context.Context, namespace, workloadID string, follow bool, tailLines int64) (io.ReadCloser, error) {
	core := c.core
	if _, worker, err := c.worker(ctx, namespace, workloadID); err != nil {
		return nil, err
	} else if worker != nil {
		core = worker
	}
	pods, err := core.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + workloadID, ResourceVersion: "0"})
	if err != nil {
		return nil, kapi.Classify(err, "pods", workloadID)
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != "" && (newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = p
		}
	}
	if newest == nil || !started(newest, "main") {
		return nil, &workload.NoPodYet{ID: workloadID}
	}
	opts := &corev1.PodLogOptions{Container: "main", Follow: follow}
	if tailLines > 0 {
		opts.TailLines = &tailLines
	}
	r, err := core.CoreV1().Pods(namespace).GetLogs(newest.Name, opts).Stream(ctx)
	if err != nil {
		return nil, kapi.Classify(err, "Pod", newest.Name)
	}
	return r, nil
}

// started reports whether a pod's container has started (running or ended):
// before that (its image pulling, ContainerCreating) it has no log yet.
func started(p *corev1.Pod, container string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
		}
	}
	return false
}

// Managed implements workload.Objects: the Jobs, Deployments, StatefulSets
// and VirtualMachines labelled as Gantry's, in every namespace, as the API
// server lists them.
func (c *Cluster) Managed(ctx context.Context) ([]workload.ObjectRef, error) {
	return c.managed(ctx, nil, false)
}

// JobCache is the leader's informer cache of the Jobs Gantry manages
// (watch.Watcher).
type JobCache interface {
	// Jobs are the cached Jobs, to be read only (they are the cache's);
	// filled is false until the cache is.
	Jobs() (jobs []*batchv1.Job, filled bool)
}

// Objects is what the lifecycle loop converges: Gantry's Jobs from jobs,
// the leader's cache, once it is filled (until then, and for the other
// kinds, from the API server). Jobs are the many: listing every one of them
// from the API server each pass was a third of Gantry's CPU under sustained
// launches (docs/benchmarks.md). A cache a moment behind the cluster is
// enough for what reads it: the lifecycle loop confirms a stop or start
// with the API server (workload.Cluster.Primary) before it acts, and
// deleting what belongs to a deleted workload twice is harmless.
func (c *Cluster) Objects(jobs JobCache) workload.Objects {
	return cachedJobs{c, jobs}
}

// cachedJobs is Objects: the Jobs from a cache once filled.
type cachedJobs struct {
	c    *Cluster
	jobs JobCache
}

func (o cachedJobs) Managed(ctx context.Context) ([]workload.ObjectRef, error) {
	jobs, filled := o.jobs.Jobs()
	return o.c.managed(ctx, jobs, filled)
}

// managed lists Gantry's primary objects from the API server, but for the
// Jobs, which are cached when fromCache.
func (c *Cluster) managed(ctx context.Context, cached []*batchv1.Job, fromCache bool) ([]workload.ObjectRef, error) {
	var out []workload.ObjectRef
	for gvk, gvr := range kapi.Resources {
		if !render.IsPrimary(gvk.Kind) {
			continue
		}
		if gvk == kapi.FleetVMKind && c.workers == nil {
			continue // FleetVMs are a fleet manager's alone
		}
		if gvk.Kind == "Job" && fromCache {
			for _, j := range cached {
				out = append(out, workload.ObjectRef{Namespace: j.Namespace, Kind: "Job", Name: j.Name, WorkloadID: j.Labels[render.LabelWorkloadID], Running: jobRunning(j)})
			}
			continue
		}
		// ResourceVersion "0": served from the API server's watch cache,
		// not read from etcd (the lifecycle loop asks every interval).
		list, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy, ResourceVersion: "0"})
		if (gvk == kapi.VMKind || gvk == kapi.FleetVMKind) && apierrors.IsNotFound(err) {
			continue // KubeVirt or the FleetVM CRD is not installed: no VMs of that kind
		}
		if err != nil {
			return nil, kapi.Classify(err, gvk.Kind, "")
		}
		for _, o := range list.Items {
			out = append(out, workload.ObjectRef{Namespace: o.GetNamespace(), Kind: gvk.Kind, Name: o.GetName(), WorkloadID: o.GetLabels()[render.LabelWorkloadID], Running: running(&o)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

func toMap(o any) (map[string]any, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}
