package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/kube/watch"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

// source is an in-memory Source: tests set observations and fire changes.
type source struct {
	mu      sync.Mutex
	obs     map[string]watch.Observation
	changed func(string)
	stopped bool
}

func (s *source) OnChange(f func(string)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changed = f
	return nil
}

func (s *source) fire(id string) {
	s.mu.Lock()
	f := s.changed
	s.mu.Unlock()
	f(id)
}

func (s *source) watching() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed != nil
}
func (s *source) Run(context.Context) bool { return true }
func (s *source) Shutdown()                { s.mu.Lock(); s.stopped = true; s.mu.Unlock() }
func (s *source) Observe(id string) (watch.Observation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.obs[id]
	return o, ok
}

func (s *source) set(id, phase string) {
	s.mu.Lock()
	s.obs[id] = watch.Observation{WorkloadID: id, Phase: workload.Status(phase)}
	s.mu.Unlock()
	s.fire(id)
}

// recorder fails the first fail[id] reports of each id (or failures, for
// ids not in fail) with err, then records; it counts calls.
type recorder struct {
	mu       sync.Mutex
	failures int
	fail     map[string]int
	err      error
	calls    map[string]int
	got      map[string]workload.Status
	evicted  map[string][]string
	exits    map[string]int
	failAt   int                        // Evicted fails the workload once it has seen this many pods (0: never)
	keep     map[string]workload.Status // the status the record keeps whatever is reported
	during   func(id string)            // called while a report is recorded (another writer's change)
}

func (r *recorder) Observe(ctx context.Context, id string, o workload.Observed) (workload.Workload, error) {
	r.mu.Lock()
	during := r.during
	r.mu.Unlock()
	if during != nil {
		during(id)
	}
	if o.ExitCode != nil {
		return r.reportExit(ctx, id, o.Status, o.Reason, *o.ExitCode)
	}
	return r.report(ctx, id, o.Status, o.Reason)
}

func (r *recorder) report(_ context.Context, id string, st workload.Status, _ string) (workload.Workload, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[id]++
	limit, ok := r.fail[id]
	if !ok {
		limit = r.failures
	}
	if r.calls[id] <= limit {
		return workload.Workload{}, r.err
	}
	r.got[id] = st
	if held, ok := r.keep[id]; ok {
		return workload.Workload{ID: id, Status: held}, nil // the record keeps its own status
	}
	return workload.Workload{ID: id, Status: st}, nil
}

// ReportExit implements Recorder: Report, keeping the exit code.
func (r *recorder) reportExit(ctx context.Context, id string, st workload.Status, reason string, code int) (workload.Workload, error) {
	w, err := r.report(ctx, id, st, reason)
	if err == nil {
		r.mu.Lock()
		if r.exits == nil {
			r.exits = map[string]int{}
		}
		r.exits[id] = code
		r.mu.Unlock()
	}
	return w, err
}

// Evicted implements Recorder: it keeps what it was told.
func (r *recorder) Evicted(_ context.Context, id string, pods []string) (workload.Workload, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted == nil {
		r.evicted = map[string][]string{}
	}
	r.evicted[id] = pods
	if r.failAt > 0 && len(pods) >= r.failAt {
		r.got[id] = workload.Failed
		return workload.Workload{ID: id, Status: workload.Failed}, nil
	}
	return workload.Workload{ID: id, Status: r.got[id]}, nil
}

func (r *recorder) state(id string) (workload.Status, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id], r.calls[id]
}

func run(t *testing.T, rec *recorder) (*source, func()) {
	t.Helper()
	return runWith(t, rec, Options{Workers: 2, MaxRetries: 3, BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond})
}

func runWith(t *testing.T, rec *recorder, o Options) (*source, func()) {
	t.Helper()
	src, _, stop := runCtl(t, rec, o)
	return src, stop
}

func runCtl(t *testing.T, rec *recorder, o Options) (*source, *Controller, func()) {
	t.Helper()
	src := &source{obs: map[string]watch.Observation{}}
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := New(src, rec, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitfor.Until(t, 10*time.Second, "the controller to watch", func() error {
		if !src.watching() {
			return errors.New("no handler yet")
		}
		return nil
	})
	return src, c, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		src.mu.Lock()
		defer src.mu.Unlock()
		if !src.stopped {
			t.Error("the watch was not shut down")
		}
	}
}

// TestRetriesFailedWrites: a status write that fails is retried with backoff
// until it lands.
func TestRetriesFailedWrites(t *testing.T) {
	rec := &recorder{failures: 2, err: errors.New("database is locked"), calls: map[string]int{}, got: map[string]workload.Status{}}
	src, stop := run(t, rec)
	defer stop()
	src.set("w1", "Running")
	waitfor.Until(t, 10*time.Second, "the report to land", func() error {
		if st, n := rec.state("w1"); st != workload.Running {
			return fmt.Errorf("%d calls, status %q", n, st)
		}
		return nil
	})
	if _, n := rec.state("w1"); n != 3 {
		t.Fatalf("%d calls, want 2 failures and 1 success", n)
	}
}

// TestGivesUpAfterMaxRetries: a write that keeps failing is dropped after
// MaxRetries (until the object changes again), not retried for ever.
func TestGivesUpAfterMaxRetries(t *testing.T) {
	rec := &recorder{failures: 1000, err: errors.New("disk full"), calls: map[string]int{}, got: map[string]workload.Status{}}
	src, stop := run(t, rec)
	defer stop()
	src.set("w1", "Running")
	waitfor.Until(t, 10*time.Second, "retries to run out", func() error {
		if _, n := rec.state("w1"); n < 4 {
			return fmt.Errorf("%d calls", n)
		}
		return nil
	})
	// Another object's report still goes through: the queue is not stuck.
	rec.mu.Lock()
	rec.fail = map[string]int{"w3": 0}
	rec.mu.Unlock()
	src.set("w3", "Pending")
	waitfor.Until(t, 10*time.Second, "w3 after w2's retries", func() error {
		if st, _ := rec.state("w3"); st == "" {
			return errors.New("w3 not recorded")
		}
		return nil
	})
	if _, n := rec.state("w1"); n != 4 {
		t.Fatalf("w1: %d calls, want 1 + MaxRetries 3", n)
	}
}

// TestRefusedReportsAreNotRetried: a report the lifecycle refuses (a
// conflict) or about no workload is dropped at once.
func TestRefusedReportsAreNotRetried(t *testing.T) {
	for _, err := range []error{
		&fault.Conflict{Kind: "workload", Name: "w1", Reason: "is Stopped"},
		&fault.NotFound{Kind: "workload", Name: "w1"},
	} {
		rec := &recorder{failures: 1000, err: err, calls: map[string]int{}, got: map[string]workload.Status{}}
		src, stop := run(t, rec)
		src.set("w1", "Running")
		src.set("w2", "Running") // processed after w1 by the same queue
		waitfor.Until(t, 10*time.Second, "w2 to be tried", func() error {
			if _, n := rec.state("w2"); n == 0 {
				return errors.New("not yet")
			}
			return nil
		})
		stop()
		if _, n := rec.state("w1"); n != 1 {
			t.Fatalf("%T: %d calls, want 1 (no retry)", err, n)
		}
	}
}

// TestNothingToSay: an object with nothing to report (no pods yet) writes
// nothing.
func TestNothingToSay(t *testing.T) {
	rec := &recorder{calls: map[string]int{}, got: map[string]workload.Status{}}
	src, stop := run(t, rec)
	src.fire("w1") // no observation for w1
	src.set("w2", "Running")
	waitfor.Until(t, 10*time.Second, "w2", func() error {
		if st, _ := rec.state("w2"); st != workload.Running {
			return errors.New("not yet")
		}
		return nil
	})
	stop()
	if _, n := rec.state("w1"); n != 0 {
		t.Fatalf("w1 reported %d times with nothing to say", n)
	}
}

// TestExitCode: an ended workload's exit code reaches the recorder; a live
// one's report carries none.
func TestExitCode(t *testing.T) {
	rec := &recorder{calls: map[string]int{}, got: map[string]workload.Status{}}
	src, stop := run(t, rec)
	defer stop()
	code := 3
	for id, o := range map[string]watch.Observation{
		"w1": {WorkloadID: "w1", Phase: "Failed", ExitCode: &code},
		"w2": {WorkloadID: "w2", Phase: "Running"},
	} {
		src.mu.Lock()
		src.obs[id] = o
		src.mu.Unlock()
		src.fire(id)
	}
	waitfor.Until(t, 10*time.Second, "both reports", func() error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.got["w1"] != workload.Failed || rec.got["w2"] != workload.Running {
			return fmt.Errorf("got %v", rec.got)
		}
		return nil
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got, ok := rec.exits["w1"]; !ok || got != 3 {
		t.Errorf("w1's exit code: %d (reported: %v), want 3", got, ok)
	}
	if _, ok := rec.exits["w2"]; ok {
		t.Errorf("a Running workload reported an exit code")
	}
}

// TestEvictions: a Job's disrupted pods reach the recorder with the phase;
// an observation of evictions alone reports no phase; once the evictions
// fail the workload, the phase is not reported over it.
func TestEvictions(t *testing.T) {
	rec := &recorder{calls: map[string]int{}, got: map[string]workload.Status{}, failAt: 2}
	src, stop := run(t, rec)
	defer stop()
	put := func(id string, o watch.Observation) {
		src.mu.Lock()
		src.obs[id] = o
		src.mu.Unlock()
		src.fire(id)
	}
	put("w1", watch.Observation{WorkloadID: "w1", Phase: "Running", Evicted: []string{"uid-1"}})
	waitfor.Until(t, 10*time.Second, "w1's eviction and phase", func() error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.evicted["w1"]) != 1 || rec.got["w1"] != workload.Running {
			return fmt.Errorf("evicted %v, status %q", rec.evicted["w1"], rec.got["w1"])
		}
		return nil
	})
	put("w2", watch.Observation{WorkloadID: "w2", Evicted: []string{"uid-2"}})
	put("w3", watch.Observation{WorkloadID: "w3", Phase: "Pending", Evicted: []string{"uid-3", "uid-4"}})
	waitfor.Until(t, 10*time.Second, "w2's and w3's evictions", func() error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.evicted["w2"]) != 1 || len(rec.evicted["w3"]) != 2 {
			return fmt.Errorf("evicted %v", rec.evicted)
		}
		return nil
	})
	if _, n := rec.state("w2"); n != 0 {
		t.Errorf("w2 had no phase to report, reported %d times", n)
	}
	if st, n := rec.state("w3"); st != workload.Failed || n != 0 {
		t.Errorf("w3, failed by its evictions: %s after %d reports", st, n)
	}
}

// TestRepeatedObservations: an observation the record agreed with is not
// recorded again within Repeat; after it, or once the cluster says
// something else, it is; one the record did not take (it kept a status of
// its own) is recorded every time.
func TestRepeatedObservations(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	rec := &recorder{calls: map[string]int{}, got: map[string]workload.Status{}, keep: map[string]workload.Status{"held": workload.PendingApproval}}
	// One worker: ids are processed in the order they change, so once
	// "mark" is recorded, everything fired before it has been processed.
	src, ctl, stop := runCtl(t, rec, Options{Workers: 1, Clock: clk, Repeat: 2 * time.Second})
	defer stop()
	marks := 0
	settle := func() {
		t.Helper()
		marks++
		src.set("mark", fmt.Sprintf("Running-%d", marks)) // a new observation each time: always recorded
		waitfor.Until(t, 10*time.Second, "the queue to drain", func() error {
			if st, _ := rec.state("mark"); st != workload.Status(fmt.Sprintf("Running-%d", marks)) {
				return fmt.Errorf("mark at %q", st)
			}
			return nil
		})
	}
	calls := func(id string) int { _, n := rec.state(id); return n }

	src.set("w1", "Running")
	src.set("held", "Queued")
	settle()
	if calls("w1") != 1 || calls("held") != 1 {
		t.Fatalf("first reports: w1 %d, held %d calls, want 1 each", calls("w1"), calls("held"))
	}
	for range 3 {
		src.fire("w1")
		src.fire("held")
		settle()
	}
	if calls("w1") != 1 {
		t.Errorf("w1: %d calls, want 1: the same observation within Repeat is not recorded again", calls("w1"))
	}
	if calls("held") != 4 {
		t.Errorf("held: %d calls, want 4: a record that did not take the observation hears it every time", calls("held"))
	}
	clk.Step(2 * time.Second)
	src.fire("w1")
	settle()
	if calls("w1") != 2 {
		t.Errorf("w1 after Repeat: %d calls, want 2", calls("w1"))
	}
	// Its record changed elsewhere (the change feed calls Forget): the next
	// observation is recorded, the same or not.
	ctl.Forget("w1")
	src.fire("w1")
	settle()
	if calls("w1") != 3 {
		t.Errorf("w1 after Forget: %d calls, want 3", calls("w1"))
	}
	// A report that fails is forgotten too: the same observation is
	// recorded at the next change, not skipped.
	n := calls("w1")
	rec.mu.Lock()
	rec.fail = map[string]int{"w1": n + 1}
	rec.err = &fault.Conflict{Kind: "workload", Name: "w1", Reason: "is Stopped"}
	rec.mu.Unlock()
	src.mu.Lock()
	src.obs["w1"] = watch.Observation{WorkloadID: "w1", Phase: "Queued"}
	src.mu.Unlock()
	src.fire("w1")
	settle()
	src.fire("w1")
	settle()
	if calls("w1") != 5 {
		t.Errorf("w1 after a refused report: %d calls, want 5 (the refused one, then the same again)", calls("w1"))
	}
	// The record changed elsewhere while a report was being recorded (the
	// change feed's Forget lands in between): what the report found is not
	// remembered, and the same observation is recorded again.
	rec.mu.Lock()
	rec.during = func(id string) {
		if id == "w2" {
			ctl.Forget(id)
		}
	}
	rec.mu.Unlock()
	src.set("w2", "Running")
	settle()
	rec.mu.Lock()
	rec.during = nil
	rec.mu.Unlock()
	src.fire("w2")
	settle()
	if calls("w2") != 2 {
		t.Errorf("w2, forgotten while reported: %d calls, want 2", calls("w2"))
	}
	src.mu.Lock()
	src.obs["w1"] = watch.Observation{WorkloadID: "w1", Phase: "Running", Reason: "ready"}
	src.mu.Unlock()
	src.fire("w1")
	settle()
	if calls("w1") != 6 {
		t.Errorf("w1 with a new reason: %d calls, want 6", calls("w1"))
	}
	// Evictions are always told.
	src.mu.Lock()
	src.obs["w1"] = watch.Observation{WorkloadID: "w1", Phase: "Running", Reason: "ready", Evicted: []string{"uid-1"}}
	src.mu.Unlock()
	src.fire("w1")
	settle()
	rec.mu.Lock()
	evicted := rec.evicted["w1"]
	rec.mu.Unlock()
	if len(evicted) != 1 {
		t.Errorf("w1's eviction not told: %v", evicted)
	}
}

func TestSame(t *testing.T) {
	one, two := 1, 2
	at := time.Unix(1_700_000_000, 0)
	base := workload.Observed{Status: workload.Running, Reason: "r", NodeGroups: []string{"a"}, Cluster: "c", GPUHourPrice: 1, At: at, ExitCode: &one}
	for name, change := range map[string]func(*workload.Observed){
		"status":     func(o *workload.Observed) { o.Status = workload.Queued },
		"reason":     func(o *workload.Observed) { o.Reason = "s" },
		"node group": func(o *workload.Observed) { o.NodeGroups = []string{"b"} },
		"groups":     func(o *workload.Observed) { o.NodeGroups = nil },
		"cluster":    func(o *workload.Observed) { o.Cluster = "d" },
		"price":      func(o *workload.Observed) { o.GPUHourPrice = 2 },
		"hour price": func(o *workload.Observed) { o.HourPrice = 2 },
		"at":         func(o *workload.Observed) { o.At = at.Add(time.Second) },
		"exit code":  func(o *workload.Observed) { o.ExitCode = &two },
		"no code":    func(o *workload.Observed) { o.ExitCode = nil },
	} {
		o := base
		change(&o)
		if same(base, o) || same(o, base) {
			t.Errorf("%s changed, yet the same", name)
		}
	}
	again := base
	again.NodeGroups = []string{"a"}
	code := 1
	again.ExitCode = &code
	if !same(base, again) {
		t.Error("equal observations differ")
	}
}
