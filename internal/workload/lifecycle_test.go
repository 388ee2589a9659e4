package workload

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// TestTransitionTable walks every status × every trigger and checks the
// outcome against the lifecycle's rules, written out here a second time in
// words rather than copied from the table.
func TestTransitionTable(t *testing.T) {
	liveStatuses := []Status{Pending, Queued, Scheduled, Running}
	reports := map[Trigger]Status{
		ReportedPending: Pending, ReportedQueued: Queued, ReportedScheduled: Scheduled,
		ReportedRunning: Running, ReportedSucceeded: Succeeded, ReportedFailed: Failed,
	}
	want := func(from Status, tr Trigger) (Status, bool) {
		switch {
		case from == Deleted:
			return "", false // nothing leaves Deleted
		case tr == Delete:
			return Deleted, true // everything else may be deleted
		case slices.Contains(liveStatuses, from):
			if st, ok := reports[tr]; ok {
				return st, true // the cluster's reports move a live workload either way
			}
			switch tr {
			case Stop, Expire:
				return Stopped, true
			case IdleStop:
				return IdleStopped, true
			case Refused, SpotGone:
				return Failed, true
			case Admit:
				return Pending, true
			}
			return "", false // approve, deny, start: not for a live workload
		case from == PendingApproval:
			switch tr {
			case Approve:
				return Pending, true
			case Deny, Refused:
				return Failed, true
			}
			return "", false // not on the cluster yet: no reports; no stop (start would skip the approval)
		case from == Stopped || from == IdleStopped:
			if tr == Start {
				return Pending, true
			}
			return "", false // late reports cannot revive a stopped workload
		case from == Succeeded || from == Failed:
			return "", false // ended: only Delete, handled above
		}
		t.Fatalf("status %s has no rule", from)
		return "", false
	}
	for _, from := range Statuses {
		if _, ok := transitions[from]; !ok {
			t.Errorf("status %s has no row in the table", from)
		}
		for _, tr := range Triggers {
			t.Run(fmt.Sprintf("%s/%s", from, tr), func(t *testing.T) {
				wantTo, wantOK := want(from, tr)
				to, ok := Next(from, tr)
				if ok != wantOK || (ok && to != wantTo) {
					t.Fatalf("Next(%s, %s) = %s, %v; want %s, %v", from, tr, to, ok, wantTo, wantOK)
				}
				w := Workload{ID: "w1", Status: from, Reason: "before"}
				at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
				out, changed, err := Transition(w, tr, "after", at)
				if !wantOK {
					var c *fault.Conflict
					if !errors.As(err, &c) || out.Status != from || out.Reason != "before" || changed {
						t.Fatalf("refused transition: got %+v changed=%v err=%v; want the workload untouched and a *fault.Conflict", out, changed, err)
					}
					return
				}
				if err != nil || !changed || out.Status != wantTo || out.Reason != "after" || !out.UpdatedAt.Equal(at) {
					t.Fatalf("got %+v changed=%v err=%v; want %s with the new reason at %v", out, changed, err, wantTo, at)
				}
			})
		}
	}
}

// TestTransitionUnchanged: the same report twice writes nothing the second
// time; a new reason for the same status is a change.
func TestTransitionUnchanged(t *testing.T) {
	w := Workload{ID: "w1", Status: Running}
	if _, changed, err := Transition(w, ReportedRunning, "", time.Now()); err != nil || changed {
		t.Fatalf("same status and reason: changed=%v err=%v, want no change", changed, err)
	}
	if out, changed, err := Transition(w, ReportedRunning, "CrashLoopBackOff", time.Now()); err != nil || !changed || out.Reason != "CrashLoopBackOff" {
		t.Fatalf("new reason: %+v changed=%v err=%v", out, changed, err)
	}
}

func TestReportedCoversWhatTheClusterCanSay(t *testing.T) {
	for _, st := range Statuses {
		tr := Reported(st)
		canReport := slices.Contains([]Status{Pending, Queued, Scheduled, Running, Succeeded, Failed}, st)
		if (tr != "") != canReport {
			t.Errorf("Reported(%s) = %q", st, tr)
		}
		if tr != "" && !slices.Contains(Triggers, tr) {
			t.Errorf("Reported(%s) = %q is not in Triggers", st, tr)
		}
	}
}

func TestEnded(t *testing.T) {
	for _, st := range Statuses {
		want := slices.Contains([]Status{Succeeded, Failed, Stopped, IdleStopped, Deleted}, st)
		if st.Ended() != want {
			t.Errorf("%s.Ended() = %v", st, st.Ended())
		}
	}
}
