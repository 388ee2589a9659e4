// Package cull owns idle culling: stopping a running workload whose template
// declares an idle timeout once neither its GPUs nor its people have used it
// for that long. GPU use is what the agents measured (utilization above 1 %,
// or SM activity above 0.01 — the online advice rules' idle threshold);
// people's use is the workload's UI through Gantry's proxy — a page
// opened, a change, a message on its sockets, a Jupyter kernel executing
// (package interactive) — and keep-alives; a browser tab left open is not
// use. A notebook about to be warned or stopped is asked, through its
// app, whether a kernel executes now (a cell left running with no tab
// open): one that does is in use, recorded as such. A workload busy on its
// GPU is never culled however quiet its web UI, and one whose GPUs Gantry
// has no recent samples of is never culled:
// unknown is not idle. A CPU-only workload has no GPUs: its people's use
// alone speaks. Before it stops one, the culler warns — Warning before the idle
// timeout ends (half the timeout when that is shorter): a webhook
// (workload.idle-warning) and the workload's reason in the API and portal
// say when it will stop and how to keep it (a keep-alive, or any use). It
// never stops a workload it has not warned for the same quiet stretch at
// least that long before.
package cull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/offhours"
	"github.com/gantryhq/gantry/internal/overrides"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
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

// Stopper stops a workload as idle, and says why it may be soon.
type Stopper interface {
	// IdleStop stops it unless a person used it after lastUse (zero: never
	// used); nil: in any case.
	IdleStop(ctx context.Context, id, reason string, lastUse *time.Time) (workload.Workload, error)
	// Warn puts a warning on a running workload — its reason ("" clears
	// it) and what it warned of — with msg queued (nil: none), in one
	// transaction; false when it was already so (or no longer runs).
	Warn(ctx context.Context, id string, warned workload.Warned, reason string, msg *notify.Message) (bool, error)
	// Used records use of a workload now, as a person's through its UI
	// (a kernel its app says is executing).
	Used(ctx context.Context, id string)
}

// Settings are the teams' own lifecycle choices (the store).
type Settings interface {
	TeamSettings(ctx context.Context, t team.Name) (overrides.Settings, error)
}

// Progress says when a workload's run last made progress (its reports'
// step went forward; package runs): a run that progresses is not idle
// while its GPU waits on data. Zero: never.
type Progress interface {
	ProgressAt(ctx context.Context, workload string) (time.Time, error)
}

// Kernels says whether a notebook's Jupyter kernel is executing now, asked
// of its app (package interactive): a cell started from a tab since closed
// runs with no socket through the proxy, and only its app knows. false
// with an error: the app did not answer.
type Kernels interface {
	Busy(ctx context.Context, w workload.Workload) (bool, error)
}

// Options configure a Culler; Store, Templates, Stopper, Progress, Kernels
// and Settings are required.
type Options struct {
	Store     Store
	Templates Templates
	Stopper   Stopper
	Progress  Progress
	Kernels   Kernels
	// Settings give each team's idle timeouts and schedules, within the
	// templates' limits (package overrides).
	Settings Settings
	// Warning is how long before an idle stop the warning goes out
	// (default 10 minutes; at most half the idle timeout).
	Warning time.Duration
	Log     *slog.Logger     // default: slog.Default()
	Now     func() time.Time // default: time.Now
}

// Culler stops idle workloads; Run is one pass. What it warned of is kept
// on each workload's record (workload.Warned), not in the culler: a new
// leader carries on from it, warning no one twice and stopping nothing
// sooner than its warning said.
type Culler struct{ o Options }

// EventIdleWarning is the webhook event of an idle warning.
const EventIdleWarning = "workload.idle-warning"

// warningPrefix starts the reason of a workload warned as idle (any use
// withdraws it); sleepPrefix that of one its off-hours will stop (only the
// stop ends it).
const (
	warningPrefix = "idle: "
	sleepPrefix   = "off-hours: "
)

// New returns a Culler, complete.
func New(o Options) (*Culler, error) {
	if o.Store == nil || o.Templates == nil || o.Stopper == nil || o.Progress == nil || o.Kernels == nil || o.Settings == nil {
		return nil, errors.New("cull.New: Store, Templates, Stopper, Progress, Kernels and Settings are required")
	}
	if o.Warning <= 0 {
		o.Warning = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		return nil, errors.New("cull: Now (the server's clock) is required")
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
// idle window (now − timeout to now), and noGPU says the workload has no
// GPUs (a CPU-only launch: people's use and its progress speak); person is
// the last use by a person, progress the last time its run's reports went
// forward (a training job whose GPU waits on data is not idle).
func Decide(now time.Time, timeout time.Duration, runningSince time.Time, noGPU bool, gpu telemetry.Activity, person, progress time.Time) Verdict {
	from := runningSince
	for _, t := range []time.Time{gpu.LastActive, person, progress} {
		if t.After(from) {
			from = t
		}
	}
	v := Verdict{QuietFor: now.Sub(from), QuietFrom: from}
	switch {
	case v.QuietFor < timeout:
		v.Reason = fmt.Sprintf("in use within its idle timeout of %s", timeout)
	case noGPU:
		v.Stop = true
		v.Reason = fmt.Sprintf("stopped at %s by the idle culler: nobody used it (no page opened, no change, no kernel running or message on its sockets) and it reported no progress for %s, its template's idle timeout; start it again to resume (its volumes are kept)",
			now.UTC().Format(time.RFC3339), timeout)
	case gpu.First.IsZero() || gpu.First.After(now.Add(-timeout).Add(Freshness)) || gpu.Last.Before(now.Add(-Freshness)):
		v.Reason = "its GPUs' samples do not cover the idle window: not known to be idle"
	default:
		v.Stop = true
		v.Reason = fmt.Sprintf("stopped at %s by the idle culler: its GPUs were idle (utilization ≤ 1 %%), it reported no progress and nobody used it for %s, its template's idle timeout; start it again to resume (its volumes are kept)",
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
	settings := map[string]overrides.Settings{} // by team, read once a pass
	for _, w := range running {
		v, err := c.o.Templates.Get(ctx, w.Template, w.TemplateVersion)
		if err != nil {
			errs = append(errs, fmt.Errorf("workload %s: template: %w", w.ID, err))
			continue
		}
		set, ok := settings[w.Team.String()]
		if !ok {
			if set, err = c.o.Settings.TeamSettings(ctx, w.Team); err != nil {
				errs = append(errs, err)
				continue
			}
			settings[w.Team.String()] = set
		}
		lc := set.Effective(v.Template) // the template's, or the team's choice within its limits
		since := w.RunningSince         // when its current run began
		if since.IsZero() {
			since = w.UpdatedAt
		}
		if why, sleep := offHours(lc.Sleep, now, since); sleep {
			if c.stop(ctx, w, why, nil, &n, &errs) { // a schedule's stop, whatever the use
				continue
			}
		}
		warned := w.Warned // what it was warned of, by this leader or one before
		if at, sched, soon := sleepsSoon(lc.Sleep, now, since, c.o.Warning); soon && !warned.SleepAt.Equal(at) {
			next := warned
			next.SleepAt = at
			if c.warn(ctx, w, next, at, fmt.Sprintf("%sit will be stopped at %s for its off-hours (%s); start it again then if it is still needed (its volumes are kept)",
				sleepPrefix, at.UTC().Format(time.RFC3339), sched), &errs) {
				warned = next
			}
		}
		timeout, err := time.ParseDuration(lc.IdleTimeout)
		if err != nil || timeout <= 0 {
			continue // no idle timeout (validated with the template)
		}
		warn := min(c.o.Warning, timeout/2)
		// From before the warning's window too, so that the GPU use a
		// warning counted from is still seen when the stop comes.
		noGPU := w.GPUCount == 0
		var gpu telemetry.Activity
		if !noGPU {
			if gpu, err = c.o.Store.GPUActivity(ctx, w.ID, now.Add(-timeout-warn)); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		person, err := c.o.Store.WorkloadActivity(ctx, w.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		progress, err := c.o.Progress.ProgressAt(ctx, w.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Quiet for the timeout less the warning: warn now.
		early := Decide(now, timeout-warn, since, noGPU, gpu, person, progress)
		if early.Stop && w.Kind == template.Notebook {
			// About to be warned or stopped: a kernel executing (a cell
			// left running with no tab open) is use, recorded as such.
			if c.kernelBusy(ctx, w) {
				c.o.Stopper.Used(ctx, w.ID)
				early.Stop = false
			}
		}
		if !early.Stop {
			c.clear(ctx, w, warned, &errs)
			continue
		}
		// The same quiet stretch unless something was used since it began
		// (GPU use that slid out of the window only moves it earlier).
		if warned.QuietFrom.IsZero() || early.QuietFrom.After(warned.QuietFrom) {
			next := warned
			next.QuietFrom, next.StopAt = early.QuietFrom, now.Add(warn)
			c.warn(ctx, w, next, next.StopAt, fmt.Sprintf("%sits GPUs and its users have been quiet since %s; it will be stopped at %s unless used (POST /api/v1/workloads/%s/keepalive keeps it)",
				warningPrefix, early.QuietFrom.UTC().Format(time.RFC3339), next.StopAt.UTC().Format(time.RFC3339), w.ID), &errs)
			continue
		}
		verdict := Decide(now, timeout, since, noGPU, gpu, person, progress)
		if verdict.Stop && !now.Before(warned.StopAt) {
			c.stop(ctx, w, verdict.Reason, &person, &n, &errs)
		}
	}
	return n, errors.Join(errs...)
}

// kernelBusy says whether a notebook's app says a kernel is executing. It
// is asked only of a notebook about to be warned or stopped, one question
// a pass bounded in time (interactive.Kernels: 2 s); an app that does not
// answer says nothing, and its notebook is judged on the rest.
func (c *Culler) kernelBusy(ctx context.Context, w workload.Workload) bool {
	busy, err := c.o.Kernels.Busy(ctx, w)
	if err != nil {
		c.o.Log.InfoContext(ctx, "a notebook's app did not say whether a kernel executes: judged on the rest", "workload_id", w.ID, "err", err)
	}
	return busy
}

// warn puts a warning on w — the reason, what it warned of (warned), and
// its webhook — in one transaction; false if it could not be written.
func (c *Culler) warn(ctx context.Context, w workload.Workload, warned workload.Warned, stopAt time.Time, reason string, errs *[]error) bool {
	m, err := notify.New(EventIdleWarning, fmt.Sprintf("%s (%s of %s, team %s): %s", w.Name, w.Template, w.Owner, w.Team, strings.TrimPrefix(strings.TrimPrefix(reason, warningPrefix), sleepPrefix)),
		map[string]any{"workload": w.ID, "team": w.Team.String(), "owner": w.Owner, "template": w.Template, "stopAt": stopAt.UTC().Format(time.RFC3339),
			"keepAlive": "/api/v1/workloads/" + w.ID + "/keepalive"}, c.o.Now())
	if err != nil {
		*errs = append(*errs, fmt.Errorf("workload %s: warning webhook: %w", w.ID, err))
		return false
	}
	did, err := c.o.Stopper.Warn(ctx, w.ID, warned, reason, &m)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("workload %s: warn: %w", w.ID, err))
		return false
	}
	if did {
		c.o.Log.Info("workload warned before a stop", "workload_id", w.ID, "stop_at", stopAt)
	}
	return true
}

// sleepsSoon says whether an off-hours window of schedule begins within
// warn of now for a workload running since runningSince, and when.
func sleepsSoon(schedule string, now, runningSince time.Time, warn time.Duration) (time.Time, string, bool) {
	if schedule == "" {
		return time.Time{}, "", false
	}
	s, err := offhours.Parse(schedule)
	if err != nil {
		return time.Time{}, "", false
	}
	if in, _, _ := s.Window(now); in {
		return time.Time{}, "", false
	}
	in, from, _ := s.Window(now.Add(warn))
	if !in || !runningSince.Before(from) {
		return time.Time{}, "", false
	}
	return from, s.String(), true
}

// clear withdraws an idle warning once the workload is used again (an
// off-hours warning stays: only the stop ends it).
func (c *Culler) clear(ctx context.Context, w workload.Workload, warned workload.Warned, errs *[]error) {
	if warned.QuietFrom.IsZero() && !strings.HasPrefix(w.Reason, warningPrefix) {
		return
	}
	reason := w.Reason
	if strings.HasPrefix(reason, warningPrefix) {
		reason = ""
	}
	if _, err := c.o.Stopper.Warn(ctx, w.ID, workload.Warned{SleepAt: warned.SleepAt}, reason, nil); err != nil {
		*errs = append(*errs, fmt.Errorf("workload %s: clear warning: %w", w.ID, err))
	}
}

// stop stops w as idle with why, counting it or its error; false when it
// could not be stopped for an error.
func (c *Culler) stop(ctx context.Context, w workload.Workload, why string, lastUse *time.Time, n *int, errs *[]error) bool {
	_, err := c.o.Stopper.IdleStop(ctx, w.ID, why, lastUse)
	var conflict *fault.Conflict
	switch {
	case errors.As(err, &conflict):
		// Stopped or ended in the meantime.
	case err != nil:
		*errs = append(*errs, fmt.Errorf("workload %s: %w", w.ID, err))
		return false
	default:
		*n++
		c.o.Log.Info("idle workload stopped", "workload_id", w.ID, "template", w.Template, "why", why)
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
