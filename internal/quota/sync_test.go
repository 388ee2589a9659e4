package quota

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"

	"github.com/gantryhq/gantry/internal/team"
)

type policy map[string]Quota

func (p policy) Quotas() map[string]Quota { return maps.Clone(p) }
func (p policy) Quota(team.Name) Quota    { return Quota{GPUs: map[string]float64{"H100-80GB": 1}} }

// kueue records what a Syncer applies.
type kueue struct {
	teams     []string
	applied   [][]Object
	failApply error
}

func (k *kueue) Teams(context.Context) ([]string, error) { return k.teams, nil }
func (k *kueue) SyncQuotas(_ context.Context, objs []Object) error {
	if k.failApply != nil {
		return k.failApply
	}
	k.applied = append(k.applied, objs)
	return nil
}
func (k *kueue) ActivateCheck(context.Context) error { return nil }

type holds struct {
	held map[string]bool
	err  error
}

func (h holds) Held(_ context.Context, t team.Name) (string, bool, error) {
	return "spent", h.held[t.String()], h.err
}

// queues are the ClusterQueues of objs: team queue name → stopPolicy ("" if none).
func queues(objs []Object) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		if o["kind"] != "ClusterQueue" {
			continue
		}
		name := o["metadata"].(map[string]any)["name"].(string)
		stop, _ := o["spec"].(map[string]any)["stopPolicy"].(string)
		out[name] = stop
	}
	return out
}

func TestSyncer(t *testing.T) {
	ctx := context.Background()
	pol := policy{"ml": {GPUs: map[string]float64{"H100-80GB": 8}}}
	k := &kueue{teams: []string{"vision"}}
	h := holds{held: map[string]bool{}}
	s, err := NewSyncer(SyncerOptions{Policy: func() Policy { return pol }, Classes: classes(t), Kueue: k, Holds: &h,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: 3})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(wantApplied bool) {
		t.Helper()
		applied, err := s.Run(ctx)
		if err != nil || applied != wantApplied {
			t.Fatalf("Run: applied %v, %v; want applied %v", applied, err, wantApplied)
		}
	}
	pass(true) // the first pass applies
	q := queues(k.applied[0])
	if !slices.Equal(slices.Sorted(maps.Keys(q)), []string{ClusterQueue("ml"), ClusterQueue("vision")}) {
		t.Fatalf("queues %v: want the policy's team and the team on the cluster", q)
	}
	pass(false) // unchanged
	pass(false)
	pass(true) // every third pass again
	h.held["ml"] = true
	pass(true) // a hold changes the objects
	if got := queues(k.applied[len(k.applied)-1])[ClusterQueue("ml")]; got != "Hold" {
		t.Fatalf("held team's queue: stopPolicy %q, want Hold", got)
	}
	// A budget that cannot be read applies nothing (a hold is not released
	// by accident).
	h.held["ml"] = false
	h.err = errors.New("database away")
	n := len(k.applied)
	if applied, err := s.Run(ctx); err == nil || applied || len(k.applied) != n {
		t.Fatalf("budget unread: applied %v, %v", applied, err)
	}
	// An apply that fails is tried again on the next pass.
	h.err = nil
	k.failApply = errors.New("conflict")
	if _, err := s.Run(ctx); err == nil {
		t.Fatal("a failed apply is an error")
	}
	k.failApply = nil
	pass(true)
	if got := queues(k.applied[len(k.applied)-1])[ClusterQueue("ml")]; got != "None" {
		t.Fatalf("released team's queue: stopPolicy %q, want None (said, so that a hold patched on is taken off)", got)
	}
	if _, err := NewSyncer(SyncerOptions{}); err == nil {
		t.Fatal("NewSyncer without its parts")
	}
}
