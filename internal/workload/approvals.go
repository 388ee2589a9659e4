package workload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
)

// Admission is Gantry's AdmissionCheck on a launch, as Kueue reads it: the
// check's state (AdmissionReady, AdmissionPending or AdmissionRejected) and
// why.
type Admission struct {
	State   string
	Message string
}

// States of Gantry's AdmissionCheck (Kueue's words).
const (
	AdmissionPending  = "Pending"
	AdmissionReady    = "Ready"
	AdmissionRejected = "Rejected"
)

// Admission says what Gantry's AdmissionCheck should say of the launch id
// whose Kueue Workload is in namespace (the check controller asks for every
// Kueue Workload of a launch, as soon as it appears): wait while it is held for
// approval, reject it when it was denied or its time to decide ran out,
// ready otherwise. A Kueue Workload that is not this Gantry's launch — no
// such id, or not in that launch's team namespace (a label anyone who may
// create objects there can copy) — gets no answer (State ""): its check
// stays Pending, so Kueue does not admit it.
func (s *Service) Admission(ctx context.Context, namespace, id string) (Admission, error) {
	w, err := s.store.Workload(ctx, id)
	var nf *fault.NotFound
	switch {
	case errors.As(err, &nf):
		return Admission{}, nil
	case err != nil:
		return Admission{}, err
	case namespace != s.namespace(w.Team):
		return Admission{}, nil
	}
	switch {
	case w.Status == PendingApproval:
		return Admission{State: AdmissionPending, Message: w.Reason}, nil
	case w.Approval.Restart && w.Approval.Decision != "approved":
		// A start again refused: the workload is stopped, its Kueue
		// Workload inactive. Pending, never Rejected — a Rejected check
		// left there would have Kueue switch it off again when a later
		// start reactivates it before the check turns Ready.
		return Admission{State: AdmissionPending, Message: w.Reason}, nil
	case w.Approval.Decision == "approved":
		return Admission{State: AdmissionReady, Message: fmt.Sprintf("approved by %s: %s", w.Approval.By, w.Approval.Note)}, nil
	case w.Approval.Needed():
		// Denied, expired, or deleted before a decision.
		return Admission{State: AdmissionRejected, Message: fmt.Sprintf("%s by %s: %s", orDefault(w.Approval.Decision, "deleted"), orDefault(w.Approval.By, w.Owner), orDefault(w.Approval.Note, "no decision"))}, nil
	}
	return Admission{State: AdmissionReady, Message: "needs no approval"}, nil
}

// Decide approves (approve true) or denies a launch held for approval, with
// the approver's reason. Only who may approve in its team (a team-admin, a
// platform-admin) may, and never for their own launch. An approved launch
// goes ahead (with Kueue: its AdmissionCheck turns Ready and Kueue admits it
// as quota allows; without: it is applied now); a denied one fails with the
// reason (Kueue rejects it and frees what it reserved).
func (s *Service) Decide(ctx context.Context, id string, approve bool, note string) (Workload, error) {
	w, err := s.visible(ctx, id)
	if err != nil {
		return w, err
	}
	if !s.may(ctx, w.Team, access.WorkloadsApprove) {
		return w, &fault.Forbidden{Reason: fmt.Sprintf("only a team-admin of %q or a platform-admin may approve or deny its launches", w.Team)}
	}
	caller, _ := identity.From(ctx)
	if w.Owner == caller.String() {
		return w, &fault.Forbidden{Reason: "you may not decide on your own launch: another team-admin or a platform-admin must"}
	}
	note = strings.TrimSpace(note)
	if note == "" || len(note) > 1000 {
		return w, &fault.Invalid{Fields: []fault.Field{{Path: "reason", Message: "is required: say why, in up to 1000 characters"}}}
	}
	verb := "approved"
	if !approve {
		verb = "denied"
	}
	maxRuntime := "" // a start again approved: its max runtime counts from now
	if w.Approval.Restart && approve {
		v, err := s.templates.Get(ctx, w.Template, w.TemplateVersion)
		if err != nil {
			return w, err
		}
		maxRuntime = v.Template.Spec.Lifecycle.MaxRuntime
	}
	now := s.clock()
	w, err = s.store.UpdateWorkload(ctx, id, func(w Workload) (Workload, error) {
		if w.Status != PendingApproval {
			return w, &fault.Conflict{Kind: "workload", Name: id, Reason: fmt.Sprintf("is %s, not waiting for approval", w.Status)}
		}
		tr, reason := Approve, ""
		if !approve {
			var what string
			tr, what = w.Approval.denial()
			reason = fmt.Sprintf("%s by %s: %s", what, caller.String(), note)
		}
		out, _, err := Transition(w, tr, reason, now)
		out.Approval.Decision, out.Approval.By, out.Approval.Note, out.Approval.At = verb, caller.String(), note, now
		if approve && out.Approval.Restart {
			out.ExpiresAt = expiry(now, maxRuntime)
		}
		return out, err
	})
	if err != nil {
		return w, err
	}
	s.log.InfoContext(ctx, "launch "+verb, "workload_id", id, "team", w.Team, "by", caller.String())
	// The decision stands; telling the cluster is retried by the loops (the
	// lifecycle loop applies, the queue controller sets the check).
	got, err := s.released(ctx, w)
	if err != nil {
		s.log.WarnContext(ctx, "decision recorded; the cluster is told later", "workload_id", id, "err", err)
		return w, nil
	}
	return got, nil
}

// ExpireApprovals refuses the launches whose time to decide ran out; it
// returns how many.
func (s *Service) ExpireApprovals(ctx context.Context) (int, error) {
	now := s.clock()
	due, err := s.store.ExpiredApprovals(ctx, now, 500)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, w := range due {
		got, err := s.store.UpdateWorkload(ctx, w.ID, func(w Workload) (Workload, error) {
			if w.Status != PendingApproval {
				return w, &fault.Conflict{Kind: "workload", Name: w.ID, Reason: "decided meanwhile"}
			}
			tr, what := w.Approval.denial()
			out, _, err := Transition(w, tr, fmt.Sprintf("%s by gantry: no decision by %s (the approval expired)", what, w.Approval.Expires.Format(time.RFC3339)), now)
			out.Approval.Decision, out.Approval.By, out.Approval.Note, out.Approval.At = "expired", "gantry", "no decision in time", now
			return out, err
		})
		var c *fault.Conflict
		switch {
		case errors.As(err, &c):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		n++
		if _, err := s.released(ctx, got); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// released tells the cluster a decision: with Kueue, the launch's
// AdmissionCheck (the check controller on the leader does it too, so a
// failure here only delays it); without, an approved launch is applied now.
// A stopped workload's start waited with nothing started: approved, it is
// started now (and with Kueue its check set too); denied, it stays
// stopped. It returns the workload as it is then.
func (s *Service) released(ctx context.Context, w Workload) (Workload, error) {
	if s.cluster == nil {
		return w, nil
	}
	switch {
	case w.Approval.Restart:
		if w.Status != Pending {
			return w, nil
		}
		if s.kueue {
			// The check first: Ready before Kueue sees its Workload active.
			if err := s.tellCheck(ctx, w); err != nil {
				return w, err
			}
		}
		return w, s.tell(ctx, w, func(ctx context.Context) error { return s.cluster.SetRunning(ctx, s.ref(w), true) })
	case !s.kueue:
		if w.Status != Pending {
			return w, nil
		}
		objs, err := s.rerender(ctx, w)
		if err != nil {
			return w, err
		}
		got, err := s.apply(ctx, w, objs)
		var un *fault.Unavailable
		if errors.As(err, &un) {
			return got, nil // the lifecycle loop applies it when the cluster answers
		}
		return got, err
	}
	return w, s.tellCheck(ctx, w)
}

// tellCheck sets w's AdmissionCheck on the cluster to what Admission says.
func (s *Service) tellCheck(ctx context.Context, w Workload) error {
	a, err := s.Admission(ctx, s.namespace(w.Team), w.ID)
	if err != nil {
		return err
	}
	return s.tell(ctx, w, func(ctx context.Context) error { return s.cluster.SetAdmission(ctx, s.namespace(w.Team), w.ID, a) })
}

// denial is how refusing what a is for is recorded: a launch
// fails (Deny), a stopped workload's start leaves it Stopped (DenyStart);
// what is said of it in the reason.
func (a Approval) denial() (Trigger, string) {
	if a.Restart {
		return DenyStart, "starting it again was denied"
	}
	return Deny, "denied"
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
