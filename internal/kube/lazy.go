package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// Lazy is a Cluster that loads its kubeconfig on first use and again after
// each failure, so that Gantry starts (and keeps launches) while the kubeconfig
// is missing or unreadable, and picks it up once it is there. Until then every
// call answers *fault.Unavailable naming the problem.
type Lazy struct {
	path    string
	opts    Options
	mu      sync.Mutex
	cluster *Cluster
}

// InCluster, as a kubeconfig path, means the pod's own ServiceAccount and the
// API server's in-cluster address (how the Helm chart runs Gantry).
const InCluster = "in-cluster"

// LazyOptions are what a Lazy is made of.
type LazyOptions struct {
	// Kubeconfig is the kubeconfig's path, or InCluster for the pod's
	// ServiceAccount (required).
	Kubeconfig string
	// Cluster configures the cluster once it loads.
	Cluster Options
}

// NewLazy returns a Lazy; nothing is loaded until it is first asked.
func NewLazy(o LazyOptions) (*Lazy, error) {
	if o.Kubeconfig == "" {
		return nil, errors.New("kube: a Lazy needs a kubeconfig path (or in-cluster)")
	}
	return &Lazy{path: o.Kubeconfig, opts: o.Cluster}, nil
}

// Cluster returns the cluster, loading the kubeconfig if it has not loaded
// yet; *fault.Unavailable names the problem.
func (l *Lazy) Cluster() (*Cluster, error) { return l.get() }

func (l *Lazy) get() (*Cluster, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cluster != nil {
		return l.cluster, nil
	}
	var cfg *rest.Config
	var err error
	if l.path == InCluster {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", l.path)
	}
	if err != nil {
		return nil, &fault.Unavailable{What: "kubernetes API server", Err: fmt.Errorf("kubeconfig %s: %w", l.path, err)}
	}
	c, err := New(rest.CopyConfig(cfg), l.opts)
	if err != nil {
		return nil, &fault.Unavailable{What: "kubernetes API server", Err: err}
	}
	l.cluster = c
	return c, nil
}

// Ping implements api.Pinger.
func (l *Lazy) Ping(ctx context.Context) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.Ping(ctx)
}

// EnsureNamespace implements workload.Cluster.
func (l *Lazy) EnsureNamespace(ctx context.Context, name string, team team.Name) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.EnsureNamespace(ctx, name, team)
}

// Apply implements workload.Cluster.
func (l *Lazy) Apply(ctx context.Context, objs []render.Object) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.Apply(ctx, objs)
}

// Delete implements workload.Cluster.
func (l *Lazy) Delete(ctx context.Context, namespace, kind, name string) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.Delete(ctx, namespace, kind, name)
}

// Events implements workload.Cluster.
func (l *Lazy) Events(ctx context.Context, namespace, prefix, id string) ([]workload.Event, error) {
	c, err := l.get()
	if err != nil {
		return nil, err
	}
	return c.Events(ctx, namespace, prefix, id)
}

// Primary implements workload.Cluster.
func (l *Lazy) Primary(ctx context.Context, o workload.ObjectRef) (workload.ObjectRef, error) {
	c, err := l.get()
	if err != nil {
		return o, err
	}
	return c.Primary(ctx, o)
}

// Logs implements workload.Cluster.
func (l *Lazy) Logs(ctx context.Context, namespace, workloadID string, follow bool, tailLines int64) (io.ReadCloser, error) {
	c, err := l.get()
	if err != nil {
		return nil, err
	}
	return c.Logs(ctx, namespace, workloadID, follow, tailLines)
}

// SetRunning implements workload.Cluster.
func (l *Lazy) SetRunning(ctx context.Context, o workload.ObjectRef, run bool) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.SetRunning(ctx, o, run)
}

// SetAdmission implements workload.Cluster.
func (l *Lazy) SetAdmission(ctx context.Context, namespace, id string, a workload.Admission) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.SetAdmission(ctx, namespace, id, a)
}

// HoldQueue implements workload.Cluster.
func (l *Lazy) HoldQueue(ctx context.Context, team team.Name) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.HoldQueue(ctx, team)
}

// QueueUsage implements estimate.Cluster.
func (l *Lazy) QueueUsage(ctx context.Context, team team.Name, class string) (float64, int, error) {
	c, err := l.get()
	if err != nil {
		return 0, 0, err
	}
	return c.QueueUsage(ctx, team, class)
}

// MostOnOneNode implements workload.Cluster.
func (l *Lazy) MostOnOneNode(ctx context.Context, class gpu.Class, res string) (int, int, error) {
	c, err := l.get()
	if err != nil {
		return 0, 0, err
	}
	return c.MostOnOneNode(ctx, class, res)
}

// FreeGPUs implements estimate.Cluster.
func (l *Lazy) FreeGPUs(ctx context.Context, class gpu.Class, res string) (int, int, int, int, error) {
	c, err := l.get()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	return c.FreeGPUs(ctx, class, res)
}

func (l *Lazy) FreeCPU(ctx context.Context, label string) (int64, int64, int, error) {
	c, err := l.get()
	if err != nil {
		return 0, 0, 0, err
	}
	return c.FreeCPU(ctx, label)
}

// Kueue is what /readyz asks when quotas are on Kueue: whether the API
// server serves Kueue's API (without it every launch would wait forever).
func (l *Lazy) Kueue() interface{ Ping(context.Context) error } { return kueuePing{l} }

type kueuePing struct{ l *Lazy }

func (p kueuePing) Ping(ctx context.Context) error {
	c, err := p.l.get()
	if err != nil {
		return err
	}
	if _, err := c.core.Discovery().ServerResourcesForGroupVersion("kueue.x-k8s.io/v1beta2"); err != nil {
		return &fault.Unavailable{What: "Kueue", Err: fmt.Errorf("the API server does not serve kueue.x-k8s.io/v1beta2 (%v): install Kueue, or set quota.kueue: false", err)}
	}
	return nil
}

// States implements capacity.Pools (Cluster.States), once the cluster is
// loaded.
func (l *Lazy) States() ([]nodegroup.PoolState, bool) {
	c, err := l.get()
	if err != nil {
		return nil, false
	}
	return c.States()
}

// DialService dials a Service of the cluster through its ready endpoints
// (DialService); it is an http.Transport's DialContext.
func (l *Lazy) DialService(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := l.get()
	if err != nil {
		return nil, err
	}
	return DialService(ctx, c.core, network, addr)
}
