// Package kueue owns Gantry's side of Kueue on one cluster: it keeps Kueue's
// objects in sync with the policy's quotas (SyncQuotas), holds a team's
// queue, stops and starts queued Jobs and VMs by deactivating their Kueue
// Workloads, runs Gantry's AdmissionCheck controller (approvals, budgets,
// queued VMs), and reads what a Kueue Workload says: admitted, evicted,
// waiting, why, and where in its queue.
package kueue

import (
	"errors"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
)

// Kueue talks to Kueue's objects on one cluster.
type Kueue struct {
	dyn    dynamic.Interface
	core   kubernetes.Interface
	obs    Observer
	queues workqueue.MetricsProvider // nil: unmeasured

	mu      sync.Mutex
	applied map[string]applied // by kind/name: what SyncQuotas last applied
}

// Observer is told how long Kueue took to admit a workload.
type Observer interface {
	ObserveAdmission(wait time.Duration)
}

// Options are what a Kueue is made of.
type Options struct {
	Dynamic dynamic.Interface    // required
	Core    kubernetes.Interface // required
	// Observer is told admission waits (required: the cluster's).
	Observer Observer
	// Queues measures the controller's work queue; nil: client-go's
	// default (nothing).
	Queues workqueue.MetricsProvider
}

// New returns a Kueue on the clients.
func New(o Options) (*Kueue, error) {
	if o.Dynamic == nil || o.Core == nil || o.Observer == nil {
		return nil, errors.New("kueue: clients and an observer are required")
	}
	return &Kueue{dyn: o.Dynamic, core: o.Core, obs: o.Observer, queues: o.Queues, applied: map[string]applied{}}, nil
}
