// Package lead owns leader election among Gantry's replicas: one replica at a
// time holds a coordination Lease and runs the loops that must run once
// (the lifecycle controller, the quota sync, the culler); it stops them
// before it lets the Lease go.
package lead

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/gantryhq/gantry/internal/kube/kapi"
)

// Lease configures leader election among Gantry's replicas: a coordination
// Lease named Name in Namespace.
type Lease struct {
	Namespace string
	Name      string
	Identity  string        // this replica's name in the Lease
	Duration  time.Duration // how long others wait after the leader's last renewal; default 15s
	Renew     time.Duration // how long the leader keeps trying to renew before it steps down; default 2/3 of Duration
	Retry     time.Duration // how often candidates try; default Duration/7
}

// Run runs lead whenever this replica holds the Lease, until ctx ends: lead's
// context ends when leadership is lost (or ctx ends), and Run waits for lead
// to return before trying to lead again. On a clean stop lead is stopped and
// waited for first, then the Lease is released so that another replica takes
// over at once; after a crash, others take over once Duration has passed.
func Run(ctx context.Context, core kubernetes.Interface, l Lease, lead func(context.Context)) error {
	if l.Duration <= 0 {
		l.Duration = 15 * time.Second
	}
	if l.Renew <= 0 {
		l.Renew = l.Duration * 2 / 3
	}
	if l.Retry <= 0 {
		l.Retry = l.Duration / 7
	}
	// The Lease's namespace: an API server that does not answer yet is
	// waited for (Gantry keeps serving meanwhile), not a reason to stop.
	for {
		err := ensureNamespace(ctx, core, l.Namespace)
		if err == nil {
			break
		}
		klog.FromContext(ctx).Info("leader election: waiting for the API server", "namespace", l.Namespace, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(l.Retry):
		}
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, l.Namespace, l.Name, core.CoreV1(), core.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: l.Identity})
	if err != nil {
		return fmt.Errorf("lead: lease lock: %w", err)
	}
	for ctx.Err() == nil {
		if err := term(ctx, lock, l, lead); err != nil {
			return err
		}
	}
	return nil
}

// term is one attempt to lead: it waits for the Lease, runs lead while it
// holds it, and returns when leadership is lost or ctx ends. When ctx ends,
// lead is stopped and waited for before the Lease is released, so that
// another replica never starts its loops while this one's still run.
func term(ctx context.Context, lock resourcelock.Interface, l Lease, lead func(context.Context)) error {
	// The elector runs on a context of its own, cancelled only once lead has
	// returned; client-go starts OnStartedLeading in a goroutine of its own,
	// and the guard below makes sure lead has returned (or never starts)
	// once the elector has.
	electorCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		stopped bool
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: l.Duration, RenewDeadline: l.Renew, RetryPeriod: l.Retry,
		ReleaseOnCancel: true, Name: l.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				wg.Add(1)
				mu.Unlock()
				defer wg.Done()
				// lead stops when leadership is lost (lctx) or Gantry stops (ctx).
				runCtx, cancel := context.WithCancel(lctx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				lead(runCtx)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("lead: leader election: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		le.Run(electorCtx) // returns when leadership is lost or the elector is stopped
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	// From here no lead starts; wait for the one running (ctx's end stops it),
	// then stop the elector, which releases the Lease.
	mu.Lock()
	stopped = true
	mu.Unlock()
	wg.Wait()
	stopElector()
	<-done
	return nil
}

// ensureNamespace makes sure Gantry's own namespace exists (for its Lease).
func ensureNamespace(ctx context.Context, core kubernetes.Interface, name string) error {
	_, err := core.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	return kapi.Classify(err, "namespace", name)
}
