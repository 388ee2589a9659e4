package advice

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/workload"
)

// Service advises on live workloads from their series, recomputing as
// samples arrive (cached for a minute per workload).
type Service struct {
	source    telemetry.Source
	classes   *gpu.Catalog
	templates Templates
	workloads Workloads
	live      *Live // the online rules' decisions (nil: none)
	// health says why GPUs a workload runs on are unhealthy (none: nil).
	health func(ctx context.Context, workloadID string) ([]string, error)
	run    func(ctx context.Context, workloadID string) (Run, error)
	used   func(ctx context.Context, workloadID string) (time.Time, error)
	now    func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	report Report
	at     time.Time
}

// cacheFor is how long a report serves: samples arrive every 10 s, advice
// rests on hours of them.
const cacheFor = time.Minute

// Lookback is the most of a workload's life advice looks at.
const Lookback = 24 * time.Hour

// Templates finds a template version (the catalog).
type Templates interface {
	Get(ctx context.Context, name string, version int) (catalog.Version, error)
}

// Options are what a Service is made of. Source, Classes, Templates,
// Workloads and Now are required.
type Options struct {
	Source    telemetry.Source
	Classes   *gpu.Catalog
	Templates Templates
	Workloads Workloads
	// Live, when set, adds the online rules' decisions as findings.
	Live *Live
	// Health says why GPUs a workload runs on are unhealthy (nil: not
	// known).
	Health func(ctx context.Context, workloadID string) ([]string, error)
	// Run says what a workload's training run reported and how its
	// early-stopping rules judged it (package runs; nil: not known).
	Run func(ctx context.Context, workloadID string) (Run, error)
	// Used says when a person last used a workload through its UI (the
	// workloads' store, as the idle culler reads it; nil: not known).
	Used func(ctx context.Context, workloadID string) (time.Time, error)
	Now  func() time.Time
}

// Run is what advice reads of a workload's training run.
type Run struct {
	// ProgressAt is when its progress reports last went forward (zero:
	// never).
	ProgressAt time.Time
	// Stalled is the early-stopping verdict of a rule whose action is
	// advise, while its people have not chosen to keep the run going
	// (nil: none): a stalled-run finding.
	Stalled *Stalled
}

// Stalled is a rule's verdict that a run stalled.
type Stalled struct {
	Rule   string    // plateau, median, target, …
	Reason string    // the rule and its numbers, with the money
	At     time.Time // the report that fired it
}

// New builds the service.
func New(o Options) (*Service, error) {
	if o.Source == nil || o.Classes == nil || o.Templates == nil || o.Workloads == nil || o.Now == nil {
		return nil, fmt.Errorf("advice: Source, Classes, Templates, Workloads and Now are required")
	}
	return &Service{source: o.Source, classes: o.Classes, templates: o.Templates, workloads: o.Workloads, live: o.Live, health: o.Health, run: o.Run, used: o.Used, now: o.Now, cache: map[string]cached{}}, nil
}

// ForWorkload advises on workload id as its reader sees it: the caller's
// right to read it is checked here (a workload they may not read is a
// *fault.NotFound), not left to the handler.
func (s *Service) ForWorkload(ctx context.Context, id string) (workload.Workload, Report, error) {
	w, err := s.workloads.Get(ctx, id)
	if err != nil {
		return w, Report{}, err
	}
	r, err := s.Workload(ctx, w, s.workloads.Namespace(w))
	return w, r, err
}

// Report is the advice on one workload.
type Report struct {
	Workload string
	From, To time.Time
	Step     time.Duration
	Findings []Finding
}

// Workload advises on w (whose namespace is ns): its series since it was
// created (at most Lookback), at 10 s steps up to six hours and one-minute
// steps beyond.
func (s *Service) Workload(ctx context.Context, w workload.Workload, ns string) (Report, error) {
	now := s.now().UTC()
	s.mu.Lock()
	if c, ok := s.cache[w.ID]; ok && now.Sub(c.at) < cacheFor {
		s.mu.Unlock()
		return c.report, nil
	}
	s.mu.Unlock()
	var run Run
	if s.run != nil {
		var err error
		if run, err = s.run(ctx, w.ID); err != nil {
			return Report{}, err
		}
	}
	class, ok := s.classes.Get(w.GPUClass)
	if !ok {
		// No GPU class (a CPU workload), or one the catalog no longer has:
		// nothing to judge its GPUs against; its run's verdict stands.
		fs := []Finding{}
		if f, ok := stalledFinding(w.ID, run.Stalled, now); ok {
			fs = append(fs, f)
		}
		return Report{Workload: w.ID, From: now, To: now, Step: time.Minute, Findings: fs}, nil
	}
	from := w.CreatedAt.UTC()
	if now.Sub(from) > Lookback {
		from = now.Add(-Lookback)
	}
	step := 10 * time.Second
	if now.Sub(from) > 6*time.Hour {
		step = time.Minute
	}
	from = from.Truncate(step)
	to := now.Truncate(step).Add(step)
	series, err := s.source.Series(ctx, telemetry.Query{Target: telemetry.Target{ID: w.ID, Namespace: ns, Name: w.Name}, From: from, To: to, Step: step})
	if err != nil {
		return Report{}, err
	}
	in := Input{Workload: w.ID, Class: class, Count: w.GPUCount, Profile: w.MIGProfile, Series: series, From: from, To: to, Step: step, Template: w.Template}
	if v, err := s.templates.Get(ctx, w.Template, w.TemplateVersion); err == nil {
		in.Allowed = v.Template.Spec.GPU.MIGProfiles
	}
	if s.health != nil {
		if in.Unhealthy, err = s.health(ctx, w.ID); err != nil {
			return Report{}, err
		}
	}
	in.ProgressAt, in.Stalled = run.ProgressAt, run.Stalled
	if s.used != nil {
		if in.UsedAt, err = s.used(ctx, w.ID); err != nil {
			return Report{}, err
		}
	}
	fs := Advise(in)
	if s.live != nil {
		fs = withDecisions(fs, s.live.Decisions(w.ID), in)
	}
	r := Report{Workload: w.ID, From: from, To: to, Step: step, Findings: fs}
	s.mu.Lock()
	if len(s.cache) > 10000 {
		s.cache = map[string]cached{}
	}
	s.cache[w.ID] = cached{report: r, at: now}
	s.mu.Unlock()
	return r, nil
}

// SeriesURL is the metrics endpoint that shows a finding's evidence.
func SeriesURL(workloadID string, f Finding) string {
	q := url.Values{}
	q.Set("from", f.From.UTC().Format(time.RFC3339))
	q.Set("to", f.To.UTC().Format(time.RFC3339))
	if len(f.Series) > 0 {
		q.Set("series", strings.Join(f.Series, ","))
	}
	return "/api/v1/workloads/" + url.PathEscape(workloadID) + "/metrics?" + q.Encode()
}

// withDecisions adds what the online rules decided and the findings do not
// already say: a stop of an idle GPU, a smaller profile.
func withDecisions(fs []Finding, ds []Decision, in Input) []Finding {
	has := map[string]bool{}
	for _, f := range fs {
		has[f.Kind] = true
	}
	price := in.Class.Price.OnDemand
	if in.Spot && in.Class.Price.Spot > 0 {
		price = in.Class.Price.Spot
	}
	cur := Profile{Share: 1, MemGiB: float64(in.Class.MemoryGiB)}
	byName := map[string]Profile{}
	for _, p := range Profiles(in.Class) {
		byName[p.Name] = p
		if p.Name == in.Profile {
			cur = p
		}
	}
	count := float64(max(1, in.Count))
	for _, d := range ds {
		at := time.Unix(d.T, 0).UTC()
		switch {
		case d.Action == Stop && !has[KindIdle] && !in.progressed() && !in.used():
			has[KindIdle] = true
			fs = append(fs, Finding{Kind: KindIdle, Severity: "warning", From: in.From, To: in.To,
				Evidence: []Evidence{{Metric: telemetry.GPUUtil.String(), Stat: "idle since (Unix s)", Value: float64(d.T)}},
				Reason: fmt.Sprintf("the online idle rule stopped it at %s: idle (utilization ≤ %.0f %%) for %s while fewer than %.0f %% of its template's pods were active, or for %s (docs/advice.md)",
					at.Format(time.RFC3339), DefaultRules.IdleDuty, time.Duration(DefaultRules.QuietIdle)*time.Second, 100*DefaultRules.QuietFleet, time.Duration(DefaultRules.BusyIdle)*time.Second),
				Action: "stop the workload, or set an idle timeout in its template's lifecycle", Confidence: 0.7,
				MonthlyUSD: math.Round(cur.Share*count*price*hoursPerMonth*100) / 100, Series: []string{telemetry.GPUUtil.String(), telemetry.SMActive.String()}})
		case d.Action == Resize && !has[KindOverProvisioned] && !has[KindNearOOM]:
			p, ok := byName[d.Profile]
			if !ok || p.Share >= cur.Share || !slices.Contains(in.Allowed, p.Name) {
				continue
			}
			has[KindOverProvisioned] = true
			if d.Lull {
				fs = append(fs, Finding{Kind: KindOverProvisioned, Severity: "info", From: in.From, To: in.To,
					Evidence: []Evidence{{Metric: telemetry.FBUsed.String(), Stat: "fits in (GiB)", Value: p.MemGiB}, {Metric: telemetry.GPUUtil.String(), Stat: "share of time its fleet was quiet", Value: math.Round(d.LullShare*1000) / 1000}},
					Reason: fmt.Sprintf("its template's fleet is in its quiet hours (fewer than %.0f %% of its samples active over %s) since %s, and its peak memory × %.2f fits within %.0f %% of %s's %.0f GiB (docs/advice.md)",
						100*DefaultRules.LullFleet, time.Duration(DefaultRules.LullWindow)*time.Second, at.Format(time.RFC3339), DefaultRules.LullHeadroom, 100*DefaultRules.Fill, p.Name, p.MemGiB),
					Action: "run on " + p.Name + " during the fleet's quiet hours (a smaller replica set or a schedule), the whole GPU when it wakes", Confidence: 0.5,
					MonthlyUSD: math.Round((cur.Share-p.Share)*count*price*hoursPerMonth*d.LullShare*100) / 100, Series: []string{telemetry.FBUsed.String(), telemetry.GPUUtil.String()}})
				continue
			}
			fs = append(fs, Finding{Kind: KindOverProvisioned, Severity: "warning", From: in.From, To: in.To,
				Evidence: []Evidence{{Metric: telemetry.FBUsed.String(), Stat: "fits in (GiB)", Value: p.MemGiB}},
				Reason: fmt.Sprintf("the online right-sizing rule moved it to %s at %s: its peak memory × %.1f fits within %.0f %% of %.0f GiB and has not passed %.0f %% of it since (docs/advice.md)",
					p.Name, at.Format(time.RFC3339), DefaultRules.Headroom, 100*DefaultRules.Fill, p.MemGiB, 100*DefaultRules.MoveUp),
				Action: "relaunch on " + p.Name, Confidence: 0.6, Recommend: &Choice{Profile: p.Name, Count: int(count)},
				MonthlyUSD: math.Round((cur.Share-p.Share)*count*price*hoursPerMonth*100) / 100, Series: []string{telemetry.FBUsed.String()}})
		}
	}
	return fs
}
