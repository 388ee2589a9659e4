package workload_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestIdleStopSeesAKeepAlive: the culler read a workload's last use (never,
// or a moment), then a person used it (a keep-alive, the app opened) before
// the stop: IdleStop re-reads the last use in its own transaction and
// refuses. A stop by schedule (nil) stops whatever the use.
func TestIdleStopSeesAKeepAlive(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	running := func() workload.Workload {
		w, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "jupyter-notebook", Team: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
			old.Status = workload.Running
			return old, nil
		}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	var conflict *fault.Conflict
	// Never used when the culler looked; used since.
	w := running()
	never := time.Time{}
	if err := h.store.TouchWorkload(ctx, w.ID, h.clock()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.IdleStop(ctx, w.ID, "idle", &never); !errors.As(err, &conflict) {
		t.Fatalf("a first use after the culler looked: %v, want a conflict", err)
	}
	// Used at a moment the culler saw; used again since.
	seen := h.clock()
	if err := h.store.TouchWorkload(ctx, w.ID, seen.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.IdleStop(ctx, w.ID, "idle", &seen); !errors.As(err, &conflict) {
		t.Fatalf("a use after the one the culler saw: %v, want a conflict", err)
	}
	// Nothing since: stopped.
	last := seen.Add(time.Minute)
	if got, err := h.svc.IdleStop(ctx, w.ID, "idle", &last); err != nil || got.Status != workload.IdleStopped {
		t.Fatalf("no use since: %v %v, want IdleStopped", got.Status, err)
	}
	// By schedule: stopped in any case.
	w = running()
	if err := h.store.TouchWorkload(ctx, w.ID, h.clock().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, err := h.svc.IdleStop(ctx, w.ID, "off-hours", nil); err != nil || got.Status != workload.IdleStopped {
		t.Fatalf("a schedule's stop: %v %v, want IdleStopped", got.Status, err)
	}
}
