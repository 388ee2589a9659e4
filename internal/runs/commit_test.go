package runs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/waitfor"
)

// gateStore holds its first AppendReports until released, records the
// batches it is given, and fails any batch holding the workload "bad".
type gateStore struct {
	Store
	gate    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	batches [][]string
	steps   map[string]int64
}

func (g *gateStore) AppendReports(_ context.Context, as []Append) ([]Summary, error) {
	g.once.Do(func() { <-g.gate })
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	for _, a := range as {
		ids = append(ids, a.Workload)
	}
	g.batches = append(g.batches, ids)
	var out []Summary
	for _, a := range as {
		if a.Workload == "bad" {
			return nil, errors.New("refused")
		}
	}
	for _, a := range as {
		s := a.Update(Summary{Workload: a.Workload, Step: g.steps[a.Workload]})
		g.steps[a.Workload] = s.Step
		out = append(out, s)
	}
	return out, nil
}

// TestGroupCommit: requests that arrive while a commit is under way share
// the next transaction, each gets its own summary back, and one that fails
// there fails alone (the batch is tried again one by one).
func TestGroupCommit(t *testing.T) {
	g := &gateStore{gate: make(chan struct{}), steps: map[string]int64{}}
	c := &committer{store: g}
	ctx := context.Background()
	step := func(w string, n int64) Append {
		rs := []Report{{Time: time.Unix(n, 0), Step: n, Epoch: math.NaN(), ResumedFrom: -1}}
		return Append{Workload: w, Reports: rs, Update: func(old Summary) Summary { return Apply(old, rs) }}
	}
	first := make(chan error, 1)
	go func() { _, err := c.append(ctx, step("w0", 1)); first <- err }()
	waitfor.Until(t, 10*time.Second, "the first commit to start", func() error { return c.state(true, 0) })

	type result struct {
		w   string
		sum Summary
		err error
	}
	results := make(chan result, 10)
	ws := []string{"w1", "w2", "bad", "w3", "w4", "w5", "w6", "w7", "w8", "w9"}
	for i, w := range ws {
		go func() { s, err := c.append(ctx, step(w, int64(10+i))); results <- result{w, s, err} }()
	}
	waitfor.Until(t, 10*time.Second, "ten requests to queue", func() error { return c.state(true, 10) })
	close(g.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range ws {
		r := <-results
		switch {
		case r.w == "bad" && r.err == nil:
			t.Error("the refused append succeeded")
		case r.w != "bad" && (r.err != nil || r.sum.Workload != r.w || r.sum.Reports != 1):
			t.Errorf("%s: %+v, %v", r.w, r.sum, r.err)
		}
	}
	// One batch of the first, one of the ten that failed, then the ten
	// one by one.
	if len(g.batches) != 12 || len(g.batches[0]) != 1 || len(g.batches[1]) != 10 {
		t.Fatalf("batches: %v", g.batches)
	}
	if err := c.state(false, 0); err != nil {
		t.Errorf("after the commits: %v", err)
	}
}

// state says how c differs from busy with queued requests waiting.
func (c *committer) state(busy bool, queued int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy != busy || len(c.queue) != queued {
		return fmt.Errorf("busy %v with %d queued", c.busy, len(c.queue))
	}
	return nil
}

// TestGroupCommitUnderLoad: many requests at once, every append committed
// once and answered with its own summary (run under -race).
func TestGroupCommitUnderLoad(t *testing.T) {
	g := &gateStore{gate: make(chan struct{}), steps: map[string]int64{}}
	close(g.gate)
	c := &committer{store: g}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := string(rune('a' + w))
			for n := int64(1); n <= 200; n++ {
				rs := []Report{{Time: time.Unix(n, 0), Step: n, Epoch: math.NaN(), ResumedFrom: -1}}
				s, err := c.append(context.Background(), Append{Workload: id, Reports: rs, Update: func(old Summary) Summary { return Apply(old, rs) }})
				if err != nil || s.Step != n || s.Workload != id {
					t.Errorf("%s step %d: %+v %v", id, n, s, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, b := range g.batches {
		total += len(b)
	}
	if total != 8*200 {
		t.Errorf("%d appends committed, want %d", total, 8*200)
	}
}

// TestInfoCache: a workload's run info is read once per infoTTL, and a
// failed read is not kept.
func TestInfoCache(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	c := newInfoCache(func() time.Time { return now })
	reads, fail := 0, false
	read := func(_ context.Context, id string) (RunInfo, error) {
		reads++
		if fail {
			return RunInfo{}, errors.New("down")
		}
		return RunInfo{Namespace: "ns-" + id}, nil
	}
	ctx := context.Background()
	for _, step := range []struct {
		advance time.Duration
		fail    bool
		reads   int
		err     bool
	}{
		{0, false, 1, false},
		{infoTTL - time.Second, false, 1, false}, // still fresh
		{time.Second, true, 2, true},             // stale: read again, which fails
		{0, false, 3, false},                     // the failure was not kept
		{0, false, 3, false},
	} {
		now = now.Add(step.advance)
		fail = step.fail
		info, err := c.get(ctx, "w1", read)
		if (err != nil) != step.err || reads != step.reads || (err == nil && info.Namespace != "ns-w1") {
			t.Fatalf("after %s: %+v, %v, %d reads; want %d reads, error %v", step.advance, info, err, reads, step.reads, step.err)
		}
	}
}

// TestPageCache: a page's summaries are read once per pageTTL — those
// with none too — and a report here shows at once.
func TestPageCache(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	c := newPageCache(func() time.Time { return now })
	got, missed := c.get([]string{"a", "b"})
	if len(got) != 0 || len(missed) != 2 {
		t.Fatalf("empty cache: %v, missed %v", got, missed)
	}
	c.put(missed, map[string]Summary{"a": {Workload: "a", Step: 5, Reports: 1}})
	now = now.Add(pageTTL - time.Millisecond)
	if got, missed = c.get([]string{"a", "b"}); len(missed) != 0 || len(got) != 1 || got["a"].Step != 5 {
		t.Fatalf("fresh: %v, missed %v; want a at step 5, b known to have none", got, missed)
	}
	c.put([]string{"b"}, map[string]Summary{"b": {Workload: "b", Step: 1, Reports: 1}}) // b reported here
	if got, _ = c.get([]string{"b"}); got["b"].Step != 1 {
		t.Fatalf("after b's report: %v", got)
	}
	// A page's read that began before b's report and ends after it: the
	// report's summary stays.
	c.put([]string{"b"}, nil)
	if got, _ = c.get([]string{"b"}); got["b"].Step != 1 {
		t.Fatalf("an older read overwrote b's report: %v", got)
	}
	// A summary of no reports (a keep before any) is none.
	c.put([]string{"k"}, map[string]Summary{"k": {Workload: "k", KeptBy: "alice"}})
	if got, missed = c.get([]string{"k"}); len(got) != 0 || len(missed) != 0 {
		t.Fatalf("a summary of no reports: %v, missed %v", got, missed)
	}
	now = now.Add(time.Millisecond)
	if _, missed = c.get([]string{"a", "b"}); len(missed) != 1 || missed[0] != "a" {
		t.Fatalf("a is stale, b is not: missed %v", missed)
	}
}

// TestGroupCommitSurvivesAPanic: an append whose update panics fails with
// an error, and the committer takes the next requests as before.
func TestGroupCommitSurvivesAPanic(t *testing.T) {
	g := &gateStore{gate: make(chan struct{}), steps: map[string]int64{}}
	close(g.gate)
	c := &committer{store: g}
	boom := Append{Workload: "w1", Update: func(Summary) Summary { panic("a bug in a rule") }}
	if _, err := c.append(context.Background(), boom); err == nil || !strings.Contains(err.Error(), "a bug in a rule") {
		t.Fatalf("the panicking append: %v", err)
	}
	rs := []Report{{Time: time.Unix(1, 0), Step: 1, Epoch: math.NaN(), ResumedFrom: -1}}
	if s, err := c.append(context.Background(), Append{Workload: "w2", Reports: rs, Update: func(old Summary) Summary { return Apply(old, rs) }}); err != nil || s.Step != 1 {
		t.Fatalf("the next append: %+v %v", s, err)
	}
	if err := c.state(false, 0); err != nil {
		t.Error(err)
	}
}

// TestGroupCommitCallerGivesUp: a request whose caller gives up while it
// waits in the queue leaves it, unanswered by the store; the others are
// committed.
func TestGroupCommitCallerGivesUp(t *testing.T) {
	g := &gateStore{gate: make(chan struct{}), steps: map[string]int64{}}
	c := &committer{store: g}
	step := func(w string) Append {
		rs := []Report{{Time: time.Unix(1, 0), Step: 1, Epoch: math.NaN(), ResumedFrom: -1}}
		return Append{Workload: w, Reports: rs, Update: func(old Summary) Summary { return Apply(old, rs) }}
	}
	first := make(chan error, 1)
	go func() { _, err := c.append(context.Background(), step("w0")); first <- err }()
	waitfor.Until(t, 10*time.Second, "the first commit to start", func() error { return c.state(true, 0) })
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { _, err := c.append(ctx, step("gone")); gaveUp <- err }()
	other := make(chan error, 1)
	go func() { _, err := c.append(context.Background(), step("w1")); other <- err }()
	waitfor.Until(t, 10*time.Second, "two requests to queue", func() error { return c.state(true, 2) })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the request given up: %v", err)
	}
	close(g.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	for _, b := range g.batches {
		if slices.Contains(b, "gone") {
			t.Errorf("the request given up was committed: %v", g.batches)
		}
	}
}
