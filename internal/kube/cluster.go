package kube

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/karpenter"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/kube/lead"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/kube/watch"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// hasKubeVirt reports whether the API server serves VirtualMachines.
func (c *Cluster) hasKubeVirt() bool {
	_, err := c.core.Discovery().ServerResourcesForGroupVersion(kapi.VMResource.GroupVersion().String())
	return err == nil
}

// servesFleetVMs reports whether the API server serves FleetVMs (the chart
// installs their CRD; a fleet's manager watches them).
func (c *Cluster) servesFleetVMs() bool {
	_, err := c.core.Discovery().ServerResourcesForGroupVersion(kapi.FleetVMResource.GroupVersion().String())
	return err == nil
}

// Core is the cluster's typed client.
func (c *Cluster) Core() kubernetes.Interface { return c.core }

// Dynamic is the cluster's dynamic client.
func (c *Cluster) Dynamic() dynamic.Interface { return c.dyn }

// Kueue is the cluster's Kueue side: its objects, the teams' queues and
// Gantry's AdmissionCheck controller.
func (c *Cluster) Kueue() *kueue.Kueue { return c.queue }

// Nodes is what Gantry reads and writes of the cluster's nodes.
func (c *Cluster) Nodes() *nodes.Nodes { return c.nodes }

// RunCapacity keeps the informers on GPU nodes and their pods that the
// launches' checks and estimates read, until ctx ends (nodes.RunCapacity).
func (c *Cluster) RunCapacity(ctx context.Context) error { return c.nodes.RunCapacity(ctx) }

// Watcher returns informers on the cluster's Gantry-managed objects;
// resync re-delivers every object that often (0: never).
func (c *Cluster) Watcher(resync time.Duration) (*watch.Watcher, error) {
	o := watch.Options{Core: c.core, Dynamic: c.dyn, Resync: resync, KubeVirt: c.hasKubeVirt(), Kueue: c.kueue, Observer: c.obs}
	o.FleetVMs = c.workers != nil && c.kueue && c.servesFleetVMs()
	pools, err := c.Pools()
	if err != nil {
		return nil, err
	}
	if pools != nil {
		o.Capacity = pools
	}
	return watch.New(o)
}

// Pools is the watch on the node groups' machines, made once; nil when no
// groups are declared or the cluster runs no Karpenter. RunPools runs it.
func (c *Cluster) Pools() (*karpenter.Pools, error) {
	c.poolsOnce.Do(func() {
		if len(c.groups.List()) > 0 && c.classes != nil && c.hasKarpenter() {
			c.pools, c.poolsErr = karpenter.NewPools(karpenter.PoolsOptions{Core: c.core, Dynamic: c.dyn, NodeGroups: c.groups, Classes: c.classes, Now: c.now})
		}
	})
	return c.pools, c.poolsErr
}

// Placeholders holds warm capacity's placeholder pods in namespace; nil
// when no groups are declared or the cluster runs no Karpenter (nothing
// would boot machines for them).
func (c *Cluster) Placeholders(namespace string) (*karpenter.Placeholders, error) {
	p, err := c.Pools()
	if err != nil || p == nil {
		return nil, err
	}
	return karpenter.NewPlaceholders(c.core, namespace)
}

// Sizes keeps the scaled node groups' NodePools at the groups' max and
// quiet time in force; nil when no groups are declared or the cluster runs
// no Karpenter.
func (c *Cluster) Sizes() (*karpenter.Sizes, error) {
	p, err := c.Pools()
	if err != nil || p == nil {
		return nil, err
	}
	return karpenter.NewSizes(c.dyn, c.groups, c.now)
}

// hasKarpenter reports whether the cluster serves Karpenter's NodeClaims.
func (c *Cluster) hasKarpenter() bool {
	_, err := c.core.Discovery().ServerResourcesForGroupVersion(karpenter.NodeClaims.GroupVersion().String())
	return err == nil
}

// Lead runs lead whenever this replica holds the Lease, until ctx ends
// (lead.Run).
func (c *Cluster) Lead(ctx context.Context, l lead.Lease, fn func(context.Context)) error {
	return lead.Run(ctx, c.core, l, fn)
}

// SetAdmission implements workload.Cluster (kueue.Kueue.SetAdmission).
func (c *Cluster) SetAdmission(ctx context.Context, namespace, id string, a workload.Admission) error {
	return c.queue.SetAdmission(ctx, namespace, id, a)
}

// HoldQueue implements workload.Cluster (kueue.Kueue.HoldQueue).
func (c *Cluster) HoldQueue(ctx context.Context, t team.Name) error { return c.queue.HoldQueue(ctx, t) }

// QueueUsage implements estimate.Cluster (kueue.Kueue.QueueUsage).
func (c *Cluster) QueueUsage(ctx context.Context, t team.Name, class string) (float64, int, error) {
	return c.queue.QueueUsage(ctx, t, class)
}

// MostOnOneNode implements workload.Cluster (nodes.Nodes.MostOnOneNode).
func (c *Cluster) MostOnOneNode(ctx context.Context, class gpu.Class, res string) (int, int, error) {
	return c.nodes.MostOnOneNode(ctx, class, res)
}

// FreeGPUs implements estimate.Cluster (nodes.Nodes.FreeGPUs).
func (c *Cluster) FreeGPUs(ctx context.Context, class gpu.Class, res string) (total, onOneNode, mostOnOneNode, nodeCount int, err error) {
	return c.nodes.FreeGPUs(ctx, class, res)
}

// FreeCPU is the CPU free on the CPU nodes (workload.Cluster and
// estimate.Cluster).
func (c *Cluster) FreeCPU(ctx context.Context, label string) (onOneNode, mostOnOneNode int64, nodes int, err error) {
	return c.nodes.FreeCPU(ctx, label)
}

// RunPools keeps the watch on the node groups' machines until ctx ends
// (nothing to do without one).
func (c *Cluster) RunPools(ctx context.Context) error {
	p, err := c.Pools()
	if err != nil || p == nil {
		return err
	}
	// A watch that cannot fill (NodeClaims not readable: the chart's RBAC,
	// a Karpenter gone) says so rather than waiting forever.
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	wait, cancel := context.WithTimeout(ctx, poolsSync)
	synced := p.Start(pctx, wait)
	cancel()
	if !synced {
		stop()
		p.Shutdown()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the node groups' nodes and Karpenter's NodeClaims could not be listed within %s (RBAC?)", poolsSync)
	}
	<-ctx.Done()
	stop()
	p.Shutdown()
	return nil
}

// poolsSync bounds how long RunPools waits for its informers to fill.
const poolsSync = 2 * time.Minute

// States is what the node groups' machines are doing, once the watch on
// them has filled its caches (RunPools); ok is false before, or without one.
func (c *Cluster) States() ([]nodegroup.PoolState, bool) {
	p, err := c.Pools()
	if err != nil || p == nil || !p.Synced() {
		return nil, false
	}
	return p.States(), true
}
