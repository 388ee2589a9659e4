package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
)

// transition moves a workload through the lifecycle table in one store
// transaction: whoever else changes it at the same moment, the trigger is
// applied to the record as it is, and a refused trigger writes nothing (a
// *fault.Conflict).
func (s *Service) transition(ctx context.Context, id string, tr Trigger, reason string) (Workload, error) {
	return s.store.UpdateWorkload(ctx, id, func(w Workload) (Workload, error) {
		out, _, err := Transition(w, tr, reason, s.clock())
		return out, err
	})
}

// Observed is what the cluster says about a workload: its status and why,
// its main container's exit code when it ended (nil: not known), and the
// node group of each of its running pods ("" for a node in no group; none
// when not known).
type Observed struct {
	Status     Status
	Reason     string
	ExitCode   *int
	NodeGroups []string
	// Cluster is the worker cluster it runs on, dispatched, HourPrice its
	// run's price per hour there and GPUHourPrice that cluster's price per
	// GPU-hour for it (0: unknown; a dispatcher before the hourly price
	// said only the GPU-hour's).
	Cluster                 string
	HourPrice, GPUHourPrice float64
	// At is when the cluster says the status began (a Job's completion, a
	// container's start; zero: not said, now). A run is metered from and
	// to the cluster's times, so one that ended while no replica led (a
	// failover) is billed to its end, not to the new leader's first look.
	At time.Time
}

// Report records what the cluster reports about a workload's status: the
// lifecycle's Reported trigger for st.
func (s *Service) Report(ctx context.Context, id string, st Status, reason string) (Workload, error) {
	return s.Observe(ctx, id, Observed{Status: st, Reason: reason})
}

// ReportExit is Report of a workload that ended (Succeeded, Failed) with
// what its main container exited with, kept in its history.
func (s *Service) ReportExit(ctx context.Context, id string, st Status, reason string, exitCode int) (Workload, error) {
	return s.Observe(ctx, id, Observed{Status: st, Reason: reason, ExitCode: &exitCode})
}

// Observe records what the cluster says about a workload: its status (the
// lifecycle's Reported trigger), its exit code once it ended, and, while it
// runs, the node groups its pods run on, which price its current run.
func (s *Service) Observe(ctx context.Context, id string, o Observed) (Workload, error) {
	st, reason, exitCode := o.Status, o.Reason, o.ExitCode
	tr := Reported(st)
	if tr == "" {
		return Workload{}, fmt.Errorf("report about workload %s: the cluster cannot report status %q", id, st)
	}
	if exitCode != nil && !st.Ended() {
		return Workload{}, fmt.Errorf("report about workload %s: an exit code with status %q, which has not ended", id, st)
	}
	// Most reports change nothing (a pod's event that leaves the phase and
	// reason as they were): the record is read once, outside a
	// transaction, and written only when the report changes it. A read
	// that finds nothing to change stands for an update that would have
	// written nothing at that moment; one that finds a change is done in
	// the transaction, on the record as it is then.
	cur, err := s.store.Workload(ctx, id)
	if err != nil {
		return Workload{}, err
	}
	held := false
	if st == Queued && s.kueue {
		// A team whose spent budget blocks launches has its queue held by
		// Kueue: say why in the budget's words, not the queue's.
		if why, h, err := s.budgets.Held(ctx, cur.Team); err == nil && h {
			reason, held = HeldPrefix+why, true
		}
	}
	var from Status
	update := func(w Workload) (Workload, error) {
		from = w.Status
		out, changed, err := Transition(w, tr, reason, observedAt(s.clock(), o.At, w.UpdatedAt))
		if err == nil && changed {
			out.Held = held
		}
		if err == nil && exitCode != nil && out.Status == st && (out.ExitCode == nil || *out.ExitCode != *exitCode) {
			out.ExitCode = exitCode
		}
		// A run is placed once, when the cluster first says where it runs
		// (then the whole run is priced there): a pod that later moves to
		// another group's machine leaves the run's price as it was.
		// A dispatched run is priced at its worker cluster's price for it:
		// a GPU run at the GPU-hour's for its GPUs (which a dispatcher of
		// any release writes with each nomination, so it is never one left
		// from an earlier nomination), else — a CPU-only run's cores at
		// their core-hour — at the run's hourly price.
		if err == nil && out.Status == Running && o.Cluster != "" && out.Cluster == "" {
			out.Cluster = o.Cluster
			switch {
			case o.GPUHourPrice > 0 && out.GPUClass != gpu.CPUClass:
				out.RunPrice = GPUShare(s.templates.Classes(), out.GPUClass, out.MIGProfile, out.GPUCount) * o.GPUHourPrice
			case o.HourPrice > 0:
				out.RunPrice = o.HourPrice
			}
		}
		if err == nil && out.Status == Running && out.NodeGroup == "" && len(o.NodeGroups) > 0 {
			if g, price := s.place(out, o.NodeGroups); g != "" {
				out.NodeGroup, out.RunPrice = g, price
			}
		}
		return out, err
	}
	if next, err := update(cur); err == nil && SameRecord(cur, next) {
		return cur, nil
	}
	out, err := s.store.UpdateWorkload(ctx, id, update)
	if err == nil && out.Status != from {
		s.log.DebugContext(ctx, "workload status reported", "workload_id", id, "from", from, "to", out.Status,
			"reason", out.Reason, "at", out.UpdatedAt, "attempts", out.Attempts)
	}
	return out, err
}

// observedAt is when a status the cluster reports at now began: the
// cluster's own time when it gave one, never later than now (clocks
// differ) nor earlier than the record's last change (nothing is metered
// twice, and a run never ends before it began).
func observedAt(now, cluster, last time.Time) time.Time {
	if cluster.IsZero() || !cluster.Before(now) {
		return now
	}
	if cluster.Before(last) {
		if last.After(now) {
			return now
		}
		return last
	}
	return cluster
}

// place is the node group a workload runs on — the one most of its pods
// (groups: one per running pod) are on — and its run's price per hour:
// each pod's share of its GPUs at the GPU-hour price of its group, a pod
// on no known group's node (or one of another class, or of no price) at
// its class's price. "" when none of its pods is on a known group's node.
func (s *Service) place(w Workload, groups []string) (string, float64) {
	count := map[string]int{}
	price, each := 0.0, 1/float64(len(groups))
	share := GPUShare(s.templates.Classes(), w.GPUClass, w.MIGProfile, w.GPUCount)
	for _, name := range groups {
		g, ok := s.groups.Get(name)
		if !ok || g.Class != w.GPUClass || g.PricePerNodeHour <= 0 {
			price += w.PricePerHour * each
			continue
		}
		count[g.Name]++
		price += share * each * g.PricePerNodeHour / float64(g.GPUsPerNode)
	}
	best := ""
	for name, n := range count {
		if n > count[best] || (n == count[best] && name < best) {
			best = name
		}
	}
	if best == "" {
		return "", 0
	}
	return best, price
}

// Delete marks a workload deleted and removes its objects from the cluster;
// the record stays for accounting. Deleting twice is not an error.
func (s *Service) Delete(ctx context.Context, id string) error {
	if _, err := s.manageable(ctx, id); err != nil {
		return err
	}
	// Recorded first, so that no report about the objects going away can
	// bring it back; if the cluster does not answer now, the converge loop
	// removes them later.
	w, changed, err := s.transitionUnless(ctx, id, Delete, "", func(st Status) bool { return st == Deleted })
	if err != nil || !changed {
		return err
	}
	return s.tell(ctx, w, func(ctx context.Context) error {
		r := s.ref(w)
		return s.cluster.Delete(ctx, r.Namespace, r.Kind, r.Name)
	})
}

// Stop stops a workload and keeps it, with its volumes, so that Start can
// bring it back: a Job is suspended, a service's Deployment or a notebook's
// StatefulSet scaled to zero, a VM halted. Stopping a stopped workload is not
// an error; stopping one that has ended is a *fault.Conflict. A start again
// that waits for approval is taken back (Withdraw); a launch that waits for
// approval cannot be stopped (a *fault.Conflict: it is deleted instead).
func (s *Service) Stop(ctx context.Context, id string) (Workload, error) {
	if _, err := s.manageable(ctx, id); err != nil {
		return Workload{}, err
	}
	return s.halt(ctx, id, Stop, "")
}

// StopByRule stops a workload as one of its template's rules decided (a
// run's early stopping), with the rule and its numbers as the reason: a
// stop like a person's (Stopped; starting it again resumes), made by
// Gantry, so no caller's permission is asked.
func (s *Service) StopByRule(ctx context.Context, id, reason string) error {
	_, err := s.halt(ctx, id, Stop, reason)
	return err
}

// halt records a stop (by a person, the max runtime or the idle culler) and
// tells the cluster; a workload already stopped is left as it is. A person's
// stop of a start waiting for approval takes that start back (Withdraw:
// nothing of it was started, so the cluster is not told). Which it is is
// decided on the record in the transaction.
func (s *Service) halt(ctx context.Context, id string, tr Trigger, reason string) (Workload, error) {
	caller, _ := identity.From(ctx)
	changed, withdrawn := false, false
	w, err := s.store.UpdateWorkload(ctx, id, func(w Workload) (Workload, error) {
		if w.Status == Stopped || w.Status == IdleStopped {
			return w, nil
		}
		now := s.clock()
		if tr == Stop && w.StartWaits() {
			out, ch, err := Transition(w, Withdraw, "its start was withdrawn before an approver decided", now)
			if err == nil {
				out.Approval.Decision, out.Approval.By, out.Approval.Note, out.Approval.At = "withdrawn", orDefault(caller.String(), "gantry"), "", now
			}
			changed, withdrawn = ch, true
			return out, err
		}
		out, ch, err := Transition(w, tr, reason, now)
		changed = ch
		return out, err
	})
	if err != nil || !changed || withdrawn {
		return w, err
	}
	return w, s.tell(ctx, w, func(ctx context.Context) error { return s.cluster.SetRunning(ctx, s.ref(w), false) })
}

// Start runs a stopped workload again, with the objects, volumes and endpoint
// it had; its max runtime counts again from now. Starting a live workload
// changes nothing; starting one that has ended is a *fault.Conflict.
func (s *Service) Start(ctx context.Context, id string) (Workload, error) {
	w, err := s.manageable(ctx, id)
	if err != nil {
		return w, err
	}
	if w.Deferral.Holding() {
		// Held for cleaner power: the person wants it now.
		return s.startNow(ctx, w)
	}
	if w.Trial != nil && (w.Status == Stopped || w.Status == IdleStopped) {
		// A trial measures short runs side by side; a run of it started
		// again alone would measure nothing the trial compares.
		return w, trialRunConflict(w)
	}
	var held *Approval // the approval a start again waits for (nil: none)
	if w.Status == Stopped || w.Status == IdleStopped {
		// Starting again spends like a launch: the team's spent budget
		// holds it or asks for approval the same way.
		if held, err = s.mayRestart(ctx, w); err != nil {
			return w, err
		}
	}
	maxRuntime := ""
	if v, err := s.templates.Get(ctx, w.Template, w.TemplateVersion); err == nil {
		maxRuntime = v.Template.Spec.Lifecycle.MaxRuntime
		if v.Status == catalog.Revoked && (w.Status == Stopped || w.Status == IdleStopped) {
			return w, &fault.Conflict{Kind: "workload", Name: id, Reason: fmt.Sprintf(
				"cannot start again: template %s version %d was revoked (%s); launch a version that is not", v.Name, v.Version, v.StatusReason)}
		}
	} else {
		var nf *fault.NotFound
		if !errors.As(err, &nf) {
			return w, err
		}
	}
	// Pending is recorded before the cluster is told, so that what it reports
	// next (Scheduled, Running) is not overwritten by it. Whether it is
	// stopped is decided in the same transaction as the change.
	changed, team := false, w.Team
	w, err = s.store.UpdateWorkload(ctx, id, func(w Workload) (Workload, error) {
		if w.Trial != nil && (w.Status == Stopped || w.Status == IdleStopped) {
			return w, trialRunConflict(w) // stopped since it was read above
		}
		if w.Status != Stopped && w.Status != IdleStopped {
			if w.Status.Ended() {
				return w, &fault.Conflict{Kind: "workload", Name: id, Reason: fmt.Sprintf("is %s and cannot be started again; launch the template anew", w.Status)}
			}
			return w, nil // already live
		}
		now := s.clock()
		if held != nil {
			// The same workload waits for an approver, its volumes (a
			// job's checkpoints) kept; nothing is started until approved.
			a := *held
			out, _, err := Transition(w, StartHeld, approvalReason(w.Team, a), now)
			out.Approval = a // its max runtime counts from the approval (Decide)
			changed = err == nil
			return out, err
		}
		out, _, err := Transition(w, Start, "", now)
		out.ExpiresAt = expiry(now, maxRuntime)
		if out.Approval.Restart && out.Approval.Decision != "approved" {
			// A start refused before is no answer for this one, which
			// needs none: its check must not say Rejected.
			out.Approval = Approval{}
		}
		changed = err == nil
		return out, err
	})
	var limit *PendingLimit
	if errors.As(err, &limit) && held != nil {
		// Past the cap, counted again where the start is recorded (the
		// count in mayRestart only answers early).
		return w, restartCapConflict(id, held.Why, limit.Waiting, team)
	}
	if err != nil || !changed || w.Status == PendingApproval {
		return w, err
	}
	return w, s.tell(ctx, w, func(ctx context.Context) error { return s.cluster.SetRunning(ctx, s.ref(w), true) })
}

// transitionUnless is transition, except that a workload already where the
// trigger would take it (already(status)) is left as it is: changed false,
// no error, decided in the same transaction.
func (s *Service) transitionUnless(ctx context.Context, id string, tr Trigger, reason string, already func(Status) bool) (Workload, bool, error) {
	changed := false
	w, err := s.store.UpdateWorkload(ctx, id, func(w Workload) (Workload, error) {
		if already(w.Status) {
			return w, nil
		}
		out, ch, err := Transition(w, tr, reason, s.clock())
		changed = ch
		return out, err
	})
	return w, changed, err
}

// tell carries out a recorded change on the cluster, when there is one and the
// workload's objects were applied. An unreachable cluster is not an error: the
// change is recorded, and the converge loop carries it out once the cluster
// answers.
func (s *Service) tell(ctx context.Context, w Workload, do func(context.Context) error) error {
	if s.cluster == nil || w.AppliedHash == "" {
		return nil
	}
	err := do(ctx)
	var un *fault.Unavailable
	var nf *fault.NotFound
	switch {
	case errors.As(err, &un):
		s.log.WarnContext(ctx, "the cluster did not answer; the change is recorded and carried out when it does", "workload_id", w.ID, "status", w.Status, "err", err)
		return nil
	case errors.As(err, &nf):
		return nil // nothing on the cluster to change
	}
	return err
}

// maxEvictionsKept bounds the eviction UIDs a workload keeps.
const maxEvictionsKept = 64

// Evicted records the pods of a workload's Job that the cluster disrupted.
// For a job on spot capacity each is one requeue (the Job starts a new pod;
// its pod failure policy does not count it as a retry); past its template's
// spotRequeues the workload fails and its Job is stopped. Other workloads'
// evictions are the cluster's business (a Deployment replaces its pod).
func (s *Service) Evicted(ctx context.Context, id string, pods []string) (Workload, error) {
	w, err := s.store.Workload(ctx, id)
	if err != nil {
		return w, err
	}
	v, err := s.templates.Get(ctx, w.Template, w.TemplateVersion)
	if err != nil {
		return w, err
	}
	sched := v.Template.Spec.Scheduling
	if w.Kind != template.Job || !sched.Spot {
		return w, nil
	}
	limit := sched.Requeues()
	failed := false
	w, err = s.store.UpdateWorkload(ctx, id, func(w Workload) (Workload, error) {
		if _, live := Next(w.Status, SpotGone); !live {
			return w, nil // stopped, ended or held: its evictions no longer count
		}
		seen := map[string]bool{}
		for _, uid := range w.SpotEvictions {
			seen[uid] = true
		}
		for _, uid := range pods {
			if !seen[uid] && len(w.SpotEvictions) < maxEvictionsKept {
				seen[uid] = true
				w.SpotEvictions = append(w.SpotEvictions, uid)
			}
		}
		if n := len(w.SpotEvictions); n > limit {
			out, _, err := Transition(w, SpotGone, fmt.Sprintf("evicted from spot capacity %d times; template %s starts a job again after at most %d (spec.scheduling.spotRequeues)", n, w.Template, limit), s.clock())
			failed = err == nil
			return out, err
		}
		return w, nil
	})
	if err != nil || !failed {
		return w, err
	}
	s.log.InfoContext(ctx, "spot job failed after its requeues", "workload_id", id, "evictions", len(w.SpotEvictions))
	return w, s.tell(ctx, w, func(ctx context.Context) error { return s.cluster.SetRunning(ctx, s.ref(w), false) })
}

// mayRestart applies the team's budget rules to starting w again: under
// block it waits in the held queue (without Kueue it is refused); under
// require-approval it waits for an approver, the same workload with its
// volumes (a job's checkpoints), not a new launch: held is that approval
// (nil: none needed). Past its owner's MaxPendingApprovals in the team it
// is refused (counted here to answer early, and again by the store where
// the start is recorded). The per-launch ceiling was weighed when it was
// launched.
func (s *Service) mayRestart(ctx context.Context, w Workload) (held *Approval, err error) {
	v, expires, err := s.budgets.Verdict(ctx, w.Team, 0, 0)
	if err != nil {
		return nil, err
	}
	switch {
	case v.Hold && !s.kueue:
		return nil, &fault.Forbidden{Reason: "cannot start again: " + v.Why}
	case v.Approval:
		waiting, err := s.store.ListWorkloads(ctx, Filter{Team: w.Team, Owner: w.Owner, Status: PendingApproval, Limit: MaxPendingApprovals})
		if err != nil {
			return nil, err
		}
		if len(waiting) >= MaxPendingApprovals {
			return nil, restartCapConflict(w.ID, v.Why, len(waiting), w.Team)
		}
		return &Approval{Why: v.Why, Expires: s.clock().Add(expires), Restart: true}, nil
	}
	return nil, nil
}

// restartCapConflict refuses a start again that needs approval (why) while
// waiting of its owner's workloads in team t already wait for one.
func restartCapConflict(id, why string, waiting int, t team.Name) error {
	return &fault.Conflict{Kind: "workload", Name: id, Reason: fmt.Sprintf(
		"starting it again needs approval (%s), and %d of its owner's workloads in team %s already wait for one: wait for a decision, or delete one", why, waiting, t)}
}

// trialRunConflict refuses to start a trial's run again.
func trialRunConflict(w Workload) error {
	return &fault.Conflict{Kind: "workload", Name: w.ID, Reason: fmt.Sprintf(
		"is a run of trial %s, and a trial's runs are not started again: start another trial, or launch the template", w.Trial.ID)}
}
