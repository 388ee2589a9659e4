package kube

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/kube/lead"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/kube/watch"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// hasKubeVirt reports whether the API server serves VirtualMachines.
func (c *Cluster) hasKubeVirt() bool {
	_, err := c.core.Discovery().ServerResourcesForGroupVersion(kapi.VMResource.GroupVersion().String())
	return err == nil
}

// Core is the cluster's typed client.
func (c *Cluster) Core() kubernetes.Interface { return c.core }

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
	return watch.New(watch.Options{Core: c.core, Dynamic: c.dyn, Resync: resync, KubeVirt: c.hasKubeVirt(), Kueue: c.kueue, Observer: c.obs})
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
