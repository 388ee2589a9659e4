// Package nodes owns what Gantry reads and writes of the cluster's nodes:
// TokenReviews of the node agents' ServiceAccount tokens, where a pod runs,
// acting on an unhealthy GPU (events on its pods; quarantine.go: the
// node's quarantine taint, the work on it, its preflight check), and
// the GPUs the nodes of a class offer and have free.
package nodes

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/karpenter"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// Nodes reads and writes the nodes of one cluster.
type Nodes struct {
	core     kubernetes.Interface
	running  atomic.Bool              // RunCapacity runs
	capacity atomic.Pointer[capacity] // set while RunCapacity's caches are filled
}

// CapacityCached says whether MostOnOneNode and FreeGPUs read from
// RunCapacity's informers (else they list from the API server).
func (k *Nodes) CapacityCached() bool { return k.capacity.Load() != nil }

// New returns Nodes on the client.
func New(core kubernetes.Interface) *Nodes { return &Nodes{core: core} }

// NodeNameExtra is the key under which a TokenReview names the node of the
// pod a ServiceAccount token is bound to.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// ReviewToken implements telemetry.TokenReviewer with a TokenReview.
func (k *Nodes) ReviewToken(ctx context.Context, token, audience string) (telemetry.Review, error) {
	tr, err := k.core.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return telemetry.Review{}, kapi.Classify(err, "tokenreviews", "")
	}
	st := tr.Status
	r := telemetry.Review{Authenticated: st.Authenticated, Username: st.User.Username, Audiences: st.Audiences, Error: st.Error}
	if n := st.User.Extra[NodeNameExtra]; len(n) == 1 {
		r.Node = n[0]
	}
	return r, nil
}

// The keys under which a TokenReview names the pod a token is bound to.
const (
	PodNameExtra = "authentication.kubernetes.io/pod-name"
	PodUIDExtra  = "authentication.kubernetes.io/pod-uid"
)

// ReviewRunToken implements runs.Reviewer: a TokenReview, then the pod the
// token is bound to — the very pod (its UID), still there, made by Gantry —
// and the workload its label names.
func (k *Nodes) ReviewRunToken(ctx context.Context, token, audience string) (runs.Review, error) {
	tr, err := k.core.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return runs.Review{}, kapi.Classify(err, "tokenreviews", "")
	}
	st := tr.Status
	r := runs.Review{Authenticated: st.Authenticated, Username: st.User.Username, Audiences: st.Audiences, Error: st.Error}
	name, uid := st.User.Extra[PodNameExtra], st.User.Extra[PodUIDExtra]
	sa, ok := strings.CutPrefix(st.User.Username, "system:serviceaccount:")
	namespace, _, _ := strings.Cut(sa, ":")
	if !st.Authenticated || !ok || namespace == "" || len(name) != 1 || len(uid) != 1 {
		return r, nil
	}
	p, err := k.core.CoreV1().Pods(namespace).Get(ctx, name[0], metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return r, nil
	}
	if err != nil {
		return runs.Review{}, kapi.Classify(err, "pods", namespace)
	}
	id := p.Labels[render.LabelWorkloadID]
	if string(p.UID) != uid[0] || p.Labels[render.LabelManagedBy] != render.ManagedBy || id == "" {
		return r, nil
	}
	// Made by Gantry's Job for that workload (its controller, named
	// TEMPLATE-ID), not merely labelled so.
	for _, o := range p.OwnerReferences {
		if o.Kind == "Job" && o.Controller != nil && *o.Controller && strings.HasSuffix(o.Name, "-"+id) {
			r.Workload, r.Pod = id, namespace+"/"+p.Name
		}
	}
	return r, nil
}

// LocatePod implements telemetry.PodLocator: the pod's node and the Gantry
// workload its label names.
func (k *Nodes) LocatePod(ctx context.Context, namespace, name string) (telemetry.PodPlace, error) {
	p, err := k.core.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return telemetry.PodPlace{}, nil
	}
	if err != nil {
		return telemetry.PodPlace{}, kapi.Classify(err, "pods", namespace)
	}
	place := telemetry.PodPlace{Found: true, Node: p.Spec.NodeName}
	if p.Labels[render.LabelManagedBy] == render.ManagedBy {
		place.Workload = p.Labels[render.LabelWorkloadID]
	}
	return place, nil
}

// UnhealthyLabel marks a node Gantry quarantined for an unhealthy GPU
// (beside its taint, QuarantineTaint), so that operators can find it.
const UnhealthyLabel = "gantry.dev/gpu-unhealthy"

// GPUUnhealthy records a Warning event GPUUnhealthy on each pod that uses
// the GPU, at once as the agent's report arrives; the quarantine loop
// marks the node and moves the work.
func (k *Nodes) GPUUnhealthy(ctx context.Context, node string, gpu telemetry.GPURecord, pods []telemetry.PodRef) error {
	now := metav1.NewTime(time.Now()) //clock:allow a Kubernetes object's time: the cluster compares wall times
	msg := fmt.Sprintf("GPU %d (%s) on node %s is unhealthy: %s", gpu.State.Index, gpu.State.GPU, node, gpu.Reason)
	for _, p := range pods {
		pod, err := k.core.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return kapi.Classify(err, "pods", p.Namespace)
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: p.Name + ".gpu-", Namespace: p.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: pod.UID, APIVersion: "v1"},
			Reason:         "GPUUnhealthy", Message: msg, Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "gantry", Host: node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
		if _, err := k.core.CoreV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			return kapi.Classify(err, "events", p.Namespace)
		}
	}
	return nil
}

// MostOnOneNode (workload.Cluster, through kube.Cluster): the most of res any node of
// class has allocatable, cordoned ones counted, and how many nodes the
// class has (from RunCapacity's cache, else one list from the API server's).
// A node that lists the resource at 0 (a device plugin that found its
// devices unhealthy) counts as offering it: most is then -1 rather than 0,
// which says none offers it.
func (k *Nodes) MostOnOneNode(ctx context.Context, class gpu.Class, res string) (int, int, error) {
	nodes, err := k.classNodes(ctx, class)
	if err != nil {
		return 0, 0, err
	}
	return mostOnOne(nodes, corev1.ResourceName(res)), len(nodes), nil
}

// classNodes are the nodes of class's products.
func (k *Nodes) classNodes(ctx context.Context, class gpu.Class) ([]corev1.Node, error) {
	if c := k.capacity.Load(); c != nil {
		return c.classNodes(class), nil
	}
	nodes, err := k.core.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: render.LabelGPUProduct + " in (" + strings.Join(class.Products, ",") + ")", ResourceVersion: "0"})
	if err != nil {
		return nil, kapi.Classify(err, "node", "")
	}
	return nodes.Items, nil
}

// podsOn are the pods bound to node that have not ended (the cache may
// still hold one that ended a moment ago).
func (k *Nodes) podsOn(ctx context.Context, node string) ([]corev1.Pod, error) {
	if c := k.capacity.Load(); c != nil {
		return c.podsOn(node), nil
	}
	pods, err := k.core.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, ResourceVersion: "0"})
	if err != nil {
		return nil, kapi.Classify(err, "pod", "")
	}
	return pods.Items, nil
}

// mostOnOne is the most of res any of nodes has allocatable; -1 when a node
// lists it at 0 and none has more (not known), 0 when none lists it at all.
func mostOnOne(nodes []corev1.Node, res corev1.ResourceName) int {
	most, listed := 0, false
	for _, n := range nodes {
		if q, ok := n.Status.Allocatable[res]; ok {
			most, listed = max(most, int(q.Value())), true
		}
	}
	if listed && most == 0 {
		return -1
	}
	return most
}

// FreeGPUs (estimate.Cluster, through kube.Cluster): on the schedulable nodes of the
// class's products, the units of resource (nvidia.com/gpu, a MIG profile's
// resource, or nvidia.com/pgpu) allocatable and not requested by a pod that
// has not ended — in all, and the most on one node. (Node affinity beyond
// the class — spot, confidential computing — is not weighed.) From
// RunCapacity's cache, else listed from the API server: the class's nodes,
// then each node's pods.
func (k *Nodes) FreeGPUs(ctx context.Context, class gpu.Class, res string) (total, onOneNode, mostOnOneNode, nodeCount int, err error) {
	nodes, err := k.classNodes(ctx, class)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	name := corev1.ResourceName(res)
	// A cordoned node counts here: it may serve again.
	mostOnOneNode, nodeCount = mostOnOne(nodes, name), len(nodes)
	for _, n := range nodes {
		q, ok := n.Status.Allocatable[name]
		if n.Spec.Unschedulable || !ok {
			continue
		}
		pods, err := k.podsOn(ctx, n.Name)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		if free := freeOn(q.Value(), pods, name); free > 0 {
			total += int(free)
			onOneNode = max(onOneNode, int(free))
		}
	}
	return total, onOneNode, mostOnOneNode, nodeCount, nil
}

// FreeCPU is the CPU, in millicores, that no pod requests on the nodes
// labelled label=true and not a GPU node (where CPU-only launches run, as
// their pods' affinity says): on the freest
// schedulable one, and the most any one of them has allocatable (cordoned
// ones too: what could ever be placed on one); nodes is how many there are.
func (k *Nodes) FreeCPU(ctx context.Context, label string) (onOneNode, mostOnOneNode int64, nodes int, err error) {
	c, err := k.cpu(ctx, label)
	return c.onOneNode, c.mostOnOneNode, c.nodes, err
}

// CPUFree is the cores that no pod requests, in all, on those nodes that
// are schedulable (what a worker cluster has free for CPU-only launches, as
// Free counts GPUs).
func (k *Nodes) CPUFree(ctx context.Context, label string) (float64, error) {
	c, err := k.cpu(ctx, label)
	return float64(c.total) / 1000, err
}

// cpuCount is the CPU nodes' millicores as FreeCPU and CPUFree say them.
type cpuCount struct {
	total, onOneNode, mostOnOneNode int64
	nodes                           int
}

// cpu reads the CPU nodes (label=true, no GPU) and their pods once.
func (k *Nodes) cpu(ctx context.Context, label string) (cpuCount, error) {
	list, err := k.core.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: label + "=true,!" + render.LabelGPUProduct, ResourceVersion: "0"})
	if err != nil {
		return cpuCount{}, kapi.Classify(err, "node", "")
	}
	c := cpuCount{nodes: len(list.Items)}
	for _, n := range list.Items {
		q, ok := n.Status.Allocatable[corev1.ResourceCPU]
		if !ok {
			continue
		}
		c.mostOnOneNode = max(c.mostOnOneNode, q.MilliValue())
		if n.Spec.Unschedulable {
			continue
		}
		pods, err := k.podsOn(ctx, n.Name)
		if err != nil {
			return cpuCount{}, err
		}
		free := cpuFreeOn(q.MilliValue(), pods)
		c.onOneNode = max(c.onOneNode, free)
		c.total += free
	}
	return c, nil
}

// cpuFreeOn is the millicores of allocatable that pods that have not ended
// do not request.
func cpuFreeOn(allocatable int64, pods []corev1.Pod) int64 {
	free := allocatable
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		free -= CPURequested(p.Spec.Containers)
	}
	return max(0, free)
}

// Free is, for each of resources, the units free in all on the class's
// schedulable nodes, as FreeGPUs counts them: the nodes listed once, and
// each node's pods once for every resource.
func (k *Nodes) Free(ctx context.Context, class gpu.Class, resources ...string) (map[string]int, error) {
	nodes, err := k.classNodes(ctx, class)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(resources))
	for _, res := range resources {
		out[res] = 0
	}
	for _, n := range nodes {
		if n.Spec.Unschedulable {
			continue
		}
		var pods []corev1.Pod
		read := false
		for _, res := range resources {
			q, ok := n.Status.Allocatable[corev1.ResourceName(res)]
			if !ok {
				continue
			}
			if !read {
				if pods, err = k.podsOn(ctx, n.Name); err != nil {
					return nil, err
				}
				read = true
			}
			if free := freeOn(q.Value(), pods, corev1.ResourceName(res)); free > 0 {
				out[res] += int(free)
			}
		}
	}
	return out, nil
}

// freeOn is allocatable units of res less what pods that have not ended
// ask of it (a warm placeholder asks nothing: any launch of normal or high
// priority preempts it).
func freeOn(allocatable int64, pods []corev1.Pod, res corev1.ResourceName) int64 {
	free := allocatable
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, warm := p.Labels[karpenter.WarmLabel]; warm {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			if l, ok := ctr.Resources.Limits[res]; ok {
				free -= l.Value()
			}
		}
	}
	return free
}

// CPURequested is the millicores containers request.
func CPURequested(ctrs []corev1.Container) int64 {
	var milli int64
	for _, ctr := range ctrs {
		if r, ok := ctr.Resources.Requests[corev1.ResourceCPU]; ok {
			milli += r.MilliValue()
		}
	}
	return milli
}
