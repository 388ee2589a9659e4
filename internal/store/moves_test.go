package store_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/store/stores"
)

// testMoves: a move is recorded once per workload, node and mark, with its
// webhook in the same transaction; an update changes it (and queues its
// message) but never its key; open moves are those still under way.
func testMoves(t *testing.T, s *stores.All) {
	ctx := context.Background()
	at := time.Date(2026, 12, 3, 10, 42, 0, 0, time.UTC)
	mv := quarantine.Move{Workload: "w1", Node: "h100-3", MarkAt: at, GPU: "GPU-2", Index: 2, Reason: "critical XID 79", Kind: "job",
		Phase: quarantine.Requeueing, Detail: "requeued through Kueue", At: at, UpdatedAt: at, ResumedFrom: -1}
	msg := func(id string) notify.Message {
		m, err := notify.New(quarantine.EventMoved, "moved "+id, nil, at)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	due := func() int {
		ms, err := s.DueNotifications(ctx, at.Add(time.Hour), 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(ms)
	}
	if ok, err := s.RecordMove(ctx, mv, msg("1")); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	again := mv
	again.Detail = "another decision"
	if ok, err := s.RecordMove(ctx, again, msg("2")); err != nil || ok {
		t.Fatalf("recorded twice: %v %v", ok, err)
	}
	if n := due(); n != 1 {
		t.Fatalf("%d webhooks queued, want 1", n)
	}
	other := mv
	other.Workload, other.Kind, other.Phase = "w2", "notebook", quarantine.Kept
	other.At = at.Add(time.Second)
	if ok, err := s.RecordMove(ctx, other, msg("3")); err != nil || !ok {
		t.Fatal(ok, err)
	}
	got, err := s.Moves(ctx, "w1")
	if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], mv) {
		t.Fatalf("moves of w1:\n got %+v (%v)\nwant %+v", got, err, mv)
	}
	open, err := s.OpenMoves(ctx, 10)
	if err != nil || len(open) != 1 || open[0].Workload != "w1" {
		t.Fatalf("open: %+v %v", open, err)
	}
	resumed := at.Add(3 * time.Minute)
	m4 := msg("4")
	err = s.UpdateMove(ctx, "w1", at, "h100-3", func(old quarantine.Move) (quarantine.Move, *notify.Message, error) {
		old.Phase, old.ResumedAt, old.ResumedOn, old.ResumedFrom, old.UpdatedAt = quarantine.Resumed, resumed, "h100-7", 1200, resumed
		old.Workload = "not-the-key"
		return old, &m4, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = s.Moves(ctx, "w1")
	want := mv
	want.Phase, want.ResumedAt, want.ResumedOn, want.ResumedFrom, want.UpdatedAt = quarantine.Resumed, resumed, "h100-7", 1200, resumed
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("updated:\n got %+v\nwant %+v", got, want)
	}
	if n := due(); n != 3 {
		t.Fatalf("%d webhooks queued, want 3", n)
	}
	if open, _ := s.OpenMoves(ctx, 10); len(open) != 0 {
		t.Fatalf("open after resuming: %+v", open)
	}
	boom := errors.New("refused")
	if err := s.UpdateMove(ctx, "w1", at, "h100-3", func(old quarantine.Move) (quarantine.Move, *notify.Message, error) {
		old.Phase = quarantine.Ended
		return old, nil, boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if got, _ := s.Moves(ctx, "w1"); got[0].Phase != quarantine.Resumed {
		t.Fatalf("a refused update was written: %+v", got[0])
	}
	var nf *fault.NotFound
	if err := s.UpdateMove(ctx, "w1", at.Add(time.Second), "h100-3", func(old quarantine.Move) (quarantine.Move, *notify.Message, error) { return old, nil, nil }); !errors.As(err, &nf) {
		t.Fatalf("a move of another mark: %v", err)
	}
}
