// Package runs owns what a training run says of itself: the progress
// reports it posts to Gantry with its run token (step, total steps, epoch,
// named metrics such as loss or samples/s, the checkpoint it resumed from),
// their checks, and what they add up to — how far it is, how fast it goes
// and when it will finish — for the API, the CLI and the portal.
package runs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/template"
)

// Report is one progress report of a run.
type Report struct {
	Time       time.Time
	Step       int64
	TotalSteps int64   // 0: not said
	Epoch      float64 // NaN: not said
	Metrics    map[string]float64
	// ResumedFrom is the step of the checkpoint the run started from, on
	// its first report after a start (-1: not said).
	ResumedFrom int64
}

// Limits on what one request carries.
const (
	MaxReports = 1000
	MaxMetrics = 64
	// MaxMetricValue bounds a metric's magnitude, so that its series' sums
	// stay finite.
	MaxMetricValue = 1e100
	maxStep        = 1 << 50
	// maxSkew is how far in the future a report's time may be (clocks
	// differ between nodes and Gantry).
	maxSkew = 5 * time.Minute
)

var metricName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]{0,63}$`)

// MetricName says whether name can be a reported metric's.
func MetricName(name string) bool { return metricName.MatchString(name) }

// Check checks reports as a request carries them, in their order, and
// fills in the times left out (now); bad ones are a *fault.Invalid whose
// fields name each one (reports[2].metrics.loss).
func Check(rs []Report, now time.Time) error {
	var errs fault.List
	if len(rs) == 0 {
		errs.Addf("reports", "at least one report is required")
	}
	if len(rs) > MaxReports {
		errs.Addf("reports", "%d reports: at most %d in one request", len(rs), MaxReports)
		return errs.Err()
	}
	for i := range rs {
		r := &rs[i]
		at := fmt.Sprintf("reports[%d]", i)
		if r.Time.IsZero() {
			r.Time = now
		}
		switch {
		case r.Time.After(now.Add(maxSkew)):
			errs.Addf(at+".time", "%s is in the future", r.Time.UTC().Format(time.RFC3339))
		case i > 0 && r.Time.Before(rs[i-1].Time):
			errs.Addf(at+".time", "before the report ahead of it: send reports in the order they were made")
		}
		if r.Step < 0 || r.Step > maxStep {
			errs.Addf(at+".step", "%d: want 0 to %d", r.Step, int64(maxStep))
		}
		if r.TotalSteps < 0 || r.TotalSteps > maxStep {
			errs.Addf(at+".totalSteps", "%d: want 1 to %d", r.TotalSteps, int64(maxStep))
		} else if r.TotalSteps > 0 && r.Step > r.TotalSteps {
			errs.Addf(at+".totalSteps", "%d is below step %d", r.TotalSteps, r.Step)
		}
		if !math.IsNaN(r.Epoch) && (math.IsInf(r.Epoch, 0) || r.Epoch < 0) {
			errs.Addf(at+".epoch", "%v: want a number of 0 or more", r.Epoch)
		}
		if r.ResumedFrom < -1 || r.ResumedFrom > r.Step {
			errs.Addf(at+".resumedFrom", "%d: want a step from 0 to the report's step (%d)", r.ResumedFrom, r.Step)
		}
		if len(r.Metrics) > MaxMetrics {
			errs.Addf(at+".metrics", "%d metrics: at most %d", len(r.Metrics), MaxMetrics)
			continue
		}
		for _, name := range sortedKeys(r.Metrics) {
			v := r.Metrics[name]
			switch {
			case !metricName.MatchString(name):
				errs.Addf(at+".metrics", "%q: a metric's name is a letter or _ then up to 63 letters, digits or _ . / -", clip(name))
			case math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > MaxMetricValue:
				errs.Addf(at+".metrics."+name, "%v: want a finite number within ±1e100", v)
			}
		}
	}
	return errs.Err()
}

func clip(s string) string {
	if len(s) > 70 {
		return s[:70] + "…"
	}
	return s
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Summary is what a run's reports add up to.
type Summary struct {
	Workload   string
	Reports    int64
	Step       int64
	TotalSteps int64   // the latest said; 0: never said
	Epoch      float64 // the latest said; NaN: never said
	// Metrics are the latest value of each metric reported.
	Metrics    map[string]float64
	FirstAt    time.Time // the first report
	ReportedAt time.Time // the latest
	// RunFrom and RunFromStep are when and at which step the current run
	// began reporting: a report whose step went back, or that says it
	// resumed, starts a new one.
	RunFrom     time.Time
	RunFromStep int64
	ResumedFrom int64 // the checkpoint step the current run resumed from; -1: none said
	Restarts    int64 // runs after the first
	// Rate is the steps per second of the current run, smoothed over its
	// reports (0 until two reports of it are apart).
	Rate float64
	// AdvancedAt is the latest report whose step went past the one before
	// it in its run: when the run last made progress (zero: never).
	AdvancedAt time.Time
	// Watch is the early-stopping rules' state (Judge), by rule index.
	Watch map[string]Watch
	// Verdict is the rule that fired for the run, if one did; KeptBy and
	// KeptAt say who chose to keep it running (rules judge it no more).
	Verdict *Verdict
	KeptBy  string
	KeptAt  time.Time
}

// Clone is s with maps and a verdict of its own.
func (s Summary) Clone() Summary {
	s.Metrics = maps.Clone(s.Metrics)
	s.Watch = maps.Clone(s.Watch)
	if s.Verdict != nil {
		v := *s.Verdict
		s.Verdict = &v
	}
	return s
}

// rateWeight is the weight of the newest interval in the smoothed rate
// (an exponential moving average over the reports' intervals).
const rateWeight = 0.3

// Apply folds reports (checked, in order) into a run's summary.
func Apply(s Summary, rs []Report) Summary {
	if s.Metrics == nil {
		s.Metrics = map[string]float64{}
		s.Epoch = math.NaN()
		s.ResumedFrom = -1
	}
	for _, r := range rs {
		switch {
		case s.Reports == 0:
			s.FirstAt, s.RunFrom, s.RunFromStep = r.Time, r.Time, r.Step
		case r.Step < s.Step || r.ResumedFrom >= 0:
			// Started again: from a checkpoint, or from the beginning.
			s.RunFrom, s.RunFromStep, s.Rate = r.Time, r.Step, 0
			s.ResumedFrom = -1
			s.Restarts++
		default:
			if r.Step > s.Step && r.Time.After(s.AdvancedAt) {
				s.AdvancedAt = r.Time
			}
			if dt := r.Time.Sub(s.ReportedAt).Seconds(); dt > 0 && r.Step > s.Step {
				inst := float64(r.Step-s.Step) / dt
				if s.Rate == 0 {
					s.Rate = inst
				} else {
					s.Rate = rateWeight*inst + (1-rateWeight)*s.Rate
				}
			}
		}
		if r.ResumedFrom >= 0 {
			s.ResumedFrom = r.ResumedFrom
		}
		s.Reports++
		s.Step, s.ReportedAt = r.Step, r.Time
		if r.TotalSteps > 0 {
			s.TotalSteps = r.TotalSteps
		}
		if !math.IsNaN(r.Epoch) {
			s.Epoch = r.Epoch
		}
		for k, v := range r.Metrics {
			if _, known := s.Metrics[k]; known || len(s.Metrics) < MaxMetrics {
				s.Metrics[k] = v // the latest of at most MaxMetrics names
			}
		}
	}
	return s
}

// Fraction is how far the run is (0 to 1), and false without a total.
func (s Summary) Fraction() (float64, bool) {
	if s.TotalSteps <= 0 {
		return 0, false
	}
	return math.Min(1, float64(s.Step)/float64(s.TotalSteps)), true
}

// Remaining is the time left at the current rate, and false when it cannot
// be said (no total, or no rate yet).
func (s Summary) Remaining() (time.Duration, bool) {
	if s.TotalSteps <= 0 || s.Rate <= 0 {
		return 0, false
	}
	left := float64(s.TotalSteps - s.Step)
	if left <= 0 {
		return 0, true
	}
	return time.Duration(left / s.Rate * float64(time.Second)), true
}

// Append is one workload's reports (none: only its summary changes) and
// how they change its summary.
type Append struct {
	Workload string
	Reports  []Report
	Update   func(Summary) Summary
}

// Store keeps reports and summaries.
type Store interface {
	// AppendReports stores each append's reports and updates its
	// workload's summary with its Update (appends to one workload in their
	// order), all in one transaction; it returns the new summaries, one per
	// append.
	AppendReports(ctx context.Context, as []Append) ([]Summary, error)
	// RunSummary is a workload's summary; *fault.NotFound when it has
	// reported nothing.
	RunSummary(ctx context.Context, workload string) (Summary, error)
	// RunSummaries are the summaries of those of workloads that reported,
	// by workload.
	RunSummaries(ctx context.Context, workloads []string) (map[string]Summary, error)
	// RunReports are a workload's reports from since on, oldest first, at
	// most limit (the newest of them when there are more).
	RunReports(ctx context.Context, workload string, since time.Time, limit int) ([]Report, error)
	// DeleteRunsBefore deletes at most limit reports older than before
	// (summaries stay) and says how many.
	DeleteRunsBefore(ctx context.Context, before time.Time, limit int) (int64, error)
	RollupStore
}

// Workloads is what runs ask of the workloads they report for.
type Workloads interface {
	// Visible says whether the caller may read the workload
	// (*fault.NotFound otherwise, that does not leak another team's).
	Visible(ctx context.Context, id string) error
	// Manageable says whether the caller may stop and start it.
	Manageable(ctx context.Context, id string) error
	// ForRun is what taking its run's reports needs (read as Gantry: the
	// caller is the run).
	ForRun(ctx context.Context, id string) (RunInfo, error)
	// EarlierRuns are the ids of up to limit workloads of the same
	// template and team created before it, newest first (what the median
	// rule compares a run with).
	EarlierRuns(ctx context.Context, id string, limit int) ([]string, error)
	// StopForRule stops it as a rule decided (checkpoints and volumes
	// kept: starting it again resumes).
	StopForRule(ctx context.Context, id, reason string) error
	// Resume starts it again if it is stopped, as the caller.
	Resume(ctx context.Context, id string) error
}

// RunInfo is a workload as its run's reports need it.
type RunInfo struct {
	// Namespace is where its pods run: a run's token counts only from a
	// pod there (a pod elsewhere could carry its labels).
	Namespace string
	// Rules are its template's early stopping (nil: none), or its trial's
	// caps when Trial names the trial it is a run of: those no person
	// silences (Keep refuses).
	Rules *template.EarlyStopping
	Trial string
	Money Money
}

// Notifier queues a webhook (the store's outbox).
type Notifier interface {
	Notify(ctx context.Context, m notify.Message) error
}

// Options configure a Service; every field but Log is required.
type Options struct {
	Store     Store
	Workloads Workloads
	Notifier  Notifier
	Now       func() time.Time
	// RawRetention is how far back the series read every report
	// (telemetry's raw retention; default 48h): older windows read the
	// rollups.
	RawRetention time.Duration
	Log          *slog.Logger // default: slog.Default()
}

// Service takes reports, judges runs by their templates' early stopping,
// and answers progress.
type Service struct {
	o      Options
	commit *committer
	infos  infoCache
	pages  pageCache
	peers  peerCache
	// rollAfter is the run the last rollup pass ended at: the next
	// begins after it.
	rollMu    sync.Mutex
	rollAfter string
}

// New returns the service, complete.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Workloads == nil || o.Notifier == nil || o.Now == nil {
		return nil, errors.New("runs.New: Store, Workloads, Notifier and Now are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.RawRetention <= 0 {
		o.RawRetention = 48 * time.Hour
	}
	return &Service{o: o, commit: &committer{store: o.Store}, infos: newInfoCache(o.Now), pages: newPageCache(o.Now), peers: newPeerCache(o.Now)}, nil
}

// ErrNotTheRun refuses a report from anyone but the workload's own run.
var ErrNotTheRun = &fault.Forbidden{Reason: "only the workload's own run reports its progress, with the token Gantry gives it (the file GANTRY_RUN_TOKEN_FILE names)"}

// Webhook events of early stopping.
const (
	EventRunStopped = "workload.run-stopped" // a rule stopped the run
	EventRunFlagged = "workload.run-flagged" // a rule flagged it (action advise)
)

// Report takes a run's reports: the caller must be the run of workload id
// (its run token).
func (s *Service) Report(ctx context.Context, id string, rs []Report) (Summary, error) {
	caller, _ := identity.From(ctx)
	if caller.Via != identity.ViaRun || caller.Workload != id {
		return Summary{}, ErrNotTheRun
	}
	if err := Check(rs, s.o.Now()); err != nil {
		return Summary{}, err
	}
	info, err := s.infos.get(ctx, id, s.o.Workloads.ForRun)
	if err != nil {
		return Summary{}, err
	}
	if ns, _, _ := strings.Cut(caller.Pod, "/"); ns != info.Namespace {
		return Summary{}, ErrNotTheRun // a pod outside the workload's namespace
	}
	rules, money := info.Rules, info.Money
	peers, err := s.peers.get(ctx, id, rules, s.earlier)
	if err != nil {
		// The median rules wait for their comparison; the report is taken.
		s.o.Log.WarnContext(ctx, "early stopping: the template's earlier runs were not read", "workload_id", id, "err", err)
	}
	var fired *Verdict
	sum, err := s.commit.append(ctx, Append{Workload: id, Reports: rs, Update: func(old Summary) Summary {
		old.Workload = id
		out := Apply(old, rs)
		out, fired = Judge(out, rs, rules, money, peers)
		return out
	}})
	if err == nil {
		s.pages.put([]string{id}, map[string]Summary{id: sum})
	}
	if err == nil && fired != nil {
		s.act(ctx, id, *fired)
	}
	return sum, err
}

// earlier reads the template's earlier runs of workload id as the median
// rules compare with them: the latest MedianRuns of them that reported,
// each its latest MaxPeerReports reports.
func (s *Service) earlier(ctx context.Context, id string, rules *template.EarlyStopping) (Peers, error) {
	ids, err := s.o.Workloads.EarlierRuns(ctx, id, 4*MedianRuns)
	if err != nil {
		return nil, err
	}
	peers, read := Peers{}, 0
	for _, other := range ids {
		if read == MedianRuns {
			break
		}
		rs, err := s.o.Store.RunReports(ctx, other, time.Time{}, MaxPeerReports)
		if err != nil {
			return nil, err
		}
		counted := false // a run counts when it reported a metric a rule compares
		for _, rule := range rules.Rules {
			if md := rule.Median; md != nil {
				if c := CurveOf(rs, md.Metric, md.Mode); len(c.Steps) > 0 {
					k := PeerKey(md.Metric, md.Mode)
					peers[k] = append(peers[k], c)
					counted = true
				}
			}
		}
		if counted {
			read++
		}
	}
	return peers, nil
}

// How many earlier runs the median rules compare with, and how many of
// each one's reports (its latest) are read.
const (
	MedianRuns     = 20
	MaxPeerReports = 5000
)

// act carries out a verdict: stop the workload (action stop), and tell its
// people (a webhook). A failure is logged: the report was taken.
func (s *Service) act(ctx context.Context, id string, v Verdict) {
	event, text := EventRunFlagged, "early stopping flagged the run ("+v.Rule+"): "+v.Reason+"; it goes on (POST /api/v1/workloads/"+id+"/progress/keep silences the rules)"
	if v.Action == template.StopRun {
		event = EventRunStopped
		text = "stopped by early stopping (" + v.Rule + "): " + v.Reason + "; its checkpoints are kept: POST /api/v1/workloads/" + id + "/progress/keep starts it again and keeps it running"
		if err := s.o.Workloads.StopForRule(ctx, id, text); err != nil {
			s.o.Log.WarnContext(ctx, "early stopping: the workload was not stopped", "workload_id", id, "rule", v.Rule, "err", err)
		}
	}
	m, err := notify.New(event, "workload "+id+": "+text, map[string]any{"workload": id, "rule": v.Rule, "action": v.Action, "reason": v.Reason}, s.o.Now())
	if err == nil {
		err = s.o.Notifier.Notify(ctx, m)
	}
	if err != nil {
		s.o.Log.WarnContext(ctx, "early stopping: webhook not queued", "workload_id", id, "err", err)
	}
	s.o.Log.InfoContext(ctx, "early stopping", "workload_id", id, "rule", v.Rule, "action", v.Action, "reason", v.Reason)
}

// Keep records that the caller chose to keep the workload's run going:
// its rules judge it no more; one they stopped is started again.
func (s *Service) Keep(ctx context.Context, id string) (Summary, error) {
	if err := s.o.Workloads.Manageable(ctx, id); err != nil {
		return Summary{}, err
	}
	info, err := s.infos.get(ctx, id, s.o.Workloads.ForRun)
	if err != nil {
		return Summary{}, err
	}
	if info.Trial != "" {
		return Summary{}, &fault.Conflict{Kind: "workload", Name: id, Reason: "is a run of trial " + info.Trial +
			": its caps are what the trial measures within, and are not silenced; start another trial, or launch the template"}
	}
	caller, _ := identity.From(ctx)
	sum, err := s.commit.append(ctx, Append{Workload: id, Update: func(old Summary) Summary {
		old.Workload = id
		old.KeptBy, old.KeptAt = caller.String(), s.o.Now()
		return old
	}})
	if err != nil {
		return sum, err
	}
	s.pages.put([]string{id}, map[string]Summary{id: sum})
	if sum.Verdict != nil && sum.Verdict.Action == template.StopRun {
		if err := s.o.Workloads.Resume(ctx, id); err != nil {
			return sum, fmt.Errorf("kept, but not started again: %w", err)
		}
	}
	return sum, nil
}

// Summaries are the progress summaries of workloads the caller has already
// been allowed to read (a page of them), by workload; those that reported
// nothing are absent. They are at most pageTTL old: pages are read far
// more often than runs report, and most of their workloads report nothing.
func (s *Service) Summaries(ctx context.Context, ids []string) (map[string]Summary, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out, missed := s.pages.get(ids)
	if len(missed) == 0 {
		return out, nil
	}
	read, err := s.o.Store.RunSummaries(ctx, missed)
	if err != nil {
		return nil, err
	}
	s.pages.put(missed, read)
	for id, sum := range read {
		out[id] = sum
	}
	return out, nil
}

// ProgressAt is when workload id's run last made progress (a report
// whose step went forward), zero when it never reported: read as Gantry,
// for the idle culler.
func (s *Service) ProgressAt(ctx context.Context, id string) (time.Time, error) {
	sum, err := s.o.Store.RunSummary(ctx, id)
	var nf *fault.NotFound
	if errors.As(err, &nf) {
		return time.Time{}, nil
	}
	return sum.AdvancedAt, err
}

// Advised is what advice reads of workload id's run, with no caller's
// permission asked (advice checks its reader's): when its progress last
// went forward (zero: never), and the verdict of a rule whose action is
// advise while its people have not chosen to keep it going (nil: none).
func (s *Service) Advised(ctx context.Context, id string) (progressAt time.Time, stalled *Verdict, err error) {
	sum, err := s.o.Store.RunSummary(ctx, id)
	var nf *fault.NotFound
	if errors.As(err, &nf) {
		return time.Time{}, nil, nil
	}
	if err != nil {
		return time.Time{}, nil, err
	}
	if v := sum.Verdict; v != nil && v.Action == template.AdviseRun && sum.KeptAt.IsZero() {
		stalled = v
	}
	return sum.AdvancedAt, stalled, nil
}

// ResumedSince says where the run of workload id that began reporting after
// since resumed: the checkpoint step it said (-1: it did not say). Waiting
// is true while the workload has reported before but no run of it began
// after since (package quarantine waits a little for it).
func (s *Service) ResumedSince(ctx context.Context, id string, since time.Time) (from int64, waiting bool, err error) {
	sum, err := s.o.Store.RunSummary(ctx, id)
	var nf *fault.NotFound
	if errors.As(err, &nf) {
		return -1, false, nil
	}
	if err != nil {
		return -1, false, err
	}
	if !sum.RunFrom.After(since) {
		return -1, true, nil
	}
	return sum.ResumedFrom, false, nil
}

// Prune deletes the reports and the rollups older than retention, in
// batches of batch rows (no long write lock), until none are left or ctx
// ends.
func (s *Service) Prune(ctx context.Context, retention time.Duration, batch int) (int64, error) {
	before := s.o.Now().Add(-retention)
	var total int64
	for _, del := range []func(context.Context, time.Time, int) (int64, error){s.o.Store.DeleteRunsBefore, s.o.Store.DeleteRunRollupsBefore} {
		for {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			n, err := del(ctx, before, batch)
			total += n
			if err != nil {
				return total, err
			}
			if n == 0 {
				break
			}
		}
	}
	return total, nil
}

// Progress is a workload's progress for its readers: its summary (false
// when it has reported nothing) and its reports from since on (at most
// limit, the newest).
func (s *Service) Progress(ctx context.Context, id string, since time.Time, limit int) (Summary, []Report, bool, error) {
	if err := s.o.Workloads.Visible(ctx, id); err != nil {
		return Summary{}, nil, false, err
	}
	sum, err := s.o.Store.RunSummary(ctx, id)
	var nf *fault.NotFound
	if errors.As(err, &nf) {
		return Summary{}, nil, false, nil
	}
	if err != nil {
		return Summary{}, nil, false, err
	}
	rs, err := s.o.Store.RunReports(ctx, id, since, limit)
	if err != nil {
		return Summary{}, nil, false, err
	}
	return sum, rs, true, nil
}
