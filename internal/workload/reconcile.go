package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// Reconcile applies every recorded workload whose objects are not yet on the
// cluster (a crash or an unreachable cluster in the middle of a launch). It
// renders each again from what was recorded and refuses if that no longer gives
// the recorded hash.
func (s *Service) Reconcile(ctx context.Context) (applied int, err error) {
	if s.cluster == nil {
		return 0, nil
	}
	// With Kueue, a launch held for approval is applied and waits at its
	// AdmissionCheck; without, it is applied once approved.
	pending, err := s.store.UnappliedWorkloads(ctx, 500, s.kueue)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, w := range pending {
		objs, err := s.rerender(ctx, w)
		if err != nil {
			if never(err) {
				// It can never be applied as recorded (its template version
				// is gone, or renders otherwise now): fail it with the
				// reason, so that it leaves the unapplied list.
				if _, terr := s.transition(ctx, w.ID, Refused, "cannot be rendered again as it was launched: "+err.Error()); terr != nil {
					err = errors.Join(err, terr)
				}
			} // otherwise (the database did not answer, say) the next pass tries again
			errs = append(errs, fmt.Errorf("workload %s: %w", w.ID, err))
			continue
		}
		_, err = s.apply(ctx, w, objs)
		var un *fault.Unavailable
		if errors.As(err, &un) {
			return applied, err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("workload %s: %w", w.ID, err))
			continue
		}
		applied++
	}
	return applied, errors.Join(errs...)
}

// never reports whether rendering a recorded workload again failed for good:
// its template version is gone, it no longer resolves or renders, or it
// renders other objects than were recorded.
func never(err error) bool {
	var nf *fault.NotFound
	var inv *fault.Invalid
	var c *fault.Conflict
	return errors.As(err, &nf) || errors.As(err, &inv) || errors.As(err, &c)
}

// Objects lists the primary objects (Jobs, Deployments, StatefulSets,
// VirtualMachines) that carry Gantry's labels on the cluster, as the API
// server lists them or with the Jobs from the leader's cache
// (kube.Cluster.Objects); a test narrows it to its own namespace.
type Objects interface {
	Managed(ctx context.Context) ([]ObjectRef, error)
}

// Convergence is what Converge did, or would do, to one object on the cluster.
type Convergence struct {
	Object ObjectRef
	Do     string // "delete", "stop" or "start"
	Why    string
	Done   bool
}

// Converge brings the cluster to what was recorded, for the primary objects
// that carry Gantry's labels, as on lists them: a deleted workload's objects
// are removed, a stopped one's stopped, a started one's started (a change the
// cluster did not answer at the time). Objects of no recorded workload are
// orphans: reported, and removed only with removeOrphans. on may be a
// moment behind (each action is one the cluster takes twice without harm):
// a stop or start it calls for is confirmed with the API server first.
func (s *Service) Converge(ctx context.Context, on Objects, removeOrphans bool) ([]Convergence, error) {
	if s.cluster == nil {
		return nil, nil
	}
	objs, err := on.Managed(ctx)
	if err != nil {
		return nil, err
	}
	var out []Convergence
	var errs []error
	for _, o := range objs {
		a, ok, err := s.actionFor(ctx, o, removeOrphans)
		if err != nil {
			return out, err
		}
		if !ok {
			continue
		}
		if a.Done && (a.Do == "stop" || a.Do == "start") {
			// on (a cache) found it out of step with its record: act only
			// if the API server says so too, with the record read after
			// it — a stop or start under way from a request (a start just
			// after a stop, which a cache a moment behind still shows
			// running) is not undone.
			live, err := s.cluster.Primary(ctx, o)
			var nf *fault.NotFound
			if errors.As(err, &nf) {
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", o, err))
				continue
			}
			now, ok, err := s.actionFor(ctx, live, removeOrphans)
			if err != nil {
				return out, err
			}
			if !ok || now.Do != a.Do {
				continue
			}
			o, a = live, now
		}
		if a.Done {
			switch a.Do {
			case "delete":
				err = s.cluster.Delete(ctx, o.Namespace, o.Kind, o.Name)
			case "stop", "start":
				err = s.cluster.SetRunning(ctx, o, a.Do == "start")
			}
			var nf *fault.NotFound
			if err != nil && !errors.As(err, &nf) {
				a.Done = false
				errs = append(errs, fmt.Errorf("%s %s: %w", a.Do, o, err))
			}
		}
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}

// actionFor decides what an object on the cluster needs; ok is false when it
// is as recorded. Done is set when the action should be carried out.
func (s *Service) actionFor(ctx context.Context, o ObjectRef, removeOrphans bool) (Convergence, bool, error) {
	w, err := s.store.Workload(ctx, o.WorkloadID)
	var nf *fault.NotFound
	switch {
	case errors.As(err, &nf):
		return Convergence{Object: o, Do: "delete", Why: "no workload has this id", Done: removeOrphans}, true, nil
	case err != nil:
		return Convergence{}, false, err
	case w.Status == Deleted:
		return Convergence{Object: o, Do: "delete", Why: "the workload was deleted", Done: true}, true, nil
	case (w.Status == Stopped || w.Status == IdleStopped) && o.Running:
		return Convergence{Object: o, Do: "stop", Why: "the workload was stopped", Done: true}, true, nil
	case w.StartWaits() && o.Running:
		// A start held for approval runs nothing until approved (a stop
		// the cluster missed before it).
		return Convergence{Object: o, Do: "stop", Why: "its start waits for approval", Done: true}, true, nil
	case !w.Status.Ended() && w.Status != PendingApproval && !o.Running && w.Applied():
		return Convergence{Object: o, Do: "start", Why: "the workload was started again", Done: true}, true, nil
	}
	return Convergence{}, false, nil
}

// Expire stops the live services, notebooks and VMs whose max runtime has
// ended (Jobs end by the cluster's activeDeadlineSeconds), with the reason
// on the record. It returns how many it stopped.
func (s *Service) Expire(ctx context.Context) (int, error) {
	now := s.clock()
	due, err := s.store.ExpiredWorkloads(ctx, now, 500)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, w := range due {
		reason := fmt.Sprintf("stopped at %s: it reached the max runtime of template %s", w.ExpiresAt.Format(time.RFC3339), w.Template)
		if v, err := s.templates.Get(ctx, w.Template, w.TemplateVersion); err == nil {
			reason += " (" + v.Template.Spec.Lifecycle.MaxRuntime + "); start it again for another run"
		}
		_, err := s.halt(ctx, w.ID, Expire, reason)
		var c *fault.Conflict
		switch {
		case errors.As(err, &c):
			// Stopped or ended in the meantime.
		case err != nil:
			errs = append(errs, fmt.Errorf("workload %s: %w", w.ID, err))
		default:
			n++
		}
	}
	return n, errors.Join(errs...)
}
