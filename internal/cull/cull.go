// Package cull owns idle culling: stopping a running workload whose template
// declares an idle timeout once neither its GPUs nor its people have used it
// for that long. GPU use is what the agents measured (utilization above 1 %,
// or SM activity above 0.01 — the online advice rules' idle threshold);
// people's use is the workload's UI through Gantry's proxy and keep-alives.
// A workload busy on its GPU is never culled however quiet its web UI, and
// one whose GPUs Gantry has no recent samples of is never culled: unknown is
// not idle.
package cull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/offhours"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/workload"
)

// Store reads what the culler decides on.
type Store interface {
	RunningWorkloads(ctx context.Context, limit int) ([]workload.Workload, error)
	WorkloadActivity(ctx context.Context, id string) (time.Time, error)
	GPUActivity(ctx context.Context, workload string, since time.Time) (telemetry.Activity, error)
}

// Templates says a workload's template version.
type Templates interface {
	Get(ctx context.Context, name string, version int) (catalog.Version, error)
}

// Stopper stops a workload as idle.
type Stopper interface {
	IdleStop(ctx context.Context, id, reason string) (workload.Workload, error)
}

// Options configure a Culler; Store, Templates and Stopper are required.
type Options struct {
	Store     Store
	Templates Templates
	Stopper   Stopper
	Log       *slog.Logger     // default: slog.Default()
	Now       func() time.Time // default: time.Now
}

// Culler stops idle workloads; Run is one pass.
type Culler struct {
	o Options
}

// New returns a Culler, complete.
func New(o Options) (*Culler, error) {
	if o.Store == nil || o.Templates == nil || o.Stopper == nil {
		return nil, errors.New("cull.New: Store, Templates and Stopper are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Culler{o: o}, nil
}

// Freshness is how recent a workload's newest GPU sample must be, and how
// early in the idle window its first, for its telemetry to speak for the
// whole window (the agents push every few seconds; a gap longer than this
// is an agent away, not an idle GPU).
const Freshness = 3 * time.Minute

// Verdict is the rule's answer for one workload.
type Verdict struct {
	Stop      bool
	QuietFor  time.Duration // since the later of GPU use, a person's use, and its start
	Reason    string        // why it is stopped, or why not
	QuietFrom time.Time
}

// Decide is the rule. runningSince is when it last started; gpu covers the
// idle window (now − timeout to now); person is the last use by a person.
func Decide(now time.Time, timeout time.Duration, runningSince time.Time, gpu telemetry.Activity, person time.Time) Verdict {
	from := runningSince
	for _, t := range []time.Time{gpu.LastActive, person} {
		if t.After(from) {
			from = t
		}
	}
	v := Verdict{QuietFor: now.Sub(from), QuietFrom: from}
	switch {
	case v.QuietFor < timeout:
		v.Reason = fmt.Sprintf("in use within its idle timeout of %s", timeout)
	case gpu.First.IsZero() || gpu.First.After(now.Add(-timeout).Add(Freshness)) || gpu.Last.Before(now.Add(-Freshness)):
		v.Reason = "its GPUs' samples do not cover the idle window: not known to be idle"
	default:
		v.Stop = true
		v.Reason = fmt.Sprintf("stopped at %s by the idle culler: its GPUs were idle (utilization ≤ 1 %%) and nobody used it for %s, its template's idle timeout; start it again to resume (its volumes are kept)",
			now.UTC().Format(time.RFC3339), timeout)
	}
	return v
}

// Run is one pass: every Running workload with an idle timeout is judged,
// and stopped when the rule says so. It returns how many it stopped.
func (c *Culler) Run(ctx context.Context) (int, error) {
	now := c.o.Now().UTC()
	running, err := c.o.Store.RunningWorkloads(ctx, 5000)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, w := range running {
		v, err := c.o.Templates.Get(ctx, w.Template, w.TemplateVersion)
		if err != nil {
			errs = append(errs, fmt.Errorf("workload %s: template: %w", w.ID, err))
			continue
		}
		lc := v.Template.Spec.Lifecycle
		if why, sleep := offHours(lc.Sleep, now, w.UpdatedAt); sleep {
			if c.stop(ctx, w, why, &n, &errs) {
				continue
			}
		}
		timeout, err := time.ParseDuration(lc.IdleTimeout)
		if err != nil || timeout <= 0 {
			continue // no idle timeout (validated with the template)
		}
		gpu, err := c.o.Store.GPUActivity(ctx, w.ID, now.Add(-timeout))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		person, err := c.o.Store.WorkloadActivity(ctx, w.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		verdict := Decide(now, timeout, w.UpdatedAt, gpu, person)
		if verdict.Stop {
			c.stop(ctx, w, verdict.Reason, &n, &errs)
		}
	}
	return n, errors.Join(errs...)
}

// stop stops w as idle with why, counting it or its error; false when it
// could not be stopped for an error.
func (c *Culler) stop(ctx context.Context, w workload.Workload, why string, n *int, errs *[]error) bool {
	_, err := c.o.Stopper.IdleStop(ctx, w.ID, why)
	var conflict *fault.Conflict
	switch {
	case errors.As(err, &conflict):
		// Stopped or ended in the meantime.
	case err != nil:
		*errs = append(*errs, fmt.Errorf("workload %s: %w", w.ID, err))
		return false
	default:
		*n++
		c.o.Log.Info("idle workload stopped", "workload", w.ID, "template", w.Template, "why", why)
	}
	return true
}

// offHours says whether a workload running since runningSince sleeps now
// under schedule: it is in a window that began after it started (one
// started during the window runs on — someone wanted it then).
func offHours(schedule string, now, runningSince time.Time) (string, bool) {
	if schedule == "" {
		return "", false
	}
	s, err := offhours.Parse(schedule)
	if err != nil {
		return "", false // validated with the template
	}
	in, from, until := s.Window(now)
	if !in || !runningSince.Before(from) {
		return "", false
	}
	return fmt.Sprintf("stopped at %s for its template's off-hours (%s, until %s); start it again to use it now (its volumes are kept)",
		now.UTC().Format(time.RFC3339), s, until.Format("Mon 15:04 MST")), true
}
