package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/store/stores"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/trial"
	"github.com/gantryhq/gantry/internal/workload"
)

// testTrials: a trial and its runs as stored, the workloads that are its
// runs found by their trial and keeping their caps, and the teams' lists.
func testTrials(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var ids []string
	for i, tm := range []team.Name{"vision", "nlp", "vision"} {
		tr := trial.Trial{ID: fmt.Sprintf("trial%05d", i), Team: tm, Owner: "alice", CreatedAt: at.Add(time.Duration(i) * time.Minute),
			Spec: trial.Spec{Template: "pytorch-train", Params: map[string]any{"epochs": float64(3)}, Classes: []string{"H100-80GB", "A100-80GB"},
				GPUs: []int{1, 2}, Steps: 200, MaxRuntime: 20 * time.Minute, MaxCost: 5, FullSteps: 10000, Deadline: 8 * time.Hour},
			Runs: []trial.Run{{Class: "H100-80GB", GPUs: 1}, {Class: "A100-80GB", GPUs: 1}}}
		if err := s.CreateTrial(ctx, tr); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tr.ID)
	}
	runs := []trial.Run{{Class: "H100-80GB", GPUs: 1, Workload: "trialrun01"}, {Class: "A100-80GB", GPUs: 1, Error: "refused: the budget is spent"}}
	if err := s.UpdateTrialRuns(ctx, ids[0], runs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Trial(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	want := trial.Trial{ID: ids[0], Team: "vision", Owner: "alice", CreatedAt: at, Runs: runs,
		Spec: trial.Spec{Template: "pytorch-train", Params: map[string]any{"epochs": float64(3)}, Classes: []string{"H100-80GB", "A100-80GB"},
			GPUs: []int{1, 2}, Steps: 200, MaxRuntime: 20 * time.Minute, MaxCost: 5, FullSteps: 10000, Deadline: 8 * time.Hour}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stored trial:\n got %+v\nwant %+v", got, want)
	}
	var nf *fault.NotFound
	if _, err := s.Trial(ctx, "nosuchtrial"); !errors.As(err, &nf) {
		t.Fatalf("a missing trial: %v", err)
	}
	if err := s.UpdateTrialRuns(ctx, "nosuchtrial", runs); !errors.As(err, &nf) {
		t.Fatalf("updating a missing trial: %v", err)
	}
	for _, tc := range []struct {
		teams []team.Name
		want  []string
	}{
		{nil, []string{ids[2], ids[1], ids[0]}},
		{[]team.Name{"vision"}, []string{ids[2], ids[0]}},
		{[]team.Name{"nlp"}, []string{ids[1]}},
		{[]team.Name{}, nil},
	} {
		ts, err := s.ListTrials(ctx, tc.teams, 10)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tr := range ts {
			names = append(names, tr.ID)
		}
		if !reflect.DeepEqual(names, tc.want) {
			t.Fatalf("trials of %v: %v, want %v", tc.teams, names, tc.want)
		}
	}

	// A key is its owner's: the same owner's second use is a conflict,
	// another person's is theirs.
	keyed := trial.Trial{ID: "trialkey01", Team: "vision", Owner: "alice", CreatedAt: at, Spec: want.Spec, IdempotencyKey: "k1", RequestHash: "h1"}
	if err := s.CreateTrial(ctx, keyed); err != nil {
		t.Fatal(err)
	}
	var conflict *fault.Conflict
	dup := keyed
	dup.ID = "trialkey02"
	if err := s.CreateTrial(ctx, dup); !errors.As(err, &conflict) {
		t.Fatalf("the same owner's key again: %v", err)
	}
	dup.Owner = "bob"
	if err := s.CreateTrial(ctx, dup); err != nil {
		t.Fatalf("another person's key: %v", err)
	}
	if got, err := s.TrialByKey(ctx, "alice", "k1"); err != nil || got.ID != "trialkey01" || got.RequestHash != "h1" {
		t.Fatalf("alice's trial of k1: %+v %v", got, err)
	}
	if _, err := s.TrialByKey(ctx, "carol", "k1"); !errors.As(err, &nf) {
		t.Fatalf("carol's trial of k1: %v", err)
	}

	// A trial's run keeps its caps; a list by trial finds only its runs.
	caps := &workload.Trial{ID: ids[0], Steps: 200, MaxRuntime: 20 * time.Minute, MaxCost: 5}
	for i, c := range []*workload.Trial{caps, nil} {
		w := workload.Workload{ID: fmt.Sprintf("trialrun%02d", i+1), Name: "x", Team: "vision", Owner: "alice", Template: "pytorch-train", TemplateVersion: 1,
			Kind: "job", GPUClass: "H100-80GB", GPUCount: 1, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Pending,
			CreatedAt: at, UpdatedAt: at, Trial: c}
		if err := s.CreateWorkload(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	w, err := s.Workload(ctx, "trialrun01")
	if err != nil || !reflect.DeepEqual(w.Trial, caps) {
		t.Fatalf("a trial's run: %+v, %v", w.Trial, err)
	}
	if w, err := s.Workload(ctx, "trialrun02"); err != nil || w.Trial != nil {
		t.Fatalf("a launch outside trials: %+v, %v", w.Trial, err)
	}
	ws, err := s.ListWorkloads(ctx, workload.Filter{Trial: ids[0], Limit: 10})
	if err != nil || len(ws) != 1 || ws[0].ID != "trialrun01" {
		t.Fatalf("the trial's runs: %v, %v", ws, err)
	}
}
