package workload

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
			case Release:
				if from == Queued {
					return Queued, true // a flexible launch held in Gantry goes into its queue
				}
			}
			return "", false // approve, deny, start; release but Queued: not for a live workload
		case from == PendingApproval:
			switch tr {
			case Approve:
				return Pending, true
			case Deny, Refused:
				return Failed, true
			case DenyStart, Withdraw:
				return Stopped, true // a start held for approval, refused or taken back: stopped as it was
			}
			return "", false // not on the cluster yet: no reports; no stop (start would skip the approval)
		case from == Stopped || from == IdleStopped:
			switch tr {
			case Start:
				return Pending, true
			case StartHeld:
				return PendingApproval, true
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
				w.Approval.Restart = tr == Withdraw // a start's alone (TestWithdrawIsAStartsOnly)
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

// TestWithdrawIsAStartsOnly: a start again waiting for approval may be
// taken back (Stopped, as it was); a launch waiting for approval may not —
// stopped, then started, it would run without its approval.
func TestWithdrawIsAStartsOnly(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := Workload{ID: "w1", Status: PendingApproval, Approval: Approval{Why: "over budget", Restart: true}}
	if out, changed, err := Transition(start, Withdraw, "withdrawn", at); err != nil || !changed || out.Status != Stopped {
		t.Fatalf("a start withdrawn: %s %v %v", out.Status, changed, err)
	}
	launch := Workload{ID: "w2", Status: PendingApproval, Approval: Approval{Why: "over the ceiling"}}
	var c *fault.Conflict
	if out, changed, err := Transition(launch, Withdraw, "withdrawn", at); !errors.As(err, &c) || changed || out.Status != PendingApproval {
		t.Fatalf("a launch withdrawn: %s %v %v, want a *fault.Conflict", out.Status, changed, err)
	}
	if _, _, err := Transition(launch, Stop, "stopped", at); err == nil || strings.Contains(err.Error(), "withdraw") || !strings.Contains(err.Error(), "deny") {
		t.Errorf("a launch waiting for approval, stopped: %v (want what can happen to it, withdraw not among it)", err)
	}
	if _, _, err := Transition(start, Expire, "expired", at); err == nil || !strings.Contains(err.Error(), "withdraw") {
		t.Errorf("a start waiting for approval, expired: %v (want what can happen to it, withdraw among it)", err)
	}
	if slices.Contains(launch.Actions(), ActStop) || !slices.Contains(start.Actions(), ActStop) {
		t.Errorf("stop offered: to the launch %v, to the start %v", launch.Actions(), start.Actions())
	}
}

// TestStartWaitingKeepsItsEnd: a stopped workload's start held for
// approval has not started: it keeps when it ended (and its exit code)
// while it waits, and keeps them when the start is refused, withdrawn or
// the workload deleted; approved, it has started (no end).
func TestStartWaitingKeepsItsEnd(t *testing.T) {
	stopped := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	at := stopped.Add(3 * time.Hour)
	code := 0
	w := Workload{ID: "w1", Status: Stopped, EndedAt: stopped, ExitCode: &code}
	held, _, err := Transition(w, StartHeld, "waiting", at)
	if err != nil || held.Status != PendingApproval || !held.EndedAt.Equal(stopped) || held.ExitCode == nil {
		t.Fatalf("held: %s ended %v code %v %v", held.Status, held.EndedAt, held.ExitCode, err)
	}
	held.Approval = Approval{Why: "over budget", Restart: true}
	for _, tr := range []Trigger{DenyStart, Withdraw, Delete} {
		out, _, err := Transition(held, tr, "back", at.Add(time.Hour))
		if err != nil || !out.EndedAt.Equal(stopped) || out.ExitCode == nil {
			t.Errorf("%s: %s ended %v code %v %v, want its end at %v kept", tr, out.Status, out.EndedAt, out.ExitCode, err, stopped)
		}
	}
	out, _, err := Transition(held, Approve, "", at.Add(time.Hour))
	if err != nil || out.Status != Pending || !out.EndedAt.IsZero() || out.ExitCode != nil {
		t.Errorf("approved: %s ended %v code %v %v, want no end", out.Status, out.EndedAt, out.ExitCode, err)
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

// TestLive: the live statuses are exactly those whose row lets the
// cluster's reports move them; StatusesWhere lists them in order.
func TestLive(t *testing.T) {
	for _, st := range Statuses {
		_, reported := transitions[st][ReportedRunning]
		if st.Live() != reported {
			t.Errorf("%s.Live() = %v, but its row takes reports: %v", st, st.Live(), reported)
		}
		if st.Live() && st.Ended() {
			t.Errorf("%s is live and ended", st)
		}
	}
	if got := StatusesWhere(Status.Live); !slices.Equal(got, []Status{Pending, Queued, Scheduled, Running}) {
		t.Errorf("StatusesWhere(Live) = %v", got)
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

// TestTransitionHistory: a workload's history follows its runs — first
// start kept, each start counted, the end stamped once (a delete after it
// ended keeps when it ended), and a start after a stop clears the end.
func TestTransitionHistory(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	w := Workload{ID: "w1", Status: Pending}
	steps := []struct {
		tr       Trigger
		min      int
		started  int // minutes; -1: zero
		ended    int
		attempts int
		ran      time.Duration
	}{
		{ReportedScheduled, 1, -1, -1, 0, 0},
		{ReportedRunning, 2, 2, -1, 1, 0},
		{ReportedPending, 5, 2, -1, 1, 3 * time.Minute}, // its pod failed and is retried
		{ReportedRunning, 6, 2, -1, 2, 3 * time.Minute},
		{Stop, 10, 2, 10, 2, 7 * time.Minute},
		{Start, 20, 2, -1, 2, 7 * time.Minute},
		{ReportedRunning, 21, 2, -1, 3, 7 * time.Minute},
		{ReportedFailed, 30, 2, 30, 3, 16 * time.Minute},
		{Delete, 40, 2, 30, 3, 16 * time.Minute},
	}
	code := 1
	w.ExitCode = &code // from an earlier end: cleared by a start
	for _, s := range steps {
		var err error
		if w, _, err = Transition(w, s.tr, "", at(s.min)); err != nil {
			t.Fatalf("%s: %v", s.tr, err)
		}
		when := func(m int) time.Time {
			if m < 0 {
				return time.Time{}
			}
			return at(m)
		}
		if !w.StartedAt.Equal(when(s.started)) || !w.EndedAt.Equal(when(s.ended)) || w.Attempts != s.attempts || w.RanFor(at(s.min)) != s.ran {
			t.Fatalf("after %s at minute %d: started %v, ended %v, attempts %d, ran %v; want minutes %d, %d, %d attempts, ran %v",
				s.tr, s.min, w.StartedAt, w.EndedAt, w.Attempts, w.RanFor(at(s.min)), s.started, s.ended, s.attempts, s.ran)
		}
		if s.tr == ReportedRunning && w.ExitCode != nil {
			t.Fatalf("after %s: exit code %d kept from before", s.tr, *w.ExitCode)
		}
	}
}

// TestTransitionHistoryUnseenRun: a job that Succeeded without ever being
// seen Running ran once, for no time Gantry saw; one that failed so did not.
func TestTransitionHistoryUnseenRun(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ok, _, _ := Transition(Workload{Status: Scheduled}, ReportedSucceeded, "", at)
	if ok.Attempts != 1 || !ok.StartedAt.Equal(at) || !ok.EndedAt.Equal(at) || ok.RanFor(at) != 0 {
		t.Errorf("succeeded unseen: %+v", ok)
	}
	failed, _, _ := Transition(Workload{Status: Pending}, ReportedFailed, "ImagePullBackOff", at)
	if failed.Attempts != 0 || !failed.StartedAt.IsZero() || !failed.EndedAt.Equal(at) {
		t.Errorf("failed before it ran: %+v", failed)
	}
}

// TestActions: what a person may ask follows the table — a live workload
// may be stopped and deleted, a stopped one started and deleted, a held
// launch approved, denied or deleted, an ended one only deleted, a deleted
// one nothing.
func TestActions(t *testing.T) {
	for st, want := range map[Status][]Action{
		Running: {ActStop, ActDelete}, Queued: {ActStop, ActDelete}, Stopped: {ActStart, ActDelete}, IdleStopped: {ActStart, ActDelete},
		PendingApproval: {ActDelete, ActApprove, ActDeny}, Succeeded: {ActDelete}, Failed: {ActDelete}, Deleted: {},
	} {
		if got := Actions(st); !slices.Equal(got, want) {
			t.Errorf("Actions(%s) = %v, want %v", st, got, want)
		}
	}
}
