// Package controller owns the workload controller: it turns every change the
// cluster's informers see (pods, Jobs, VirtualMachines Gantry manages) into the
// workload's id on a rate-limited workqueue, and workers that take ids from it,
// read the workload's objects from the informers' caches and record what the
// cluster says through the workload lifecycle. A failed write is retried with
// exponential backoff; a report the lifecycle refuses (a late report about a
// stopped workload) is logged and dropped. One id is never processed by two
// workers at once (the workqueue's guarantee). Most changes say nothing new
// (a Kueue Workload's status written again, a pod's condition): an
// observation the record already agreed with a moment ago is not recorded
// again, not even read against the record (Options.Repeat).
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/kube/watch"
	"github.com/gantryhq/gantry/internal/logctx"
	"github.com/gantryhq/gantry/internal/workload"
)

// Source is what the controller watches: watch.Watcher.
type Source interface {
	// OnChange registers changed, called with the workload id of every
	// object that changes.
	OnChange(changed func(workloadID string)) error
	// Run starts watching and returns once the caches are filled.
	Run(ctx context.Context) (synced bool)
	// Shutdown stops watching and waits.
	Shutdown()
	// Observe reads what the cluster says about a workload from the caches.
	Observe(workloadID string) (watch.Observation, bool)
}

// Recorder records what the cluster says: workload.Service.
type Recorder interface {
	// Observe records a workload's status, its exit code once it ended
	// and the node groups its pods run on.
	Observe(ctx context.Context, id string, o workload.Observed) (workload.Workload, error)
	// Evicted records the pods of a workload's Job the cluster disrupted.
	Evicted(ctx context.Context, id string, pods []string) (workload.Workload, error)
}

// Options tune a controller; the zero value is sensible.
type Options struct {
	Workers    int // default 4
	MaxRetries int // per id, before it is dropped until its next change; default 12
	// BaseDelay and MaxDelay bound the retry backoff (default 50ms, 5m).
	BaseDelay, MaxDelay time.Duration
	Clock               clock.WithTicker // default: the real clock
	Log                 *slog.Logger
	// Queues measures the work queue (named "workloads"); none: unmeasured.
	Queues workqueue.MetricsProvider
	// Repeat: an observation identical to the last one recorded for the
	// workload, within Repeat of it and with the record then agreeing
	// (its status the one observed), is not recorded again (default 2s;
	// negative: every observation is recorded). A record changed elsewhere
	// is forgotten (Forget), so it hears the cluster's next observation.
	Repeat time.Duration
}

// Controller records the cluster's reports about workloads.
type Controller struct {
	src   Source
	rec   Recorder
	o     Options
	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	last    map[string]recorded // by workload id: the last observation the record agreed with, or when it was forgotten
	puts    int
	forgets uint64 // how many times Forget was called
}

// recorded is an observation the record agreed with, and when; or, with
// forgot set (the forgets count then), that the record changed elsewhere.
type recorded struct {
	o      workload.Observed
	at     time.Time
	forgot uint64
}

// New returns a controller; Run starts it.
func New(src Source, rec Recorder, o Options) (*Controller, error) {
	if src == nil || rec == nil {
		return nil, errors.New("controller.New: a source and a recorder are required")
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 12
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = 50 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 5 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Repeat == 0 {
		o.Repeat = 2 * time.Second
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.BaseDelay, o.MaxDelay),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "workloads", Clock: o.Clock, MetricsProvider: o.Queues})
	return &Controller{src: src, rec: rec, o: o, queue: q, last: map[string]recorded{}}, nil
}

// Run watches, processes the queue until ctx ends, then stops the workers and
// the watch and waits for both.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.src.OnChange(func(id string) { c.queue.Add(id) }); err != nil {
		return err
	}
	defer c.src.Shutdown()
	if !c.src.Run(ctx) {
		c.queue.ShutDown()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("controller: the cluster's caches did not fill")
	}
	c.o.Log.Info("workload controller started", "workers", c.o.Workers)
	var wg sync.WaitGroup
	for range c.o.Workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDownWithDrain() // lets the workers finish what they hold
	c.queue.ShutDown()          // and stops the queue's delaying loop
	wg.Wait()
	c.o.Log.Info("workload controller stopped")
	return nil
}

// next processes one id; false once the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	id, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(id)
	err := c.sync(logctx.With(ctx, slog.String("workload_id", id)), id)
	var conflict *fault.Conflict
	var nf *fault.NotFound
	switch {
	case err == nil:
		c.queue.Forget(id)
	case errors.As(err, &conflict):
		c.o.Log.Info("cluster report refused by the workload lifecycle", "workload_id", id, "why", err)
		c.queue.Forget(id)
	case errors.As(err, &nf):
		c.o.Log.Debug("cluster report about no recorded workload", "workload_id", id)
		c.queue.Forget(id)
	case ctx.Err() != nil:
		c.queue.Forget(id)
	case c.queue.NumRequeues(id) < c.o.MaxRetries:
		c.o.Log.Warn("recording workload status failed; retrying", "workload_id", id, "attempt", c.queue.NumRequeues(id)+1, "err", err)
		c.queue.AddRateLimited(id)
	default:
		c.o.Log.Error("recording workload status failed; giving up until it changes again", "workload_id", id, "attempts", c.queue.NumRequeues(id)+1, "err", err)
		c.queue.Forget(id)
	}
	return true
}

// sync records what the caches say about one workload.
func (c *Controller) sync(ctx context.Context, id string) error {
	o, ok := c.src.Observe(id)
	if !ok {
		c.Forget(id)
		return nil
	}
	if len(o.Evicted) > 0 {
		w, err := c.rec.Evicted(ctx, id, o.Evicted)
		if err != nil {
			return err
		}
		if w.Status == workload.Failed {
			return nil // past its spot requeues: nothing more to report
		}
	}
	if o.Phase == "" {
		c.Forget(id)
		return nil
	}
	obs := workload.Observed{Status: o.Phase, Reason: o.Reason, NodeGroups: o.NodeGroups, Cluster: o.Cluster, HourPrice: o.HourPrice, GPUHourPrice: o.GPUHourPrice, At: o.At}
	if o.Phase.Ended() {
		obs.ExitCode = o.ExitCode
	}
	if len(o.Evicted) == 0 && c.repeated(id, obs) {
		return nil
	}
	since := c.forgotten()
	w, err := c.rec.Observe(ctx, id, obs)
	if err != nil {
		c.Forget(id) // refused or failed: what the record holds is not known
		return err
	}
	c.remember(id, obs, w.Status, since)
	return nil
}

// forgotten is how many times Forget has been called.
func (c *Controller) forgotten() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgets
}

// Forget drops what the controller remembers of workload id's last
// observation: its record changed elsewhere (a stop, a start, an approval;
// server wires the store's change feed here), so the next observation is
// recorded whatever it says.
func (c *Controller) Forget(id string) {
	now := c.o.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgets++
	c.last[id] = recorded{at: now, forgot: c.forgets}
}

// repeated reports whether obs is the last observation recorded for id,
// within Repeat of it.
func (c *Controller) repeated(id string, obs workload.Observed) bool {
	if c.o.Repeat < 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.last[id]
	return ok && r.forgot == 0 && c.o.Clock.Since(r.at) < c.o.Repeat && same(r.o, obs)
}

// remember keeps obs as id's last observation when the record agrees with
// it (status is the record's after it), and forgets id's otherwise — unless
// the record was changed elsewhere while it was reported (Forget called
// after since, the forgets count when the report began): then it stays
// forgotten. Now and then the entries older than Repeat go.
func (c *Controller) remember(id string, obs workload.Observed, status workload.Status, since uint64) {
	if c.o.Repeat < 0 {
		return
	}
	now := c.o.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.last[id]; ok && r.forgot > since {
		return
	}
	if status != obs.Status {
		delete(c.last, id)
		return
	}
	obs.NodeGroups = slices.Clone(obs.NodeGroups)
	c.last[id] = recorded{o: obs, at: now}
	if c.puts++; c.puts%1024 == 0 {
		for k, r := range c.last {
			if now.Sub(r.at) >= c.o.Repeat {
				delete(c.last, k)
			}
		}
	}
}

// same reports whether two observations say the same.
func same(a, b workload.Observed) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.Cluster == b.Cluster && a.HourPrice == b.HourPrice && a.GPUHourPrice == b.GPUHourPrice &&
		a.At.Equal(b.At) && slices.Equal(a.NodeGroups, b.NodeGroups) &&
		(a.ExitCode == nil) == (b.ExitCode == nil) && (a.ExitCode == nil || *a.ExitCode == *b.ExitCode)
}
