package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// PodLocator says where a pod runs and which workload it belongs to (the
// cluster's API server, through kube).
type PodLocator interface {
	LocatePod(ctx context.Context, namespace, name string) (PodPlace, error)
}

// PodPlace is a pod's node and the Gantry workload it belongs to ("" for a
// pod Gantry did not launch). Found is false for a pod that does not exist
// (any more).
type PodPlace struct {
	Found    bool
	Node     string
	Workload string
}

// Health acts on a GPU that turned unhealthy: an event on the pods that use
// it and, with health.cordon on, the node cordoned and labelled.
type Health interface {
	GPUUnhealthy(ctx context.Context, node string, gpu GPURecord, pods []PodRef) error
}

// Observer is told of every batch's stored readings (the advice rules run
// on them as they arrive).
type Observer interface {
	Observe(ctx context.Context, readings []Stored)
}

// Options configure the telemetry service.
type Options struct {
	Store Store
	// Pods locates pods for attribution and for checking that an agent
	// reports only pods of its own node; nil (no cluster) leaves readings
	// unattributed.
	Pods PodLocator
	// Health is told about GPUs that turned unhealthy (nil: recorded only).
	Health Health
	// Observer sees the readings of every stored batch (nil: none).
	Observer Observer
	// WorkloadNamespace says which namespace a workload's pods run in; a
	// pod that names a workload from elsewhere (its labels are anyone's to
	// write) is not attributed to it. Nil: labels are taken as they are.
	WorkloadNamespace func(ctx context.Context, workloadID string) (string, error)
	// RawRetention keeps raw samples (default 48h); RollupRetention keeps
	// rollups (default 90 days). XIDHold keeps a GPU unhealthy after a
	// critical XID without a new one (default 24h).
	RawRetention    time.Duration
	RollupRetention time.Duration
	XIDHold         time.Duration
	Now             func() time.Time
	Log             *slog.Logger
}

// Service ingests agents' batches and keeps the stored series rolled up and
// within their retention.
type Service struct {
	o     Options
	mu    sync.Mutex
	pods  map[string]podEntry // namespace/name → where it runs, cached
	order []string            // insertion order, for eviction
}

type podEntry struct {
	place   PodPlace
	expires time.Time
}

// New builds the service; a store is required.
func New(o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("telemetry: a store is required")
	}
	if o.RawRetention <= 0 {
		o.RawRetention = 48 * time.Hour
	}
	if o.RollupRetention <= 0 {
		o.RollupRetention = 90 * 24 * time.Hour
	}
	if o.XIDHold <= 0 {
		o.XIDHold = 24 * time.Hour
	}
	if o.Now == nil {
		return nil, errors.New("telemetry: Now (the server's clock) is required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Service{o: o, pods: map[string]podEntry{}}, nil
}

// RawRetention is how long raw samples are kept.
func (s *Service) RawRetention() time.Duration { return s.o.RawRetention }

// Result says what became of a batch.
type Result struct {
	Accepted     int `json:"accepted"`
	Unattributed int `json:"unattributed"` // readings of pods that are gone or Gantry did not launch
}

// Limits of one batch.
const (
	MaxReadings = 20000
	MaxGPUs     = 64
	MaxEvents   = 1000
	// maxProblems is how many problems of one batch are listed.
	maxProblems = 100
	// futureSkew is how far ahead of Gantry's clock a reading may be.
	futureSkew = 5 * time.Minute
)

// Ingest stores a batch pushed by the agent of node (as its credentials
// say). The whole batch is refused, with every bad field named, when it is
// for another node, a reading is out of range or outside the raw retention,
// or a reading names a pod that runs on another node; nothing of a refused
// batch is stored.
func (s *Service) Ingest(ctx context.Context, node string, b Batch) (Result, error) {
	if b.Node != node {
		return Result{}, &fault.Forbidden{Reason: fmt.Sprintf("this agent's credentials are for node %q, not %q", node, b.Node)}
	}
	now := s.o.Now()
	var errs fault.List
	if len(b.Readings) > MaxReadings {
		errs.Addf("readings", "%d readings in one batch; at most %d", len(b.Readings), MaxReadings)
	}
	if len(b.GPUs) > MaxGPUs {
		errs.Addf("gpus", "%d GPUs; at most %d", len(b.GPUs), MaxGPUs)
	}
	if len(b.Events) > MaxEvents {
		errs.Addf("events", "%d events; at most %d", len(b.Events), MaxEvents)
	}
	if err := errs.Err(); err != nil {
		return Result{}, err
	}
	// A reading must fall in an hour that starts within the raw retention:
	// rolling up a period some of whose raw samples are already pruned
	// would replace its rollups with partial ones.
	oldest := Bucket(now.Add(-s.o.RawRetention), Hour).Add(Hour)
	stored := make([]Stored, 0, len(b.Readings))
	var res Result
	for i, r := range b.Readings {
		if errs.Len() >= maxProblems {
			errs.Addf("readings", "more problems from readings[%d] on are not listed", i)
			break
		}
		p := fmt.Sprintf("readings[%d]", i)
		checkReading(&errs, p, r, oldest, now.Add(futureSkew))
		st := Stored{Series: SeriesKey{Node: node, Device: r.Device, Pod: r.Pod}, Attribution: r.Attribution, Time: r.Time, Share: r.Share, Values: r.Values}
		if r.Pod.Name != "" {
			place, err := s.locate(ctx, r.Pod.Namespace, r.Pod.Name, false)
			if err == nil && place.Found && place.Node != node {
				// The cache may be behind a pod that moved (a stopped and
				// started notebook): ask again before refusing.
				place, err = s.locate(ctx, r.Pod.Namespace, r.Pod.Name, true)
			}
			switch {
			case err != nil:
				// The cluster did not answer (or refused Gantry): not the
				// agent's fault; it retries.
				return Result{}, &fault.Unavailable{What: "the cluster, to attribute readings", Err: err}
			case place.Found && place.Node != node:
				errs.Addf(p+".pod", "pod %s/%s runs on node %q, not on this agent's node %q", r.Pod.Namespace, r.Pod.Name, place.Node, node)
			case place.Found:
				st.Series.Workload = place.Workload
			case s.o.Pods != nil:
				// A pod the API server does not know (gone, or never there)
				// is not taken on the agent's word: the reading is kept as
				// the device's, so invented names cannot multiply series.
				st.Series.Pod = PodRef{}
			}
		}
		if st.Series.Workload == "" {
			res.Unattributed++
		}
		stored = append(stored, st)
	}
	for i, g := range b.GPUs {
		if g.GPU == "" {
			errs.Addf(fmt.Sprintf("gpus[%d].gpu", i), "a GPU's UUID is required")
		}
	}
	if err := s.checkInventory(ctx, node, b, &errs); err != nil {
		return Result{}, err
	}
	for i, e := range b.Events {
		if e.GPU == "" {
			errs.Addf(fmt.Sprintf("events[%d].gpu", i), "the GPU's UUID is required")
		}
		if e.Time.Before(oldest) || e.Time.After(now.Add(futureSkew)) {
			errs.Addf(fmt.Sprintf("events[%d].t", i), "%s is not within the raw retention", e.Time.UTC().Format(time.RFC3339))
		}
	}
	if err := errs.Err(); err != nil {
		return Result{}, err
	}
	if err := s.o.Store.AppendSamples(ctx, stored); err != nil {
		return Result{}, fmt.Errorf("store samples of node %s: %w", node, err)
	}
	if s.o.Observer != nil {
		s.o.Observer.Observe(ctx, stored)
	}
	if len(b.GPUs) > 0 || len(b.Events) > 0 {
		if err := s.updateHealth(ctx, node, b, now); err != nil {
			return Result{}, err
		}
	}
	if b.Dropped > 0 {
		s.o.Log.Warn("agent dropped readings while Gantry was away", "node", node, "dropped", b.Dropped)
	}
	res.Accepted = len(stored)
	return res, nil
}

// checkReading names what is wrong with one reading.
func checkReading(errs *fault.List, p string, r Reading, oldest, latest time.Time) {
	switch {
	case r.Time.IsZero():
		errs.Addf(p+".t", "the time is required")
	case r.Time.Before(oldest):
		errs.Addf(p+".t", "%s is too old: readings since %s are taken (the raw retention, from a whole hour)", r.Time.UTC().Format(time.RFC3339), oldest.UTC().Format(time.RFC3339))
	case r.Time.After(latest):
		errs.Addf(p+".t", "%s is in the future", r.Time.UTC().Format(time.RFC3339))
	}
	if r.Device.GPU == "" {
		errs.Addf(p+".device.gpu", "the GPU's UUID is required")
	}
	if r.Device.MIG != nil && r.Device.MIG.UUID == "" {
		errs.Addf(p+".device.mig.uuid", "a MIG instance's UUID is required")
	}
	if r.Share < 0 || r.Share > 1 || math.IsNaN(r.Share) {
		errs.Addf(p+".share", "%v is not a share between 0 and 1", r.Share)
	}
	if (r.Pod.Name == "") != (r.Pod.Namespace == "") {
		errs.Addf(p+".pod", "a pod needs both its namespace and its name")
	}
	for m := Metric(0); m < NumMetrics; m++ {
		v := r.Values[m]
		if math.IsNaN(v) {
			continue
		}
		if info := m.Info(); math.IsInf(v, 0) || v < info.Min || v > info.Max {
			errs.Addf(p+".values."+info.Name, "%v is outside %v..%v %s", v, info.Min, info.Max, info.Unit)
		}
	}
}

// podTTL is how long a pod's place is remembered: a pod does not move, and
// a workload's pods keep their label.
const podTTL = 10 * time.Minute

// maxPods bounds the cache of pod places.
const maxPods = 50000

// locate finds a pod's place, cached: found pods for podTTL, missing ones
// for a minute (they may be about to appear in the API server's view).
func (s *Service) locate(ctx context.Context, namespace, name string, fresh bool) (PodPlace, error) {
	if s.o.Pods == nil {
		return PodPlace{}, nil
	}
	key := namespace + "/" + name
	now := s.o.Now()
	s.mu.Lock()
	e, ok := s.pods[key]
	s.mu.Unlock()
	if ok && now.Before(e.expires) && !fresh {
		return e.place, nil
	}
	place, err := s.o.Pods.LocatePod(ctx, namespace, name)
	if err != nil {
		return PodPlace{}, err
	}
	if place.Workload != "" && s.o.WorkloadNamespace != nil {
		ns, err := s.o.WorkloadNamespace(ctx, place.Workload)
		var nf *fault.NotFound
		switch {
		case errors.As(err, &nf):
			place.Workload = ""
		case err != nil:
			return PodPlace{}, err
		case ns != namespace:
			s.o.Log.Warn("a pod names a workload of another namespace; not attributed", "pod", namespace+"/"+name, "workload_id", place.Workload)
			place.Workload = ""
		}
	}
	ttl := podTTL
	if !place.Found {
		ttl = time.Minute
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, had := s.pods[key]; !had {
		s.order = append(s.order, key)
		for len(s.order) > maxPods {
			delete(s.pods, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.pods[key] = podEntry{place: place, expires: now.Add(ttl)}
	return place, nil
}

// checkInventory refuses readings of devices the node's inventory (this
// batch's GPUs, or the ones it reported before) does not list, so that an
// agent cannot multiply series with invented devices. A node that never
// reported its GPUs is taken at its word.
func (s *Service) checkInventory(ctx context.Context, node string, b Batch, errs *fault.List) error {
	known := map[string]bool{}
	add := func(g GPUState) {
		known[g.GPU] = true
		for _, m := range g.MIG {
			known[m.UUID] = true
		}
	}
	for _, g := range b.GPUs {
		add(g)
	}
	missing := false
	for _, r := range b.Readings {
		if !known[r.Device.ID()] {
			missing = true
			break
		}
	}
	if !missing {
		return nil
	}
	recs, err := s.o.Store.NodeGPUs(ctx, node)
	if err != nil {
		return fmt.Errorf("GPUs of node %s: %w", node, err)
	}
	for _, r := range recs {
		add(r.State)
	}
	if len(known) == 0 {
		return nil
	}
	for i, r := range b.Readings {
		if !known[r.Device.ID()] {
			errs.Addf(fmt.Sprintf("readings[%d].device", i), "%s is not one of node %s's GPUs or MIG instances (its inventory)", r.Device.ID(), node)
			if errs.Len() >= maxProblems {
				break
			}
		}
	}
	return nil
}
