package workload_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/template"
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

// TestLaunchThatCouldNeverStart: more GPUs than any node of the class has
// (or, CPU-only, more cores than any CPU node has) is refused at once,
// naming the field and the most one node has; what fits is launched.
func TestLaunchThatCouldNeverStart(t *testing.T) {
	h := newHarness(t)
	h.cluster.Most = 4
	_, _, err := h.svc.Create(asAlice(), "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 8}})
	var inv *fault.Invalid
	if !errors.As(err, &inv) || inv.Fields[0].Path != "gpu.count" || !strings.Contains(inv.Fields[0].Message, "the most on one node is 4") {
		t.Fatalf("8 GPUs where a node has 4: %v", err)
	}
	if _, _, err := h.svc.Create(asAlice(), "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 4}}); err != nil {
		t.Fatalf("4 GPUs where a node has 4: %v", err)
	}
	// A MIG profile none of the class's nodes offers: refused, naming it.
	h.cluster.Most = -1
	_, _, err = h.svc.Create(asAlice(), "alice", workload.Request{Template: "batch-inference", Team: "vision",
		Choice: template.Choice{Class: "H100-80GB", MIGProfile: "3g.40gb", Params: map[string]any{"input": "p.jsonl"}}})
	if !errors.As(err, &inv) || inv.Fields[0].Path != "gpu.migProfile" || !strings.Contains(inv.Fields[0].Message, "no node of H100-80GB (1 in all) offers MIG profile 3g.40gb") {
		t.Fatalf("a MIG profile no node offers: %v", err)
	}
	// CPU-only: more cores than any CPU node has is refused; with no CPU
	// node at all it is launched (one may join: it waits).
	twoCores := workload.Request{Template: "cpu-job", Team: "vision", Choice: template.Choice{CPUOnly: true, Params: map[string]any{"cpu": "2"}}}
	h.cluster.CPUCores = 1
	_, _, err = h.svc.Create(asAlice(), "alice", twoCores)
	if !errors.As(err, &inv) || inv.Fields[0].Path != "cpuOnly" || !strings.Contains(inv.Fields[0].Message, "no CPU node has 2 cores: it could never start here (the most on one is 1)") {
		t.Fatalf("2 cores where a CPU node has 1: %v", err)
	}
	h.cluster.CPUCores = -1
	if _, _, err := h.svc.Create(asAlice(), "alice", twoCores); err != nil {
		t.Fatalf("2 cores with no CPU node yet: %v", err)
	}
}
