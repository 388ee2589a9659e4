package api_test

import (
	"math"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/stores"
)

// TestWorkloadPageShowsRelated: a workload's page shows its run's progress
// and its moves once there are some — written here straight to the
// database, as another replica would — and neither before.
func TestWorkloadPageShowsRelated(t *testing.T) {
	e := newEnv(t, alice)
	ctx := t.Context()
	launched := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "pytorch-train", Team: "vision"}))(t)
	if launched.StatusCode() != 201 {
		t.Fatalf("launch: %d %s", launched.StatusCode(), launched.Body)
	}
	id := servertest.Deref(launched.JSON201).Id
	get := func() model.Workload {
		t.Helper()
		r := servertest.Must(e.api.GetWorkloadWithResponse(ctx, id))(t)
		if r.StatusCode() != 200 {
			t.Fatalf("get: %d %s", r.StatusCode(), r.Body)
		}
		return servertest.Deref(r.JSON200)
	}
	if w := get(); w.Progress != nil || w.Moves != nil {
		t.Fatalf("before any: progress %+v, moves %+v", w.Progress, w.Moves)
	}

	db, err := store.Open(ctx, store.SQLite, e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := stores.New(db)
	at := time.Now().UTC().Truncate(time.Second)
	r := []runs.Report{{Time: at, Step: 120, TotalSteps: 300, Epoch: math.NaN(), ResumedFrom: -1}}
	if _, err := s.AppendReports(ctx, []runs.Append{{Workload: id, Reports: r, Update: func(old runs.Summary) runs.Summary { return runs.Apply(old, r) }}}); err != nil {
		t.Fatal(err)
	}
	msg, err := notify.New(quarantine.EventMoved, "moved", nil, at)
	if err != nil {
		t.Fatal(err)
	}
	mv := quarantine.Move{Workload: id, Node: "h100-3", MarkAt: at, GPU: "GPU-2", Index: 2, Reason: "critical XID 79", Kind: "job",
		Phase: quarantine.Requeueing, Detail: "requeued through Kueue", At: at, UpdatedAt: at, ResumedFrom: -1}
	if ok, err := s.RecordMove(ctx, mv, msg); err != nil || !ok {
		t.Fatalf("record the move: %v %v", ok, err)
	}
	w := get()
	if p := servertest.Deref(w.Progress); !p.Reported || servertest.Deref(p.Step) != 120 || servertest.Deref(p.TotalSteps) != 300 {
		t.Errorf("progress %+v, want step 120 of 300", w.Progress)
	}
	if ms := servertest.Deref(w.Moves); len(ms) != 1 || ms[0].Node != "h100-3" || ms[0].Phase != model.WorkloadMovePhase(quarantine.Requeueing) {
		t.Errorf("moves %+v, want the one off h100-3", ms)
	}
}
