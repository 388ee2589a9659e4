package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/tlsfiles/tlstest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// gpus is a fixed set of devices with fixed values (the NVML and replay
// implementations have tests of their own).
type gpus struct {
	mu      sync.Mutex
	samples []DeviceSample
	inv     []telemetry.GPUState
	events  []telemetry.Event
}

func (g *gpus) Inventory(context.Context) ([]telemetry.GPUState, error) {
	return g.inv, nil
}
func (g *gpus) Sample(context.Context, time.Time) ([]DeviceSample, error) {
	return g.samples, nil
}
func (g *gpus) Events() []telemetry.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.events
	g.events = nil
	return e
}

type pods []PodDevices

func (p pods) List(context.Context) ([]PodDevices, error) { return p, nil }

type procs map[uint32]string

func (p procs) PodUID(pid uint32) (string, bool) { u, ok := p[pid]; return u, ok }

func values(util, sm, fb float64) telemetry.Values {
	v := telemetry.NoValues()
	v[telemetry.GPUUtil], v[telemetry.SMActive], v[telemetry.FBUsed], v[telemetry.Temperature] = util, sm, fb, 50
	return v
}

var (
	whole = telemetry.Device{GPU: "GPU-aaaa", Index: 0, Model: "NVIDIA H100 80GB HBM3"}
	mig   = telemetry.Device{GPU: "GPU-bbbb", Index: 1, Model: "NVIDIA H100 80GB HBM3", MIG: &telemetry.MIGInstance{UUID: "MIG-cccc", Profile: "1g.10gb", InstanceID: 9}}
	pa    = telemetry.PodRef{Namespace: "gantry-vision", Name: "train-abcde", Container: "main"}
	pb    = telemetry.PodRef{Namespace: "gantry-nlp", Name: "serve-0", Container: "main"}
)

func TestAttribute(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sample  DeviceSample
		pods    []PodDevices
		procs   procs
		want    []telemetry.PodRef
		shares  []float64
		how     string
		fbUsed  []float64
		smValue []float64
	}{
		{name: "a whole GPU held by one pod", sample: DeviceSample{Device: whole, Values: values(80, 0.7, 1000)},
			pods: []PodDevices{{Pod: pa, Resources: map[string][]string{"nvidia.com/gpu": {"GPU-aaaa"}}}},
			want: []telemetry.PodRef{pa}, shares: []float64{1}, how: Exclusive, fbUsed: []float64{1000}, smValue: []float64{0.7}},
		{name: "a MIG instance by its resource", sample: DeviceSample{Device: mig, Values: values(80, 0.7, 1000)},
			pods: []PodDevices{{Pod: pa, Resources: map[string][]string{"nvidia.com/gpu": {"GPU-aaaa"}}}, {Pod: pb, Resources: map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-cccc"}}}},
			want: []telemetry.PodRef{pb}, shares: []float64{1}, how: Exclusive, fbUsed: []float64{1000}, smValue: []float64{0.7}},
		{name: "not held", sample: DeviceSample{Device: whole, Values: values(0, 0, 0)},
			pods: []PodDevices{{Pod: pb, Resources: map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-cccc"}, "example.com/other": {"GPU-aaaa"}}}},
			want: []telemetry.PodRef{{}}, shares: []float64{1}, how: "", fbUsed: []float64{0}, smValue: []float64{0}},
		{name: "time-sliced, split by processes", sample: DeviceSample{Device: whole, Values: values(100, 0.8, 3000),
			Processes: []ProcessUse{{PID: 10, SMUtil: 60, MemMiB: 2000}, {PID: 11, SMUtil: 20, MemMiB: 1000}, {PID: 12, SMUtil: 50}}},
			pods:  []PodDevices{{Pod: pa, UID: "uid-a", Resources: map[string][]string{"nvidia.com/gpu": {"GPU-aaaa::0"}}}, {Pod: pb, UID: "uid-b", Resources: map[string][]string{"nvidia.com/gpu": {"GPU-aaaa::1"}}}},
			procs: procs{10: "uid-a", 11: "uid-b"}, // 12 is no pod's
			want:  []telemetry.PodRef{pa, pb}, shares: []float64{0.75, 0.25}, how: ByProcess, fbUsed: []float64{2000, 1000}, smValue: []float64{0.6, 0.2}},
		{name: "time-sliced under the renamed resource", sample: DeviceSample{Device: whole, Values: values(100, 0.8, 3000)},
			pods: []PodDevices{{Pod: pa, Resources: map[string][]string{"nvidia.com/gpu.shared": {"GPU-aaaa::0"}}}, {Pod: pb, Resources: map[string][]string{"nvidia.com/gpu.shared": {"GPU-aaaa::3"}}}},
			want: []telemetry.PodRef{pa, pb}, shares: []float64{0.5, 0.5}, how: Even, fbUsed: []float64{1500, 1500}, smValue: []float64{0.4, 0.4}},
		{name: "time-sliced, no per-process data: even, and said so", sample: DeviceSample{Device: whole, Values: values(100, 0.8, 3000)},
			pods: []PodDevices{{Pod: pa, UID: "uid-a", Resources: map[string][]string{"nvidia.com/gpu": {"GPU-aaaa::0"}}}, {Pod: pb, UID: "uid-b", Resources: map[string][]string{"nvidia.com/gpu": {"GPU-aaaa::1"}}}},
			want: []telemetry.PodRef{pa, pb}, shares: []float64{0.5, 0.5}, how: Even, fbUsed: []float64{1500, 1500}, smValue: []float64{0.4, 0.4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Attribute([]DeviceSample{tc.sample}, tc.pods, tc.procs)
			if len(got) != len(tc.want) {
				t.Fatalf("%d readings, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, r := range got {
				if r.Pod != tc.want[i] || math.Abs(r.Share-tc.shares[i]) > 1e-9 || r.Attribution != tc.how ||
					math.Abs(r.Values[telemetry.FBUsed]-tc.fbUsed[i]) > 1e-9 || math.Abs(r.Values[telemetry.SMActive]-tc.smValue[i]) > 1e-9 {
					t.Errorf("reading %d: pod %v share %v %q fb %v sm %v; want %v %v %q %v %v", i, r.Pod, r.Share, r.Attribution,
						r.Values[telemetry.FBUsed], r.Values[telemetry.SMActive], tc.want[i], tc.shares[i], tc.how, tc.fbUsed[i], tc.smValue[i])
				}
				if r.Values[telemetry.Temperature] != 50 || !math.IsNaN(r.Values[telemetry.TensorActive]) {
					t.Errorf("the device's own readings must not be split, nor NaN made a number: %v", r.Values)
				}
			}
		})
	}
}

func TestCgroupPods(t *testing.T) {
	dir := t.TempDir()
	for pid, content := range map[int]string{
		1: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-abc.scope\n",
		2: "12:memory:/kubepods/besteffort/pod0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9/0123abcd\n",
		3: "0::/user.slice/session-1.scope\n",
	} {
		os.MkdirAll(filepath.Join(dir, fmt.Sprint(pid)), 0o755)
		os.WriteFile(filepath.Join(dir, fmt.Sprint(pid), "cgroup"), []byte(content), 0o644)
	}
	c := CgroupPods{Proc: dir}
	for pid, want := range map[uint32]string{1: "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", 2: "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", 3: "", 4: ""} {
		if got, ok := c.PodUID(pid); got != want || ok != (want != "") {
			t.Errorf("pid %d: %q %v, want %q", pid, got, ok, want)
		}
	}
}

// sink records batches; while failing it refuses them.
type sink struct {
	mu      sync.Mutex
	batches []telemetry.Batch
	failing bool
	err     error
}

func (s *sink) Push(_ context.Context, b telemetry.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		if s.err != nil {
			return s.err
		}
		return errors.New("gantry away")
	}
	s.batches = append(s.batches, b)
	return nil
}

func (s *sink) readings() (n int, dropped uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.batches {
		n += len(b.Readings)
		dropped += b.Dropped
	}
	return n, dropped
}

// TestBufferDropsOldestWhileGantryIsAway: sampling goes on while the sink
// fails; the buffer keeps the newest readings, counts what it dropped, and
// delivers the rest with the count once the sink is back.
func TestBufferDropsOldestWhileGantryIsAway(t *testing.T) {
	g := &gpus{samples: []DeviceSample{{Device: whole, Values: values(1, 0.1, 1)}, {Device: mig, Values: values(2, 0.2, 2)}}}
	s := &sink{failing: true}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	a, err := New(Options{Node: "n1", GPUs: g, Sink: s, Buffer: 5, Clock: clk, Interval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	for pass := 1; pass <= 6; pass++ { // 12 readings into a buffer of 5
		waitfor.Until(t, 10*time.Second, fmt.Sprintf("pass %d", pass), func() error {
			if n := a.passes(); n < pass {
				return fmt.Errorf("%d passes", n)
			}
			return nil
		})
		clk.Step(10 * time.Second)
	}
	if n := a.Buffered(); n != 5 {
		t.Fatalf("buffered %d, want the newest 5", n)
	}
	s.mu.Lock()
	s.failing = false
	s.mu.Unlock()
	waitfor.Until(t, 10*time.Second, "the buffer delivered", func() error {
		clk.Step(time.Minute) // past any backoff
		n, dropped := s.readings()
		if n < 5 || dropped < 7 {
			return fmt.Errorf("%d readings, %d dropped", n, dropped)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Stepping the clock to end the backoff also ran passes: every reading
	// produced was either delivered or counted as dropped, none twice.
	waitfor.Until(t, 10*time.Second, "the last readings delivered", func() error {
		a.mu.Lock()
		produced := int(a.buf.first) + a.buf.size
		a.mu.Unlock()
		n, dropped := s.readings()
		if n+int(dropped)+a.Buffered() != produced {
			return fmt.Errorf("%d delivered + %d dropped + %d buffered != %d produced", n, dropped, a.Buffered(), produced)
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.batches[0]; b.Node != "n1" || len(b.Readings) != 5 || b.Dropped < 7 || !b.Readings[0].Time.Before(b.Readings[4].Time) {
		t.Fatalf("first batch after the outage: node %q, %d readings, %d dropped", b.Node, len(b.Readings), b.Dropped)
	}
}

// passes counts sampling passes (the push buffer's numbering counts readings).
func (a *Agent) passes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.buf.first+uint64(a.buf.size)) / max(1, len(a.last))
}

func TestRefusedBatchIsDroppedNotRetried(t *testing.T) {
	g := &gpus{samples: []DeviceSample{{Device: whole, Values: values(1, 0.1, 1)}}}
	s := &sink{failing: true, err: &PermanentError{errors.New("422")}}
	a, _ := New(Options{Node: "n1", GPUs: g, Sink: s, Clock: clocktesting.NewFakeClock(time.Now())})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Run(ctx)
	waitfor.Until(t, 10*time.Second, "the refused batch dropped", func() error {
		if p, n := a.passes(), a.Buffered(); p < 1 || n != 0 {
			return fmt.Errorf("%d passes, %d buffered", p, n)
		}
		return nil
	})
	// Gantry takes the next batch: it carries the refused reading's count.
	s.mu.Lock()
	s.failing = false
	s.mu.Unlock()
	if err := a.SampleOnce(ctx); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the next batch", func() error {
		if n, dropped := s.readings(); n != 1 || dropped != 1 {
			return fmt.Errorf("%d readings, %d dropped", n, dropped)
		}
		return nil
	})
}

func TestMetrics(t *testing.T) {
	v := values(80, 0.7, 1000)
	g := &gpus{samples: []DeviceSample{{Device: whole, Values: v}, {Device: mig, Values: values(5, 0.05, 10)}},
		inv:    []telemetry.GPUState{{Device: whole, ECC: telemetry.ECC{VolatileDBE: 2}}, {Device: telemetry.Device{GPU: "GPU-bbbb", Index: 1}, Unsupported: []string{"nvlink"}}},
		events: []telemetry.Event{{GPU: "GPU-aaaa", XID: 79}}}
	a, _ := New(Options{Node: "gpu-node-1", GPUs: g, Pods: pods{{Pod: pa, Resources: map[string][]string{"nvidia.com/gpu": {"GPU-aaaa"}}}}})
	if err := a.SampleOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("not Prometheus text: %v\n%s", err, body)
	}
	find := func(name string, labels map[string]string) (float64, bool) {
		f := families[name]
		if f == nil {
			return 0, false
		}
	next:
		for _, m := range f.Metric {
			have := map[string]string{}
			for _, l := range m.Label {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return m.GetGauge().GetValue(), true
		}
		return 0, false
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"DCGM_FI_PROF_SM_ACTIVE", map[string]string{"gpu": "0", "UUID": "GPU-aaaa", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-node-1", "pod": "train-abcde", "namespace": "gantry-vision", "container": "main", "GPU_I_PROFILE": "", "GPU_I_ID": ""}, 0.7},
		{"DCGM_FI_DEV_GPU_UTIL", map[string]string{"UUID": "GPU-bbbb", "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "9", "pod": ""}, 5},
		{"DCGM_FI_DEV_FB_USED", map[string]string{"UUID": "GPU-aaaa"}, 1000},
		{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", map[string]string{"UUID": "GPU-aaaa"}, 2},
		{"DCGM_FI_DEV_XID_ERRORS", map[string]string{"UUID": "GPU-aaaa"}, 79},
		{"gantry_agent_unsupported", map[string]string{"UUID": "GPU-bbbb", "what": "nvlink"}, 1},
	} {
		if got, ok := find(tc.name, tc.labels); !ok || got != tc.want {
			t.Errorf("%s%v = %v (found %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	if _, ok := families["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]; ok {
		t.Error("a metric not measured must be absent, not zero")
	}
	// Prometheus's own checker, where installed (Debian's prometheus
	// package). Exit status 3 is lint only: the one complaint allowed is
	// dcgm-exporter's camelCase labels (modelName, Hostname), which
	// dashboards depend on.
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(string(body))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 3) {
			t.Fatalf("promtool check metrics: %v\n%s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.HasSuffix(line, "label names should be written in 'snake_case' not 'camelCase'") {
				t.Errorf("promtool check metrics: %s", line)
			}
		}
	}
}

func TestHTTPSink(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("first\n"), 0o600)
	var mu sync.Mutex
	var seen []string
	status := 202
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var b telemetry.Batch
		if r.URL.Path != "/api/v1/telemetry" || json.NewDecoder(r.Body).Decode(&b) != nil || b.Node != "n1" {
			w.WriteHeader(400)
			return
		}
		seen = append(seen, r.Header.Get("Authorization"))
		w.WriteHeader(status)
	}))
	defer srv.Close()
	s := &HTTPSink{URL: srv.URL + "/", TokenFile: tokenFile}
	ctx := context.Background()
	b := telemetry.Batch{Node: "n1", Readings: []telemetry.Reading{{Time: time.Now(), Device: whole, Values: values(1, 0.1, 1)}}}
	if err := s.Push(ctx, b); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(tokenFile, []byte("rotated"), 0o600) // the kubelet rotates it
	if err := s.Push(ctx, b); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(seen) != 2 || seen[0] != "Bearer first" || seen[1] != "Bearer rotated" {
		t.Fatalf("tokens sent: %q", seen)
	}
	mu.Unlock()
	for _, tc := range []struct {
		status    int
		permanent bool
	}{
		{422, true}, {400, true}, {404, true}, {413, true}, // the batch or the URL is wrong: drop
		{429, false}, {401, false}, {403, false}, // slow down; a token being rotated
		{503, false}, {500, false},
	} {
		mu.Lock()
		status = tc.status
		mu.Unlock()
		var perm *PermanentError
		err := s.Push(ctx, b)
		if err == nil || errors.As(err, &perm) != tc.permanent {
			t.Errorf("status %d: %v, want permanent %v", tc.status, err, tc.permanent)
		}
	}
	srv.Close()
	var perm *PermanentError
	if err := s.Push(ctx, b); err == nil || errors.As(err, &perm) {
		t.Fatalf("an unreachable Gantry: %v, want a retryable error", err)
	}
}

// TestHTTPSinkOverTLS: the agent pushes to an HTTPS Gantry whose
// certificate chains to the CA it was given, and refuses one that does not
// (no batch is delivered to an impostor).
func TestHTTPSinkOverTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, dir, 1, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusAccepted)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("sa-token"), 0o600)
	s, err := NewHTTPSink(srv.URL, tokenFile, ca.WriteCA(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Push(context.Background(), telemetry.Batch{Node: "n1"}); err != nil {
		t.Fatalf("push over TLS: %v", err)
	}
	if auth := <-got; auth != "Bearer sa-token" {
		t.Fatalf("the token sent: %q", auth)
	}
	impostor := tlstest.NewCA(t)
	s, err = NewHTTPSink(srv.URL, tokenFile, impostor.WriteCA(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Push(context.Background(), telemetry.Batch{Node: "n1"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("push to a server outside the CA: %v", err)
	}
	select {
	case <-got:
		t.Fatal("a batch reached a server whose certificate the agent does not trust")
	default:
	}
	if _, err := NewHTTPSink("ftp://gantry", tokenFile, ""); err == nil {
		t.Fatal("an ftp:// URL was accepted")
	}
}

// passingSink takes every batch and starts a pass as it returns, so passes
// land right where the push loop takes the outcome.
type passingSink struct {
	sink
	a    *Agent
	ctx  context.Context
	wg   sync.WaitGroup
	left int
}

func (p *passingSink) Push(ctx context.Context, b telemetry.Batch) error {
	_ = p.sink.Push(ctx, b)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.left > 0 {
		p.left--
		p.wg.Add(1)
		go func() { defer p.wg.Done(); _ = p.a.SampleOnce(p.ctx) }()
	}
	return nil
}

// TestAccountingUnderConcurrentPasses: passes that overflow a small buffer
// as batches are taken never count a reading twice — neither delivered and
// dropped, nor dropped twice.
func TestAccountingUnderConcurrentPasses(t *testing.T) {
	g := &gpus{samples: []DeviceSample{{Device: whole, Values: values(1, 0.1, 1)}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &passingSink{ctx: ctx, left: 2000}
	a, err := New(Options{Node: "n1", GPUs: g, Sink: s, Buffer: 1, Clock: clocktesting.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	s.a = a
	done := make(chan struct{})
	go func() { a.pushLoop(ctx); close(done) }()
	if err := a.SampleOnce(ctx); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 30*time.Second, "the passes done and the buffer drained", func() error {
		s.mu.Lock()
		left := s.left
		s.mu.Unlock()
		if n := a.Buffered(); n != 0 || left > 0 {
			select {
			case a.wake <- struct{}{}:
			default:
			}
			return fmt.Errorf("%d buffered, %d passes to go", n, left)
		}
		return nil
	})
	s.wg.Wait()
	cancel()
	<-done
	a.mu.Lock()
	produced, pending := int(a.buf.first)+a.buf.size, a.dropped
	a.mu.Unlock()
	n, dropped := s.readings()
	if n+int(dropped+pending)+a.Buffered() != produced {
		t.Fatalf("%d delivered + %d dropped (%d not yet told) + %d buffered != %d produced", n, dropped+pending, pending, a.Buffered(), produced)
	}
}
