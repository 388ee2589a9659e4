package quarantine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/replay"
	gstore "github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/telemetrydb"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// TestNoFalseQuarantineOnAHealthyDay replays 24 hours of the GenAI trace
// on an 8-GPU node through the real telemetry service (SQLite), a batch a
// minute, with what healthy GPUs also report — corrected ECC errors that
// climb, rows remapped after correctable errors, XIDs applications cause
// (13, 31, 43, 45, 68, 109) — and runs the quarantine pass after each: no
// node is ever marked. Then one critical XID marks it at the next pass.
func TestNoFalseQuarantineOnAHealthyDay(t *testing.T) {
	ctx := context.Background()
	tr, err := replay.GenAI()
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for p := range tr.Series {
		if time.Duration(tr.Span(p))*time.Second >= replay.TraceDefaultSpan {
			pods = append(pods, p)
		}
	}
	sort.Strings(pods)
	if len(pods) < 8 {
		t.Fatalf("%d long pods in the trace", len(pods))
	}
	var gpus []replay.GPU
	for i := range 8 {
		gpus = append(gpus, replay.GPU{UUID: fmt.Sprintf("GPU-day-%d", i), Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559})
	}
	node := replay.NewNode(gpus)
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i, g := range gpus {
		if err := node.Play(g.UUID, replay.TraceProfile(tr, pods[i*len(pods)/8]), start, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := gstore.Open(ctx, gstore.SQLite, filepath.Join(t.TempDir(), "gantry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := start
	clock := func() time.Time { return now }
	tel, err := telemetry.New(telemetry.Options{Store: telemetrydb.New(st), Now: clock, XIDHold: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster()
	q, err := quarantine.New(quarantine.Options{Cluster: c, Health: tel, Workloads: workloads{}, Store: &store{}, Audit: &auditLog{}, Move: true,
		Namespace: func(t team.Name) string { return "team-" + t.String() }, Now: clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 29))
	appXIDs := []uint64{13, 31, 43, 45, 68, 109}
	benign := 0
	push := func() {
		t.Helper()
		inv, _ := node.Inventory(ctx)
		samples, _ := node.Sample(ctx, now)
		b := telemetry.Batch{Node: "day-0", Agent: "replay", GPUs: inv, Events: node.Events()}
		for _, s := range samples {
			b.Readings = append(b.Readings, telemetry.Reading{Time: now, Device: s.Device, Share: 1, Attribution: "exclusive", Values: s.Values})
		}
		if _, err := tel.Ingest(ctx, "day-0", b); err != nil {
			t.Fatalf("ingest at %s: %v", now, err)
		}
		if _, err := q.Pass(ctx); err != nil {
			t.Fatalf("pass at %s: %v", now, err)
		}
	}
	for ; now.Before(start.Add(24 * time.Hour)); now = now.Add(time.Minute) {
		g := gpus[rng.IntN(len(gpus))].UUID
		switch r := rng.Float64(); {
		case r < 0.02: // about one an hour on the node
			node.Inject(replay.Fault{GPU: g, XID: appXIDs[rng.IntN(len(appXIDs))], At: now})
			benign++
		case r < 0.10:
			node.Inject(replay.Fault{GPU: g, SingleBitECC: uint64(1 + rng.IntN(3)), At: now})
			benign++
		case r < 0.101:
			node.Inject(replay.Fault{GPU: g, RemapCorrectable: 1, At: now})
			benign++
		}
		push()
		if marks, _ := c.Marks(ctx); len(marks) > 0 {
			t.Fatalf("falsely quarantined at %s: %+v", now, marks)
		}
	}
	if benign < 100 {
		t.Fatalf("only %d benign events in the day", benign)
	}
	t.Logf("a day of %d batches with %d benign events: no node marked", 24*60, benign)
	node.Inject(replay.Fault{GPU: gpus[5].UUID, XID: 79, At: now})
	push()
	marks, _ := c.Marks(ctx)
	if len(marks) != 1 || marks[0].Node != "day-0" || marks[0].Index != 5 {
		t.Fatalf("a critical XID after the day: marks %+v", marks)
	}
}
