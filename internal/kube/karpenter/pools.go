package karpenter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// NodeClaims is Karpenter's resource for a machine it asked for.
var NodeClaims = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}

// Pools watches the node groups' machines — the Nodes labelled with a group
// and Karpenter's NodeClaims — to say what each group is doing and why a
// pod waits for capacity.
type Pools struct {
	groups  *nodegroup.Set
	classes *gpu.Catalog
	now     func() time.Time
	nf      informers.SharedInformerFactory
	nodes   cache.SharedIndexInformer
	cf      dynamicinformer.DynamicSharedInformerFactory
	claims  cache.SharedIndexInformer
	synced  atomic.Bool
}

// PoolsOptions are what Pools are made of (all required).
type PoolsOptions struct {
	Core       kubernetes.Interface
	Dynamic    dynamic.Interface
	NodeGroups *nodegroup.Set
	Classes    *gpu.Catalog
	Now        func() time.Time
}

// NewPools returns informers on the node groups' Nodes and NodeClaims.
func NewPools(o PoolsOptions) (*Pools, error) {
	if o.Core == nil || o.Dynamic == nil || o.NodeGroups == nil || o.Classes == nil || o.Now == nil {
		return nil, errors.New("karpenter: clients, node groups, classes and a clock are required")
	}
	grouped := func(lo *metav1.ListOptions) { lo.LabelSelector = GroupLabel }
	nf := informers.NewSharedInformerFactoryWithOptions(o.Core, 0, informers.WithTweakListOptions(grouped))
	cf := dynamicinformer.NewDynamicSharedInformerFactory(o.Dynamic, 0)
	return &Pools{groups: o.NodeGroups, classes: o.Classes, now: o.Now,
		nf: nf, nodes: nf.Core().V1().Nodes().Informer(), cf: cf, claims: cf.ForResource(NodeClaims).Informer()}, nil
}

// OnChange calls changed after any group's machines changed — one added or
// gone, a node leaving or changing group, a NodeClaim launched, failed or
// registered — until remove is called. Updates that change none of what
// States counts (a node's heartbeat, its usage) are not told: each tells
// the watcher to look again at every pending pod.
func (p *Pools) OnChange(changed func()) (remove func(), err error) {
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { changed() }, DeleteFunc: func(any) { changed() },
		UpdateFunc: func(o, n any) {
			if counted(o) != counted(n) {
				changed()
			}
		}}
	var regs []func()
	remove = func() {
		for _, r := range regs {
			r()
		}
	}
	for _, inf := range []cache.SharedIndexInformer{p.nodes, p.claims} {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			remove()
			return nil, fmt.Errorf("karpenter: event handler: %w", err)
		}
		regs = append(regs, func() { _ = inf.RemoveEventHandler(reg) })
	}
	return remove, nil
}

// NodeGroup implements watch.Explainer: the group label of a node ("" for
// a node in no group, or not yet seen).
func (p *Pools) NodeGroup(node string) string {
	obj, ok, err := p.nodes.GetStore().GetByKey(node)
	if err != nil || !ok {
		return ""
	}
	if n, ok := obj.(*corev1.Node); ok {
		return n.Labels[GroupLabel]
	}
	return ""
}

// Start starts the informers until ctx ends and waits until their caches
// are filled or wait ends first (false).
func (p *Pools) Start(ctx, wait context.Context) bool {
	p.nf.Start(ctx.Done())
	p.cf.Start(ctx.Done())
	ok := true
	for _, synced := range p.nf.WaitForCacheSync(wait.Done()) {
		ok = ok && synced
	}
	for _, synced := range p.cf.WaitForCacheSync(wait.Done()) {
		ok = ok && synced
	}
	p.synced.Store(ok)
	return ok
}

// Synced reports whether the informers have filled their caches (States
// says nothing true before).
func (p *Pools) Synced() bool { return p.synced.Load() }

// Shutdown stops the informers and waits for them.
func (p *Pools) Shutdown() {
	p.nf.Shutdown()
	p.cf.Shutdown()
}

// States says what every group's machines are doing now.
func (p *Pools) States() []nodegroup.PoolState {
	byGroup := map[string]*nodegroup.PoolState{}
	var out []nodegroup.PoolState
	for _, g := range p.groups.List() {
		out = append(out, nodegroup.PoolState{Group: g})
	}
	for i := range out {
		byGroup[out[i].Group.Name] = &out[i]
	}
	for _, o := range p.nodes.GetStore().List() {
		n, ok := o.(*corev1.Node)
		if !ok || n.DeletionTimestamp != nil {
			continue
		}
		if s := byGroup[n.Labels[GroupLabel]]; s != nil {
			s.Nodes++
		}
	}
	for _, o := range p.claims.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			continue
		}
		s := byGroup[u.GetLabels()[NodePoolLabel]]
		if s == nil {
			continue
		}
		if launched, reason := condition(u, "Launched"); launched == "False" && reason != "" {
			if at := u.GetCreationTimestamp().Time; at.After(s.FailedAt) {
				s.Failed, s.FailedAt = reason, at
			}
			continue
		}
		if registered, _ := condition(u, "Registered"); registered != "True" {
			s.Booting++
			if at := u.GetCreationTimestamp().Time; s.Since.IsZero() || at.Before(s.Since) {
				s.Since = at
			}
		}
	}
	return out
}

// counted is what States reads of a Node or a NodeClaim: its group, whether
// it is going, and a NodeClaim's launch and registration.
func counted(obj any) string {
	switch o := obj.(type) {
	case *corev1.Node:
		return fmt.Sprint(o.Labels[GroupLabel], o.DeletionTimestamp != nil)
	case *unstructured.Unstructured:
		launched, why := condition(o, "Launched")
		registered, _ := condition(o, "Registered")
		return fmt.Sprint(o.GetLabels()[NodePoolLabel], o.GetDeletionTimestamp() != nil, launched, why, registered)
	}
	return ""
}

// condition is a status condition's status and, when not True, its reason
// and message.
func condition(u *unstructured.Unstructured, typ string) (status, why string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != typ {
			continue
		}
		status, _ = m["status"].(string)
		if status != "True" {
			reason, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			why = reason
			if msg != "" {
				why += ": " + msg
			}
		}
		return status, why
	}
	return "", ""
}

// Explain says why a pod the scheduler cannot place waits for capacity, from
// the groups that could hold it: those of its GPUs' class with machines of
// at least its GPUs, spot ones only when it tolerates spot.
func (p *Pools) Explain(pod *corev1.Pod) (string, bool) {
	if !unschedulable(pod) {
		return "", false
	}
	gpus := gpuRequest(pod)
	products := productsOf(pod)
	if gpus == 0 || len(products) == 0 {
		return "", false
	}
	spot := tolerates(pod, "gantry.dev/spot")
	var pools []nodegroup.PoolState
	for _, s := range p.States() {
		g := s.Group
		c, ok := p.classes.Get(g.Class)
		if !ok || g.GPUsPerNode < gpus || (g.Purchase == nodegroup.Spot && !spot) || !slices.ContainsFunc(c.Products, func(x string) bool { return slices.Contains(products, x) }) {
			continue
		}
		pools = append(pools, s)
	}
	return nodegroup.WaitReason(pools, p.now())
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// gpuRequest is how many whole GPUs the pod's containers ask for.
func gpuRequest(p *corev1.Pod) int {
	n := int64(0)
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests["nvidia.com/gpu"]; ok {
			n += q.Value()
		}
	}
	return int(n)
}

// productsOf is the GPU products the pod's required node affinity allows.
func productsOf(p *corev1.Pod) []string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []string
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == "nvidia.com/gpu.product" && e.Operator == corev1.NodeSelectorOpIn {
				out = append(out, e.Values...)
			}
		}
	}
	return out
}

func tolerates(p *corev1.Pod, key string) bool {
	return slices.ContainsFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool {
		return t.Key == key || (t.Key == "" && t.Operator == corev1.TolerationOpExists)
	})
}
