package nodes

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/render"
)

// capacity is what the launches' checks and estimates read of the cluster's
// GPUs, from informers: the GPU nodes, and the pods bound to a node that
// have not ended, each cut down to what it holds (its containers' limits).
// Before, every launch listed the class's nodes twice and each node's pods
// from the API server — on a class of 40 nodes, 42 requests a launch.
type capacity struct {
	nodes, pods cache.SharedIndexInformer
}

// byNode indexes pods by the node they are bound to.
const byNode = "node"

// RunCapacity keeps the informers MostOnOneNode and FreeGPUs read until ctx
// ends; until their caches have filled (and after), those list from the API
// server as before. Run it once per Nodes, on every replica (launches are
// served by all of them).
func (k *Nodes) RunCapacity(ctx context.Context) error {
	if !k.running.CompareAndSwap(false, true) {
		return errors.New("nodes: RunCapacity is already running")
	}
	defer k.running.Store(false)
	gpuNodes := informers.NewSharedInformerFactoryWithOptions(k.core, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = render.LabelGPUProduct }))
	// Bound and not ended: a pod that ends, or is deleted, leaves the cache.
	live := informers.NewSharedInformerFactoryWithOptions(k.core, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.AndSelectors(fields.OneTermNotEqualSelector("spec.nodeName", ""),
				fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
				fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed))).String()
		}))
	c := &capacity{nodes: gpuNodes.Core().V1().Nodes().Informer(), pods: live.Core().V1().Pods().Informer()}
	if err := c.pods.SetTransform(holdings); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	if err := c.pods.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	gpuNodes.Start(ctx.Done())
	live.Start(ctx.Done())
	defer gpuNodes.Shutdown()
	defer live.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.nodes.HasSynced, c.pods.HasSynced) {
		return nil // ctx ended first
	}
	k.capacity.Store(c)
	defer k.capacity.Store(nil)
	<-ctx.Done()
	return nil
}

// holdings cuts a pod down to what capacity reads of it: its key, its
// node, its phase and its containers' limits. The cache then holds a few
// hundred bytes a pod, whatever the pod's spec.
func holdings(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	cut := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}, Status: corev1.PodStatus{Phase: p.Status.Phase}}
	for _, c := range p.Spec.Containers {
		cut.Spec.Containers = append(cut.Spec.Containers, corev1.Container{Name: c.Name, Resources: corev1.ResourceRequirements{Limits: c.Resources.Limits}})
	}
	return cut, nil
}

// classNodes are the cached nodes of class's products.
func (c *capacity) classNodes(class gpu.Class) []corev1.Node {
	var out []corev1.Node
	for _, obj := range c.nodes.GetStore().List() {
		if n, ok := obj.(*corev1.Node); ok && slices.Contains(class.Products, n.Labels[render.LabelGPUProduct]) {
			out = append(out, *n)
		}
	}
	return out
}

// podsOn are the cached pods bound to node.
func (c *capacity) podsOn(node string) []corev1.Pod {
	objs, _ := c.pods.GetIndexer().ByIndex(byNode, node) // the index exists
	out := make([]corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok {
			out = append(out, *p)
		}
	}
	return out
}
