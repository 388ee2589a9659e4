package workload_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/workload"
)

// touchCounter counts the store's writes of a person's use.
type touchCounter struct {
	workload.Store
	n    atomic.Int64
	fail atomic.Bool // the database is away: writes fail
}

func (c *touchCounter) TouchWorkload(ctx context.Context, id string, at time.Time) error {
	c.n.Add(1)
	if c.fail.Load() {
		return errors.New("database away")
	}
	return c.Store.TouchWorkload(ctx, id, at)
}

// counted is the workload service on a store that counts its writes of
// use, and a notebook launched on it.
func counted(t *testing.T) (*harness, *touchCounter, workload.Workload) {
	t.Helper()
	var counter *touchCounter
	h := newHarnessWith(t, nil, false, func(o *workload.Options) {
		counter = &touchCounter{Store: o.Store}
		o.Store = counter
	})
	return h, counter, h.launch(t, "jupyter-notebook")
}

// TestUsedWritesOncePerWindow: a UI's requests and socket messages come many
// a second; the first of a window claims it and writes, every other one
// returns without a write — many at once included (one write, not a
// transaction each queued on the workload's row) — and the next window
// writes again.
func TestUsedWritesOncePerWindow(t *testing.T) {
	h, counter, w := counted(t)
	ctx := asAlice()
	burst := func() {
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() { h.svc.Used(ctx, w.ID) })
		}
		wg.Wait()
	}
	burst()
	if got := counter.n.Load(); got != 1 {
		t.Fatalf("64 uses at once wrote %d times, want 1", got)
	}
	h.advance(20 * time.Second)
	burst()
	if got := counter.n.Load(); got != 1 {
		t.Fatalf("uses 20 s later wrote again: %d writes, want 1", got)
	}
	h.advance(15 * time.Second) // 35 s after the first
	burst()
	if got := counter.n.Load(); got != 2 {
		t.Fatalf("uses in the next window: %d writes, want 2", got)
	}
	var last time.Time
	if _, err := h.store.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		last = old.LastUsed // read under the row's lock, as a stop reads it
		return old, nil
	}); err != nil || !last.Equal(h.clock()) {
		t.Fatalf("last use %v (%v), want %v", last, err, h.clock())
	}
}

// TestUsedRetriesAFailedWrite: a write of use that failed (a slow or absent
// database) is tried again a few seconds later, not a whole window later —
// a busy kernel's notebook must not look quiet for longer than its idle
// timeout because one write timed out — and not on every message either:
// each failure in a row waits twice as long, and a write that lands goes
// back to one a window.
func TestUsedRetriesAFailedWrite(t *testing.T) {
	h, counter, w := counted(t)
	ctx := asAlice()
	tries := func(after time.Duration, want int64) {
		t.Helper()
		h.advance(after)
		h.svc.Used(ctx, w.ID)
		h.svc.Used(ctx, w.ID) // at once: never a second try
		if got := counter.n.Load(); got != want {
			t.Fatalf("%d writes tried, want %d", got, want)
		}
	}
	tries(0, 1) // the first window, written
	counter.fail.Store(true)
	tries(30*time.Second, 2) // the second: its write fails
	tries(4*time.Second, 2)  // not yet
	tries(2*time.Second, 3)  // 6 s after: tried again, fails again
	tries(6*time.Second, 3)  // 6 s after the second failure: not yet
	tries(5*time.Second, 4)  // 11 s after: tried again
	counter.fail.Store(false)
	tries(21*time.Second, 5) // 21 s after the third: written
	var last time.Time
	if _, err := h.store.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		last = old.LastUsed
		return old, nil
	}); err != nil || !last.Equal(h.clock()) {
		t.Fatalf("last use %v (%v), want %v", last, err, h.clock())
	}
	tries(10*time.Second, 5) // back to a window: not again 10 s later
	tries(21*time.Second, 6) // but 31 s later
}
