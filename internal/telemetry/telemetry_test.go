package telemetry_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/telemetrydb"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/telemetry/sourcetest"
)

// pods is where pods run, as the API server would say (the kube adapter's
// LocatePod is tested against a real one in internal/kube).
type pods map[string]telemetry.PodPlace

func (p pods) LocatePod(_ context.Context, ns, name string) (telemetry.PodPlace, error) {
	return p[ns+"/"+name], nil
}

type healthCalls struct {
	mu    sync.Mutex
	calls []string
}

func (h *healthCalls) GPUUnhealthy(_ context.Context, node string, g telemetry.GPURecord, ps []telemetry.PodRef) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	h.calls = append(h.calls, node+" "+g.State.GPU+" "+g.Reason+" pods="+strings.Join(names, ","))
	return nil
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

func newService(t *testing.T, now time.Time) (*telemetry.Service, *clock, *healthCalls) {
	t.Helper()
	st, err := store.Open(context.Background(), store.SQLite, filepath.Join(t.TempDir(), "gantry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &clock{now: now}
	h := &healthCalls{}
	s, err := telemetry.New(telemetry.Options{Store: telemetrydb.New(st), Now: c.Now, Health: h, Pods: pods{
		"gantry-vision/train-abcde": {Found: true, Node: "n1", Workload: "w1"},
		"gantry-nlp/serve-xyz12":    {Found: true, Node: "n2", Workload: "w2"},
		"kube-system/other":         {Found: true, Node: "n1"},
		"gantry-nlp/forged":         {Found: true, Node: "n1", Workload: "w1"}, // labels claiming vision's workload
	}, WorkloadNamespace: func(_ context.Context, id string) (string, error) {
		return map[string]string{"w1": "gantry-vision", "w2": "gantry-nlp"}[id], nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s, c, h
}

var gpuA = telemetry.Device{GPU: "GPU-a", Index: 0, Model: "NVIDIA H100 80GB HBM3"}

func reading(at time.Time, pod telemetry.PodRef, util, sm float64) telemetry.Reading {
	v := telemetry.NoValues()
	v[telemetry.GPUUtil], v[telemetry.SMActive], v[telemetry.FBUsed] = util, sm, 20000
	return telemetry.Reading{Time: at, Device: gpuA, Pod: pod, Share: 1, Attribution: "exclusive", Values: v}
}

var trainPod = telemetry.PodRef{Namespace: "gantry-vision", Name: "train-abcde", Container: "main"}

func TestIngestRefusesWholeBatches(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s, _, _ := newService(t, now)
	ctx := context.Background()
	good := reading(now.Add(-time.Minute), trainPod, 50, 0.5)
	tooHigh := reading(now.Add(-time.Minute), trainPod, 150, 0.5)
	old := reading(now.Add(-49*time.Hour), trainPod, 1, 0.1)
	foreign := reading(now.Add(-time.Minute), telemetry.PodRef{Namespace: "gantry-nlp", Name: "serve-xyz12"}, 1, 0.1)
	for _, tc := range []struct {
		name  string
		node  string
		batch telemetry.Batch
		want  []string // fields named, or "forbidden"
	}{
		{"another node's batch", "n1", telemetry.Batch{Node: "n2", Readings: []telemetry.Reading{good}}, []string{"forbidden"}},
		{"a value out of range", "n1", telemetry.Batch{Node: "n1", Readings: []telemetry.Reading{good, tooHigh}}, []string{"readings[1].values.gpu_util"}},
		{"older than the raw retention", "n1", telemetry.Batch{Node: "n1", Readings: []telemetry.Reading{old}}, []string{"readings[0].t"}},
		// Its hour started before the retention: its raw samples are partly
		// pruned, so rolling it up again would spoil its rollups.
		{"in an hour partly pruned", "n1", telemetry.Batch{Node: "n1", Readings: []telemetry.Reading{reading(now.Add(-47*time.Hour-30*time.Minute), trainPod, 1, 0.1)}}, []string{"readings[0].t"}},
		{"an event from the future", "n1", telemetry.Batch{Node: "n1", Events: []telemetry.Event{{Time: now.Add(time.Hour), GPU: "GPU-a", XID: 79}}}, []string{"events[0].t"}},
		{"a pod of another node", "n1", telemetry.Batch{Node: "n1", Readings: []telemetry.Reading{good, foreign}}, []string{"readings[1].pod"}},
		{"many bad readings: the first hundred problems", "n1", telemetry.Batch{Node: "n1", Readings: func() []telemetry.Reading {
			rs := make([]telemetry.Reading, 5000)
			for i := range rs {
				rs[i] = tooHigh
			}
			return rs
		}()}, []string{"readings[99].values.gpu_util", "more problems from readings[100] on are not listed"}},
		{"no GPU", "n1", telemetry.Batch{Node: "n1", Readings: []telemetry.Reading{{Time: now, Values: telemetry.NoValues()}}}, []string{"readings[0].device.gpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Ingest(ctx, tc.node, tc.batch)
			var inv *fault.Invalid
			var fb *fault.Forbidden
			switch {
			case tc.want[0] == "forbidden":
				if !errors.As(err, &fb) {
					t.Fatalf("want forbidden, got %v", err)
				}
			case errors.As(err, &inv):
				for _, f := range tc.want {
					if !strings.Contains(err.Error(), f) {
						t.Fatalf("error %q does not name %s", err, f)
					}
				}
			default:
				t.Fatalf("want an invalid batch naming %v, got %v", tc.want, err)
			}
		})
	}
	// Nothing of a refused batch was stored.
	got, err := s.Series(ctx, telemetry.Query{Target: telemetry.Target{ID: "w1"}, From: now.Add(-time.Hour), To: now, Step: time.Minute})
	if err != nil || len(got) != 0 {
		t.Fatalf("series after refused batches: %+v %v", got, err)
	}
	forged := reading(now, telemetry.PodRef{Namespace: "gantry-nlp", Name: "forged"}, 90, 0.9)
	forged.Device.GPU = "GPU-c"
	invented := reading(now, telemetry.PodRef{Namespace: "gantry-vision", Name: "no-such-pod"}, 1, 0.1)
	invented.Device.GPU = "GPU-b"
	inventory := []telemetry.GPUState{{Device: gpuA}, {Device: telemetry.Device{GPU: "GPU-b"}}, {Device: telemetry.Device{GPU: "GPU-c"}}}
	res, err := s.Ingest(ctx, "n1", telemetry.Batch{Node: "n1", GPUs: inventory,
		Readings: []telemetry.Reading{good, reading(now, telemetry.PodRef{Namespace: "kube-system", Name: "other"}, 1, 0.1), invented, forged}})
	if err != nil || res.Accepted != 4 || res.Unattributed != 3 {
		t.Fatalf("a good batch: %+v %v", res, err)
	}
	// A device the node's inventory does not list is refused.
	stray := reading(now, trainPod, 1, 0.1)
	stray.Device.GPU = "GPU-invented"
	if _, err := s.Ingest(ctx, "n1", telemetry.Batch{Node: "n1", Readings: []telemetry.Reading{good, stray}}); err == nil || !strings.Contains(err.Error(), "readings[1].device") {
		t.Fatalf("a device outside the inventory: %v", err)
	}
	// A pod the API server does not know is not recorded under its name.
	n, err := s.Node(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range append(n.InUse, n.Idle...) {
		if l.Series.Key.Pod.Name == "no-such-pod" {
			t.Fatalf("a series under an invented pod name: %+v", l.Series)
		}
	}
}

// TestReplayIngestRollupSeries plays a known series in, then reads it back
// from raw samples (exact) and, once the raw samples have aged out, from the
// rollups (rollup arithmetic).
func TestReplayIngestRollupSeries(t *testing.T) {
	start := time.Date(2026, 11, 30, 10, 0, 3, 0, time.UTC) // not on a step boundary
	s, c, _ := newService(t, start.Add(31*time.Minute))
	ctx := context.Background()
	var b telemetry.Batch
	b.Node = "n1"
	var utils []float64
	for i := 0; i < 180; i++ { // every 10 s for 30 minutes
		u := float64((i * 37) % 101)
		utils = append(utils, u)
		b.Readings = append(b.Readings, reading(start.Add(time.Duration(i)*10*time.Second), trainPod, u, u/100))
	}
	if _, err := s.Ingest(ctx, "n1", b); err != nil {
		t.Fatal(err)
	}
	q := telemetry.Query{Target: telemetry.Target{ID: "w1"}, From: start.Add(-3 * time.Second), To: start.Add(30 * time.Minute), Step: 5 * time.Minute,
		Metrics: []telemetry.Metric{telemetry.GPUUtil}}
	// Expected: each 5-minute step holds 30 samples.
	want := func(k int) (avg, max, p95 float64) {
		xs := append([]float64{}, utils[k*30:(k+1)*30]...)
		sort.Float64s(xs)
		for _, x := range xs {
			avg += x
		}
		return avg / 30, xs[29], telemetry.Quantile(xs, 0.95)
	}
	got, err := s.Series(ctx, q)
	if err != nil || len(got) != 1 || got[0].Metric != telemetry.GPUUtil || got[0].Pod != trainPod || len(got[0].Points) != 6 {
		t.Fatalf("raw series: %+v %v", got, err)
	}
	for k, p := range got[0].Points {
		avg, max, p95 := want(k)
		if p.N != 30 || math.Abs(p.Avg-avg) > 1e-9 || p.Max != max || math.Abs(p.P95-p95) > 1e-9 || !p.T.Equal(q.From.Add(time.Duration(k)*q.Step)) {
			t.Fatalf("raw point %d: %+v, want avg %v max %v p95 %v over 30", k, p, avg, max, p95)
		}
	}

	// Roll up, then let the raw samples age out.
	if n, err := s.RollUp(ctx, 1000); err != nil || n != 30 { // 30 minutes touched; the hour is still open
		t.Fatalf("rolled up %d periods, %v", n, err)
	}
	c.Set(start.Add(49 * time.Hour))
	// The hour, once closed, and the minute after the last sample (marked:
	// the interval from a sample to its series' next is counted where it
	// ends; here there is none, and it rolls up to nothing).
	if n, err := s.RollUp(ctx, 1000); err != nil || n != 2 {
		t.Fatalf("the hour, once closed, and the minute after: %d %v", n, err)
	}
	if n, err := s.Prune(ctx, 50); err != nil || n != 180 {
		t.Fatalf("pruned %d, %v; want the 180 raw samples", n, err)
	}
	q.From = start.Truncate(time.Minute)
	got, err = s.Series(ctx, q)
	if err != nil || len(got) != 1 || len(got[0].Points) != 6 {
		t.Fatalf("series from rollups: %+v %v", got, err)
	}
	for k, p := range got[0].Points {
		avg, max, _ := want(k)
		if p.N != 30 || math.Abs(p.Avg-avg) > 1e-9 || p.Max != max || p.P95 > max || p.P95 < avg-50 {
			t.Fatalf("rollup point %d: %+v, want avg %v max %v", k, p, avg, max)
		}
	}
	// An hour step reads the hour rollup: one point of all 180.
	q.Step = time.Hour
	q.To = q.From.Add(time.Hour)
	got, err = s.Series(ctx, q)
	if err != nil || len(got) != 1 || len(got[0].Points) != 1 || got[0].Points[0].N != 180 {
		t.Fatalf("hourly: %+v %v", got, err)
	}
	// Rollups outlive raw samples, not their own retention.
	c.Set(start.Add(91 * 24 * time.Hour))
	if n, err := s.Prune(ctx, 7); err != nil || n != 32 {
		t.Fatalf("pruned %d rows, %v; want 30 minute and 1 hour rollups and the series they leave without data", n, err)
	}
	if got, err := s.Series(ctx, q); err != nil || len(got) != 0 {
		t.Fatalf("after retention: %+v %v", got, err)
	}
}

func TestHealth(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s, c, h := newService(t, now)
	ctx := context.Background()
	state := func(dbe uint64, remapFailed bool) []telemetry.GPUState {
		return []telemetry.GPUState{
			{Device: gpuA, MemoryMiB: 81559, ECC: telemetry.ECC{VolatileDBE: dbe}, Remap: telemetry.Remap{Failure: remapFailed}},
			{Device: telemetry.Device{GPU: "GPU-b", Index: 1}, MemoryMiB: 81559},
		}
	}
	push := func(gpus []telemetry.GPUState, events ...telemetry.Event) {
		t.Helper()
		b := telemetry.Batch{Node: "n1", Agent: "test", GPUs: gpus, Events: events, Readings: []telemetry.Reading{reading(c.Now(), trainPod, 1, 0.1)}}
		if _, err := s.Ingest(ctx, "n1", b); err != nil {
			t.Fatal(err)
		}
	}
	healthOf := func(gpu string) (bool, string) {
		t.Helper()
		n, err := s.Node(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range n.GPUs {
			if g.State.GPU == gpu {
				return g.Healthy, g.Reason
			}
		}
		t.Fatalf("no GPU %s on n1: %+v", gpu, n.GPUs)
		return false, ""
	}
	push(state(0, false))
	if ok, why := healthOf("GPU-a"); !ok {
		t.Fatalf("a clean GPU is unhealthy: %s", why)
	}
	// An application's XID (13: a kernel's exception) says nothing of the GPU.
	push(state(0, false), telemetry.Event{Time: c.Now(), GPU: "GPU-a", XID: 13})
	if ok, _ := healthOf("GPU-a"); !ok || len(h.calls) != 0 {
		t.Fatalf("XID 13 made the GPU unhealthy: %v", h.calls)
	}
	// XID 79 (fallen off the bus) does, once, with the pods that use it.
	push(state(0, false), telemetry.Event{Time: c.Now(), GPU: "GPU-a", XID: 79})
	push(state(0, false))
	if ok, why := healthOf("GPU-a"); ok || !strings.Contains(why, "XID 79") {
		t.Fatalf("after XID 79: healthy=%v %q", ok, why)
	}
	if ok, _ := healthOf("GPU-b"); !ok {
		t.Fatal("another GPU of the node turned unhealthy too")
	}
	if why, err := s.Unhealthy(ctx, "w1"); err != nil || len(why) != 1 || !strings.Contains(why[0], "node n1 GPU 0: critical XID 79") {
		t.Fatalf("why w1's GPUs are unhealthy: %q %v", why, err)
	}
	if why, err := s.Unhealthy(ctx, "w2"); err != nil || len(why) != 0 {
		t.Fatalf("w2 holds no unhealthy GPU: %q %v", why, err)
	}
	if len(h.calls) != 1 || !strings.Contains(h.calls[0], "n1 GPU-a critical XID 79") || !strings.HasSuffix(h.calls[0], "pods=train-abcde") {
		t.Fatalf("health actions: %q", h.calls)
	}
	// The XID is held, then forgotten.
	c.Set(now.Add(25 * time.Hour))
	push(state(0, false))
	if ok, why := healthOf("GPU-a"); !ok {
		t.Fatalf("a day after the XID: %s", why)
	}
	push(state(1, false))
	if ok, why := healthOf("GPU-a"); ok || !strings.Contains(why, "double-bit") {
		t.Fatalf("a double-bit ECC error: %v %q", ok, why)
	}
	push(state(0, true))
	if ok, why := healthOf("GPU-a"); ok || !strings.Contains(why, "remapping") {
		t.Fatalf("a remapping failure: %v %q", ok, why)
	}
	if len(h.calls) != 2 {
		t.Fatalf("health actions on each turn to unhealthy only: %q", h.calls)
	}
	// A GPU the node stopped reporting a week ago is forgotten.
	c.Set(now.Add(25*time.Hour + 8*24*time.Hour))
	push([]telemetry.GPUState{{Device: gpuA, MemoryMiB: 81559, Remap: telemetry.Remap{Failure: true}}})
	n, err := s.Node(ctx, "n1")
	if err != nil || len(n.GPUs) != 1 || n.GPUs[0].State.GPU != "GPU-a" {
		t.Fatalf("after a week without GPU-b: %+v %v", n.GPUs, err)
	}
	c.Set(now.Add(25 * time.Hour))
	nodes, err := s.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].Healthy || nodes[0].Stale || len(nodes[0].InUse) != 1 || nodes[0].InUse[0].Series.Key.Workload != "w1" {
		t.Fatalf("nodes: %+v %v", nodes, err)
	}
	if _, err := s.Node(ctx, "nowhere"); !errors.As(err, new(*fault.NotFound)) {
		t.Fatalf("an unknown node: %v", err)
	}
}

// TestSourceConformance runs the suite every Source runs on Gantry's own
// store (the Prometheus source runs it in internal/promsource).
func TestSourceConformance(t *testing.T) {
	sourcetest.Run(t, func(t *testing.T, rs []telemetry.Reading) telemetry.Source {
		st, err := store.Open(context.Background(), store.SQLite, filepath.Join(t.TempDir(), "gantry.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		located := pods{}
		for _, r := range rs {
			located[r.Pod.Namespace+"/"+r.Pod.Name] = telemetry.PodPlace{Found: true, Node: "n1", Workload: r.Workload}
		}
		s, err := telemetry.New(telemetry.Options{Store: telemetrydb.New(st), Pods: located, Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Ingest(context.Background(), "n1", telemetry.Batch{Node: "n1", Readings: rs}); err != nil {
			t.Fatal(err)
		}
		return s
	})
}
