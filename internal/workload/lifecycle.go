package workload

import (
	"fmt"
	"slices"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// Trigger is something that happens to a workload and may move it to another
// status: what the cluster reports about its objects, what a person asks for,
// or what one of Gantry's loops decides.
type Trigger string

// Triggers. The Reported* ones come from the cluster (through the controller);
// the others from people or Gantry's loops.
const (
	ReportedPending   Trigger = "reported Pending"
	ReportedQueued    Trigger = "reported Queued"
	ReportedScheduled Trigger = "reported Scheduled"
	ReportedRunning   Trigger = "reported Running"
	ReportedSucceeded Trigger = "reported Succeeded"
	ReportedFailed    Trigger = "reported Failed"

	Refused  Trigger = "refused"   // the API server refused its objects
	Approve  Trigger = "approve"   // an approver let a held launch go ahead
	Deny     Trigger = "deny"      // an approver refused a held launch
	Stop     Trigger = "stop"      // its owner or a team-admin stopped it
	Expire   Trigger = "expire"    // it ran past its template's max runtime
	IdleStop Trigger = "idle-stop" // the idle culler stopped it
	SpotGone Trigger = "spot-gone" // evicted from spot capacity more often than its template allows
	Start    Trigger = "start"     // a stopped workload was started again
	// StartHeld: a stopped workload was asked to start again where the
	// team's rules want an approver first (its volumes wait with it);
	// DenyStart: an approver refused that start, or its time ran out;
	// Withdraw: its owner or a team-admin took that start back first.
	StartHeld Trigger = "start-held"
	DenyStart Trigger = "deny-start"
	Withdraw  Trigger = "withdraw"
	Delete    Trigger = "delete"  // its owner or a team-admin deleted it
	Release   Trigger = "release" // a flexible launch held for cleaner power goes into its queue
)

// Triggers lists every trigger, for tests and documentation.
var Triggers = []Trigger{
	ReportedPending, ReportedQueued, ReportedScheduled, ReportedRunning, ReportedSucceeded, ReportedFailed,
	Refused, Approve, Deny, Stop, Expire, IdleStop, SpotGone, Start, StartHeld, DenyStart, Withdraw, Delete, Release,
}

// Reported is the trigger of the cluster reporting st; "" for a status the
// cluster cannot report.
func Reported(st Status) Trigger {
	switch st {
	case Pending:
		return ReportedPending
	case Queued:
		return ReportedQueued
	case Scheduled:
		return ReportedScheduled
	case Running:
		return ReportedRunning
	case Succeeded:
		return ReportedSucceeded
	case Failed:
		return ReportedFailed
	}
	return ""
}

// transitions is the lifecycle: for each status, the triggers it accepts and
// the status each leads to. A trigger missing from a status's row is refused.
//
// The rules it encodes: while a workload is live (Pending, Queued, Scheduled,
// Running) the cluster's reports move it in either direction (a pod replaced
// after an eviction is Pending again; Kueue's preemption puts it back in the
// queue). Once it has ended (Succeeded, Failed) or was stopped or deleted, no
// report moves it: a late or out-of-order report can never undo what a person
// asked for or bring a finished workload back. Only Start leaves Stopped and
// IdleStopped; nothing leaves Deleted.
var transitions = map[Status]map[Trigger]Status{
	// Not Stop: a held launch stopped and started again would skip its
	// approval. Deny or Delete take it back; a start held for approval
	// denied (DenyStart) or taken back (Withdraw: a start's only, see
	// Transition) is Stopped as it was, its volumes kept.
	PendingApproval: {
		Approve: Pending, Deny: Failed, DenyStart: Stopped, Withdraw: Stopped, Delete: Deleted,
		// With Kueue a held launch is applied: the API server may refuse it.
		Refused: Failed,
	},
	Pending: live(),
	// A flexible launch held for cleaner power is Queued in Gantry, its
	// objects not yet applied; Release sends it on (Queued in Kueue).
	Queued:    with(live(), Release, Queued),
	Scheduled: live(),
	Running:   live(),
	Succeeded: {Delete: Deleted},
	Failed:    {Delete: Deleted},
	Stopped: {
		Start: Pending, StartHeld: PendingApproval, Delete: Deleted,
	},
	IdleStopped: {
		Start: Pending, StartHeld: PendingApproval, Delete: Deleted,
	},
	Deleted: {},
}

// with is row with tr leading to st.
func with(row map[Trigger]Status, tr Trigger, st Status) map[Trigger]Status {
	row[tr] = st
	return row
}

// live is the row of a workload that runs or waits to run.
func live() map[Trigger]Status {
	return map[Trigger]Status{
		ReportedPending: Pending, ReportedQueued: Queued, ReportedScheduled: Scheduled, ReportedRunning: Running,
		ReportedSucceeded: Succeeded, ReportedFailed: Failed,
		Refused: Failed, SpotGone: Failed,
		Stop: Stopped, Expire: Stopped, IdleStop: IdleStopped, Delete: Deleted,
	}
}

// Next is the status tr moves a workload in status from to; ok is false when
// the lifecycle refuses tr in that status.
func Next(from Status, tr Trigger) (to Status, ok bool) {
	to, ok = transitions[from][tr]
	return to, ok
}

// Action is what a person may ask of a workload.
type Action string

// Actions, each the trigger it fires.
const (
	ActStop    Action = "stop"
	ActStart   Action = "start"
	ActDelete  Action = "delete"
	ActApprove Action = "approve"
	ActDeny    Action = "deny"
)

var actionTriggers = []struct {
	act Action
	tr  Trigger
}{{ActStop, Stop}, {ActStart, Start}, {ActDelete, Delete}, {ActApprove, Approve}, {ActDeny, Deny}}

// Actions are what the lifecycle lets a person ask of a workload in st now,
// read from the table: an action whose trigger its row has. (Stopping a
// stopped workload is harmless but not offered.) Who may ask is policy's.
func Actions(st Status) []Action {
	out := []Action{}
	for _, a := range actionTriggers {
		if _, ok := Next(st, a.tr); ok {
			out = append(out, a.act)
		}
	}
	return out
}

// Actions are what the lifecycle lets a person ask of w now: those of its
// status, start for a launch held for cleaner power (start now), and stop
// for a start waiting for approval (taken back: Withdraw).
func (w Workload) Actions() []Action {
	acts := Actions(w.Status)
	if w.Deferral.Holding() && !slices.Contains(acts, ActStart) {
		acts = append(acts, ActStart)
	}
	if w.StartWaits() && !slices.Contains(acts, ActStop) {
		acts = append(acts, ActStop)
	}
	return acts
}

// ActionsOfStatus reports whether w allows what its status's row does and
// no more (Actions is Actions(w.Status)): what a caller may share per
// status.
func (w Workload) ActionsOfStatus() bool { return !w.Deferral.Holding() && !w.StartWaits() }

// StartWaits reports whether w is a stopped workload's start again waiting
// for approval (not a launch's): nothing of it runs, and it may be taken
// back (Withdraw).
func (w Workload) StartWaits() bool { return w.Status == PendingApproval && w.Approval.Restart }

// Accepts lists the triggers a status accepts, sorted.
func Accepts(from Status) []Trigger {
	var out []Trigger
	for tr := range transitions[from] {
		out = append(out, tr)
	}
	slices.Sort(out)
	return out
}

// acceptedBy is what can happen to w now: its status's triggers, less a
// withdraw of a launch waiting for approval (only a start is withdrawn).
func acceptedBy(w Workload) []Trigger {
	out := Accepts(w.Status)
	if !w.Approval.Restart {
		out = slices.DeleteFunc(out, func(t Trigger) bool { return t == Withdraw })
	}
	return out
}

// Live reports whether a workload in st runs or waits to run, its objects
// on the cluster: Pending, Queued, Scheduled, Running (the statuses whose
// row is live()). PendingApproval waits for a person first.
func (st Status) Live() bool {
	switch st {
	case Pending, Queued, Scheduled, Running:
		return true
	}
	return false
}

// StatusesWhere lists the statuses for which pred holds, in Statuses' order:
// what the store selects by.
func StatusesWhere(pred func(Status) bool) []Status {
	var out []Status
	for _, st := range Statuses {
		if pred(st) {
			out = append(out, st)
		}
	}
	return out
}

// Ended reports whether a workload in st will not run again without a person
// starting it (or ever).
func (st Status) Ended() bool {
	switch st {
	case Succeeded, Failed, Stopped, IdleStopped, Deleted:
		return true
	}
	return false
}

// Transition applies tr to w: the new status and reason, UpdatedAt = at, its
// running time (metering: RunningSince, RunningFor) and its history
// (StartedAt, EndedAt, Attempts). It
// returns changed false (and w unchanged) when neither status nor reason
// would change, and a *fault.Conflict when the table refuses tr.
func Transition(w Workload, tr Trigger, reason string, at time.Time) (out Workload, changed bool, err error) {
	to, ok := Next(w.Status, tr)
	if !ok {
		return w, false, &fault.Conflict{Kind: "workload", Name: w.ID,
			Reason: fmt.Sprintf("is %s, and %q cannot happen to it (what can: %v)", w.Status, tr, acceptedBy(w))}
	}
	if tr == Withdraw && !w.Approval.Restart {
		// Stopped, a launch that never ran would start without its
		// approval; it is taken back by deleting it.
		return w, false, &fault.Conflict{Kind: "workload", Name: w.ID,
			Reason: "waits for approval of its launch, which cannot be withdrawn: delete it to take it back"}
	}
	if to == w.Status && reason == w.Reason {
		return w, false, nil
	}
	// Metering: a run begins when it turns Running and ends when it leaves.
	switch {
	case to == Running && w.Status != Running:
		w.RunningSince, w.NodeGroup, w.RunPrice, w.Cluster = at, "", 0, "" // where it runs is said again
		w.Attempts++
		if w.StartedAt.IsZero() {
			w.StartedAt = at
		}
	case to != Running && w.Status == Running && !w.RunningSince.IsZero():
		w.RunningFor += at.Sub(w.RunningSince)
		w.RanCost += w.RunPricePerHour() * at.Sub(w.RunningSince).Hours()
		w.RunningSince = time.Time{}
	}
	if to == Succeeded && w.Attempts == 0 {
		// It ran between two looks at the cluster (never seen Running):
		// it ran once, for no time Gantry saw.
		w.Attempts, w.StartedAt = 1, at
	}
	// A start again that waits for approval has not started: it keeps when
	// it ended (and how) until approved, and keeps it when refused,
	// withdrawn or deleted.
	waitsToStart := tr == StartHeld || (w.StartWaits() && !w.EndedAt.IsZero())
	switch {
	case waitsToStart && (to == PendingApproval || to.Ended()):
	case to.Ended() && !w.Status.Ended():
		w.EndedAt = at
	case !to.Ended():
		w.EndedAt, w.ExitCode = time.Time{}, nil // started again: it has not ended
	}
	// A deferral holds only a Queued workload: leaving Queued (stopped,
	// deleted, refused) ends it, and a start afterwards is at once.
	if w.Deferral.Holding() && to != Queued {
		d := *w.Deferral
		d.Until = time.Time{}
		w.Deferral = &d
	}
	// Held by a budget is said by whoever holds it, with its reason: any
	// other change ends it.
	if to != w.Status {
		w.Warned = Warned{} // a warning is about the run it was given in
	}
	w.Status, w.Reason, w.UpdatedAt, w.Held = to, reason, at, false
	return w, true, nil
}
