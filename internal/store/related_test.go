package store_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/store/stores"
	"github.com/gantryhq/gantry/internal/workload"
)

// testRelated: a workload read by id says whether its run has reported
// progress and whether it was moved, each only once it has (a run's
// summary without a report is no progress); another workload's records
// are not its.
func testRelated(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	for _, id := range []string{"rel0000001", "rel0000002"} {
		w := workload.Workload{ID: id, Name: "x-" + id, Team: "vision", Owner: "alice", Template: "pytorch-train", TemplateVersion: 1,
			Kind: "job", GPUClass: "L4", GPUCount: 1, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Running,
			RunningSince: at, CreatedAt: at, UpdatedAt: at}
		if err := s.CreateWorkload(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	related := func(id string, want workload.Related) {
		t.Helper()
		w, err := s.Workload(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if w.Related == nil || *w.Related != want {
			t.Fatalf("%s: related %+v, want %+v", id, w.Related, want)
		}
	}
	related("rel0000001", workload.Related{})
	// A summary written without a report (a keeper, say) is no progress.
	if _, err := appendOne(ctx, s, "rel0000001", nil, func(old runs.Summary) runs.Summary { old.KeptBy = "alice"; return old }); err != nil {
		t.Fatal(err)
	}
	related("rel0000001", workload.Related{})
	r := []runs.Report{{Time: at, Step: 10, Epoch: math.NaN(), ResumedFrom: -1}}
	if _, err := appendOne(ctx, s, "rel0000001", r, func(old runs.Summary) runs.Summary { return runs.Apply(old, r) }); err != nil {
		t.Fatal(err)
	}
	related("rel0000001", workload.Related{Progress: true})
	msg, err := notify.New(quarantine.EventMoved, "moved", nil, at)
	if err != nil {
		t.Fatal(err)
	}
	mv := quarantine.Move{Workload: "rel0000001", Node: "h100-3", MarkAt: at, GPU: "GPU-2", Index: 2, Reason: "critical XID 79", Kind: "job",
		Phase: quarantine.Requeueing, Detail: "requeued through Kueue", At: at, UpdatedAt: at, ResumedFrom: -1}
	if ok, err := s.RecordMove(ctx, mv, msg); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	related("rel0000001", workload.Related{Progress: true, Moves: true})
	related("rel0000002", workload.Related{})
}
