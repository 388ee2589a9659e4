package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// Options configure an agent.
type Options struct {
	Node     string       // this node's name
	GPUs     GPUs         // NVML, or a replay
	Pods     PodResources // nil: readings are not attributed
	Procs    ProcessPods  // maps a PID to its pod (default: /proc/<pid>/cgroup)
	Sink     Sink         // nil: metrics only
	Interval time.Duration
	// Buffer is how many readings are kept while the sink is away; past it
	// the oldest are dropped and counted.
	Buffer  int
	Clock   clock.WithTicker
	Log     *slog.Logger
	Version string
}

// Defaults.
const (
	DefaultInterval = 10 * time.Second
	DefaultBuffer   = 100_000
	// MaxBatch is the most readings one push carries: about 700 bytes each
	// as JSON, so a full batch stays well under Gantry's default body limit
	// (1 MiB) after an outage.
	MaxBatch = 500
	// backoff bounds between failed pushes.
	minBackoff = time.Second
	maxBackoff = time.Minute
)

// Agent samples the node's GPUs, keeps the last pass for /metrics and pushes
// readings to the sink.
type Agent struct {
	o        Options
	registry *prometheus.Registry

	mu     sync.Mutex
	gpus   []telemetry.GPUState // the last inventory
	last   []telemetry.Reading  // the last pass
	buf    ring                 // readings not yet pushed
	events []telemetry.Event    // events not yet pushed
	// eventsBase is the sequence number of events[0] (events are numbered
	// as they arrive), so a push removes exactly what it sent.
	eventsBase uint64
	lastXID    map[string]uint64 // GPU UUID → its last XID, for /metrics
	// dropped counts readings dropped since the last push that went through.
	dropped uint64
	// inflightEnd numbers the reading after the last one of the batch being
	// pushed (0: none): a full buffer that drops readings of that batch has
	// not lost them unless the push fails.
	inflightEnd uint64

	wake chan struct{}

	droppedTotal prometheus.Counter
	pushErrors   prometheus.Counter
	pushed       prometheus.Counter
	passSeconds  prometheus.Gauge
	passErrors   prometheus.Counter
}

// New builds an agent; GPUs and Node are required.
func New(o Options) (*Agent, error) {
	if o.GPUs == nil || o.Node == "" {
		return nil, errors.New("agent: GPUs and Node are required")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Procs == nil {
		o.Procs = CgroupPods{}
	}
	a := &Agent{o: o, registry: prometheus.NewRegistry(), buf: newRing(o.Buffer), wake: make(chan struct{}, 1), lastXID: map[string]uint64{}}
	a.droppedTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "gantry_agent_readings_dropped_total", Help: "Readings dropped because Gantry was away longer than the buffer holds, or refused a batch."})
	a.pushErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "gantry_agent_push_errors_total", Help: "Pushes to Gantry that failed."})
	a.pushed = prometheus.NewCounter(prometheus.CounterOpts{Name: "gantry_agent_readings_pushed_total", Help: "Readings Gantry accepted."})
	a.passSeconds = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gantry_agent_sample_duration_seconds", Help: "How long the last sampling pass took."})
	a.passErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "gantry_agent_sample_errors_total", Help: "Sampling passes that failed."})
	a.registry.MustRegister(a.droppedTotal, a.pushErrors, a.pushed, a.passSeconds, a.passErrors, collector{a})
	return a, nil
}

// Handler serves the Prometheus metrics: the last pass under dcgm-exporter's
// names and labels, and the agent's own counters.
func (a *Agent) Handler() http.Handler {
	return promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Run samples every interval and pushes until ctx ends. Pushing runs on its
// own, so a slow or absent Gantry never delays sampling.
func (a *Agent) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		t := a.o.Clock.NewTicker(a.o.Interval)
		defer t.Stop()
		for {
			if err := a.SampleOnce(gctx); err != nil && gctx.Err() == nil {
				a.o.Log.Warn("sampling the GPUs", "err", err)
			}
			select {
			case <-gctx.Done():
				return nil
			case <-t.C():
			}
		}
	})
	if a.o.Sink != nil {
		g.Go(func() error { a.pushLoop(gctx); return nil })
	}
	return g.Wait()
}

// SampleOnce is one pass: inventory, a sample of every device, new events,
// who holds what; the readings go to /metrics and to the push buffer.
func (a *Agent) SampleOnce(ctx context.Context) error {
	start := a.o.Clock.Now()
	err := a.sample(ctx, start)
	a.passSeconds.Set(a.o.Clock.Since(start).Seconds())
	if err != nil {
		a.passErrors.Inc()
	}
	return err
}

func (a *Agent) sample(ctx context.Context, now time.Time) error {
	inv, err := a.o.GPUs.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("GPU inventory: %w", err)
	}
	samples, err := a.o.GPUs.Sample(ctx, now)
	if err != nil {
		return fmt.Errorf("GPU sample: %w", err)
	}
	events := a.o.GPUs.Events()
	var pods []PodDevices
	if a.o.Pods != nil {
		if pods, err = a.o.Pods.List(ctx); err != nil {
			// Readings still count; they are not attributed this pass.
			a.o.Log.Warn("kubelet PodResources: readings not attributed this pass", "err", err)
		}
	}
	readings := Attribute(samples, pods, a.o.Procs)
	t := now.UTC().Truncate(time.Millisecond)
	for i := range readings {
		readings[i].Time = t
	}
	a.mu.Lock()
	a.gpus, a.last = inv, readings
	a.events = append(a.events, events...)
	if cut := len(a.events) - telemetry.MaxEvents; cut > 0 {
		a.events = a.events[cut:]
		a.eventsBase += uint64(cut)
	}
	for _, e := range events {
		a.lastXID[e.GPU] = e.XID
	}
	if a.o.Sink != nil {
		firstBefore := a.buf.first
		n := a.buf.push(readings)
		// Dropped readings still being pushed are not lost (yet): the
		// push's outcome decides.
		inflight := 0
		if a.inflightEnd > firstBefore {
			inflight = min(n, int(a.inflightEnd-firstBefore))
		}
		a.dropped += uint64(n - inflight)
		a.droppedTotal.Add(float64(n - inflight))
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return nil
}

// PermanentError is a push Gantry refused for what the batch is (400, 413,
// 422): sending it again cannot help, so it is dropped and counted.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// pushLoop sends what the buffer holds whenever a pass added to it, in
// batches of at most MaxBatch, backing off after failures.
func (a *Agent) pushLoop(ctx context.Context) {
	backoff := minBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		}
		for {
			a.mu.Lock()
			readings, from := a.buf.peek(MaxBatch)
			b := telemetry.Batch{Node: a.o.Node, Agent: a.o.Version, GPUs: a.gpus, Readings: readings,
				Events: append([]telemetry.Event(nil), a.events...), Dropped: a.dropped}
			nEvents, eventsFrom := len(a.events), a.eventsBase
			end := from + uint64(len(readings))
			if len(readings) > 0 {
				a.inflightEnd = end
			}
			a.mu.Unlock()
			if len(readings) == 0 && nEvents == 0 {
				break
			}
			err := a.o.Sink.Push(ctx, b)
			var perm *PermanentError
			taken := err == nil || errors.As(err, &perm)
			// One critical section from the push's end to the buffer's
			// update: a pass in between would see the batch no longer in
			// flight, drop what was just delivered and count it as lost.
			a.mu.Lock()
			a.inflightEnd = 0
			if taken {
				// Sampling may have dropped some of what was sent (a full
				// buffer) or trimmed the events meanwhile: remove what was
				// sent and is still here, nothing newer.
				a.buf.dropThrough(end)
				if sent := eventsFrom + uint64(nEvents); sent > a.eventsBase {
					n := min(int(sent-a.eventsBase), len(a.events))
					a.events = a.events[n:]
					a.eventsBase += uint64(n)
				}
				if err == nil {
					a.dropped -= b.Dropped
				} else {
					// Gantry did not take the batch, nor its count: the
					// next batch tells it of both.
					a.dropped += uint64(len(readings))
				}
			} else if lost := min(a.buf.first, end); lost > from {
				// Not taken: what a full buffer dropped of this batch
				// meanwhile is lost now, and counted.
				a.dropped += lost - from
				a.droppedTotal.Add(float64(lost - from))
			}
			a.mu.Unlock()
			switch {
			case taken:
				backoff = minBackoff
				if err != nil {
					a.pushErrors.Inc()
					a.droppedTotal.Add(float64(len(readings)))
					a.o.Log.Error("Gantry refused a batch; dropped", "readings", len(readings), "err", err)
				} else {
					a.pushed.Add(float64(len(readings)))
				}
				continue
			case ctx.Err() != nil:
				return
			}
			a.pushErrors.Inc()
			a.o.Log.Warn("pushing to Gantry; will retry", "err", err, "in", backoff.String())
			select {
			case <-ctx.Done():
				return
			case <-a.o.Clock.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// Buffered is how many readings wait to be pushed.
func (a *Agent) Buffered() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.len()
}

// ring is a bounded FIFO of readings that drops the oldest when full.
// Readings are numbered as they arrive; first is the number of the oldest.
type ring struct {
	items      []telemetry.Reading
	head, size int
	first      uint64
}

func newRing(capacity int) ring { return ring{items: make([]telemetry.Reading, capacity)} }

func (r *ring) len() int { return r.size }

// push appends readings and returns how many of the oldest it dropped.
func (r *ring) push(rs []telemetry.Reading) int {
	dropped := 0
	for _, x := range rs {
		if r.size == len(r.items) {
			r.items[r.head] = telemetry.Reading{}
			r.head = (r.head + 1) % len(r.items)
			r.size--
			r.first++
			dropped++
		}
		r.items[(r.head+r.size)%len(r.items)] = x
		r.size++
	}
	return dropped
}

// peek copies up to n of the oldest readings and says the number of the
// first.
func (r *ring) peek(n int) ([]telemetry.Reading, uint64) {
	n = min(n, r.size)
	out := make([]telemetry.Reading, n)
	for i := range out {
		out[i] = r.items[(r.head+i)%len(r.items)]
	}
	return out, r.first
}

// dropThrough removes the readings numbered below end that are still here.
func (r *ring) dropThrough(end uint64) {
	if end <= r.first {
		return
	}
	n := min(int(end-r.first), r.size)
	for i := 0; i < n; i++ {
		r.items[(r.head+i)%len(r.items)] = telemetry.Reading{}
	}
	r.head = (r.head + n) % len(r.items)
	r.size -= n
	r.first += uint64(n)
}
