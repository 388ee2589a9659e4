// Package trial owns trials: short runs of one template on several GPU
// classes and GPU counts, launched side by side before a long run, each
// capped in steps, time and dollars and charged to the team like any
// launch. From the runs' own progress reports (package runs) it measures
// each choice — step time, throughput, scaling across GPU counts — and
// extrapolates the full run's time and cost, naming the cheapest choice
// that meets a deadline.
package trial

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// Spec is what a trial asks for.
type Spec struct {
	Template string         `json:"template"`
	Params   map[string]any `json:"params,omitempty"`
	Classes  []string       `json:"classes"`
	GPUs     []int          `json:"gpus"`
	// MIGProfiles are MIG slices to try on each class beside its whole
	// GPUs: one run of one instance per class and profile (each class
	// must offer each profile, and the template allow it).
	MIGProfiles []string `json:"migProfiles,omitempty"`
	// Steps caps each run: Gantry stops it at a report of that step (and
	// passes GANTRY_TRIAL_STEPS, so that a script can end there itself).
	Steps int64 `json:"steps"`
	// MaxRuntime caps each run's time (its template's max runtime, if
	// shorter, holds); MaxCost, when set, its dollars.
	MaxRuntime time.Duration `json:"maxRuntime"`
	MaxCost    float64       `json:"maxCost,omitempty"`
	// FullSteps is the full run's steps, for extrapolating; 0: each run's
	// own reported total steps (which may differ by GPU count, as a
	// data-parallel script's do).
	FullSteps int64 `json:"fullSteps,omitempty"`
	// Deadline is how long the full run may take; 0: none.
	Deadline time.Duration `json:"deadline,omitempty"`
}

// Limits on a trial.
const (
	MaxChoices        = 12 // classes × (GPU counts + MIG profiles)
	MaxSteps          = 100000
	MaxFullSteps      = 1_000_000_000
	DefaultMaxRuntime = 30 * time.Minute
	MaxMaxRuntime     = 24 * time.Hour
)

// Run is one choice of a trial and the workload launched for it.
type Run struct {
	Class      string `json:"class"`
	GPUs       int    `json:"gpus"`
	MIGProfile string `json:"migProfile,omitempty"` // a slice of one GPU ("": GPUs whole GPUs)
	Workload   string `json:"workload,omitempty"`   // "": not launched
	Error      string `json:"error,omitempty"`      // why not
}

// Trial is a trial as recorded.
type Trial struct {
	ID        string
	Team      team.Name
	Owner     string
	Spec      Spec
	Runs      []Run
	CreatedAt time.Time
	// IdempotencyKey is the caller's key for this trial, if any, and
	// RequestHash the fingerprint of the request it came with.
	IdempotencyKey string
	RequestHash    string
}

// Store keeps trials.
type Store interface {
	// CreateTrial records a trial; *fault.Conflict when its owner used its
	// IdempotencyKey already.
	CreateTrial(ctx context.Context, t Trial) error
	// TrialByKey is the owner's trial started with key; *fault.NotFound
	// if there is none.
	TrialByKey(ctx context.Context, owner, key string) (Trial, error)
	// Trial is one; *fault.NotFound if there is none.
	Trial(ctx context.Context, id string) (Trial, error)
	// UpdateTrialRuns sets a trial's runs.
	UpdateTrialRuns(ctx context.Context, id string, rs []Run) error
	// ListTrials lists the teams' trials (every team's when teams is nil),
	// newest first, at most limit.
	ListTrials(ctx context.Context, teams []team.Name, limit int) ([]Trial, error)
}

// Workloads launches and reads the trial's runs.
type Workloads interface {
	// Check refuses what a launch would refuse before recording it, and
	// records nothing.
	Check(ctx context.Context, owner string, req workload.Request) (workload.Rendered, error)
	Create(ctx context.Context, owner string, req workload.Request) (workload.Workload, bool, error)
}

// Records reads the trial's workloads as Gantry (the caller may read the
// trial's team).
type Records interface {
	ListWorkloads(ctx context.Context, f workload.Filter) ([]workload.Workload, error)
}

// Reports reads what the runs reported, as Gantry.
type Reports interface {
	RunReports(ctx context.Context, workload string, since time.Time, limit int) ([]runs.Report, error)
	RunSummaries(ctx context.Context, workloads []string) (map[string]runs.Summary, error)
}

// Authorizer says what the caller may do in a team.
type Authorizer interface {
	Allowed(id identity.Identity, t team.Name, p access.Permission) bool
	Teams(id identity.Identity, p access.Permission) (all bool, teams []string)
}

// Options configure a Service; every field but Log is required.
type Options struct {
	Store      Store
	Workloads  Workloads
	Records    Records
	Reports    Reports
	Authorizer Authorizer
	Now        func() time.Time
	NewID      func() string
	Log        *slog.Logger
}

// Service starts trials and measures them.
type Service struct{ o Options }

// New returns the service, complete.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Workloads == nil || o.Records == nil || o.Reports == nil || o.Authorizer == nil || o.Now == nil || o.NewID == nil {
		return nil, errors.New("trial.New: Store, Workloads, Records, Reports, Authorizer, Now and NewID are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Service{o: o}, nil
}

// check checks a spec's own fields (the launches check the rest).
func (sp *Spec) check(t team.Name) error {
	var errs fault.List
	if t == "" {
		errs.Addf("team", "is required")
	}
	if !template.ValidName(sp.Template) {
		errs.Addf("template", "%q is not a template name", clip(sp.Template))
	}
	if len(sp.Classes) == 0 {
		errs.Addf("classes", "name at least one GPU class")
	}
	if len(sp.GPUs) == 0 {
		sp.GPUs = []int{1}
	}
	for i, c := range sp.Classes {
		if slices.Contains(sp.Classes[:i], c) {
			errs.Addf(fmt.Sprintf("classes[%d]", i), "%q is named twice", clip(c))
		}
	}
	for i, n := range sp.GPUs {
		if n < 1 || n > 64 {
			errs.Addf(fmt.Sprintf("gpus[%d]", i), "%d: want 1 to 64 GPUs", n)
		}
		if slices.Contains(sp.GPUs[:i], n) {
			errs.Addf(fmt.Sprintf("gpus[%d]", i), "%d is named twice", n)
		}
	}
	for i, p := range sp.MIGProfiles {
		if p == "" || p == template.NoMIG {
			errs.Addf(fmt.Sprintf("migProfiles[%d]", i), "%q: name a MIG profile (the whole GPUs are the gpus' runs)", clip(p))
		}
		if slices.Contains(sp.MIGProfiles[:i], p) {
			errs.Addf(fmt.Sprintf("migProfiles[%d]", i), "%q is named twice", clip(p))
		}
	}
	if n := len(sp.Classes) * (len(sp.GPUs) + len(sp.MIGProfiles)); n > MaxChoices {
		per := fmt.Sprintf("%d GPU counts", len(sp.GPUs))
		if len(sp.MIGProfiles) > 0 {
			per = fmt.Sprintf("(%d GPU counts + %d MIG profiles)", len(sp.GPUs), len(sp.MIGProfiles))
		}
		errs.Addf("classes", "%d classes × %s are %d runs: a trial has at most %d", len(sp.Classes), per, n, MaxChoices)
	}
	if sp.Steps < 1 || sp.Steps > MaxSteps {
		errs.Addf("steps", "%d: want 1 to %d steps a run", sp.Steps, MaxSteps)
	}
	if sp.MaxRuntime == 0 {
		sp.MaxRuntime = DefaultMaxRuntime
	}
	if sp.MaxRuntime < time.Minute || sp.MaxRuntime > MaxMaxRuntime {
		errs.Addf("maxRuntime", "%s: want 1m to %s a run", sp.MaxRuntime, MaxMaxRuntime)
	}
	if sp.MaxCost < 0 {
		errs.Addf("maxCost", "%v: want dollars above 0, or none", sp.MaxCost)
	}
	if sp.FullSteps < 0 || sp.FullSteps > MaxFullSteps {
		errs.Addf("fullSteps", "%d: want 0 (each run's reported total) to %d", sp.FullSteps, MaxFullSteps)
	}
	if sp.FullSteps > 0 && sp.FullSteps < sp.Steps {
		errs.Addf("fullSteps", "%d is fewer than the trial's %d steps a run", sp.FullSteps, sp.Steps)
	}
	if sp.Deadline < 0 {
		errs.Addf("deadline", "%s: want a duration, or none", sp.Deadline)
	}
	return errs.Err()
}

// Create checks a trial, then launches its runs: one per class and GPU
// count, and one per class and MIG profile, each as the caller, charged
// to the team like any launch. Every run is checked first as a launch would be (the team, the template, each
// class, count and profile), so that a trial that would be refused launches
// nothing. A launch refused after that (a budget spent meanwhile) is
// recorded on its run, and the others go on.
//
// With an idempotency key, a repeat of the request by the same person
// answers with the trial the first one started, and replayed true.
func (s *Service) Create(ctx context.Context, owner string, t team.Name, sp Spec, key string) (tr Trial, replayed bool, err error) {
	if err := sp.check(t); err != nil {
		return Trial{}, false, err
	}
	hash := fingerprint(t, sp)
	if key != "" {
		// Checked before a replay is answered too: a key does not let a
		// caller who lost the team read its trial.
		caller, ok := identity.From(ctx)
		if !ok || !s.o.Authorizer.Allowed(caller, t, access.WorkloadsLaunch) {
			return Trial{}, false, &fault.Forbidden{Reason: fmt.Sprintf("you may not launch workloads in team %q", t)}
		}
		tr, err := s.byKey(ctx, owner, key, hash)
		var nf *fault.NotFound
		switch {
		case err == nil:
			return tr, true, nil
		case !errors.As(err, &nf):
			return Trial{}, false, err
		}
	}
	tr, err = s.create(ctx, owner, t, sp, key, hash)
	var c *fault.Conflict
	if key != "" && errors.As(err, &c) && c.Kind == "trial" {
		// Started concurrently under the same key: answer with that one.
		if tr, err := s.byKey(ctx, owner, key, hash); err == nil {
			return tr, true, nil
		}
	}
	return tr, false, err
}

// byKey is the owner's trial of key, if the request is the same.
func (s *Service) byKey(ctx context.Context, owner, key, hash string) (Trial, error) {
	tr, err := s.o.Store.TrialByKey(ctx, owner, key)
	if err != nil {
		return tr, err
	}
	if tr.RequestHash != hash {
		return Trial{}, &fault.Conflict{Kind: "Idempotency-Key", Name: key, Reason: "was used for a different trial request"}
	}
	return tr, nil
}

// fingerprint identifies what a trial request asks for (its defaults
// filled), so that a repeat under the same key can be told from another.
func fingerprint(t team.Name, sp Spec) string {
	b, _ := json.Marshal([]any{t, sp})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (s *Service) create(ctx context.Context, owner string, t team.Name, sp Spec, key, hash string) (Trial, error) {
	id := s.o.NewID()
	caps := &workload.Trial{ID: id, Steps: sp.Steps, MaxRuntime: sp.MaxRuntime, MaxCost: sp.MaxCost}
	var reqs []workload.Request
	var rs []Run
	var errs fault.List
	version := 0 // the live version, pinned by the first check for every run
	// classRefused: classes whose whole-GPU runs the launch check refused
	// for the class itself (gpu.class), whose slices are not checked again
	// (the same refusal, not the profile's).
	classRefused := map[string]bool{}
	// try checks one choice as its launch would be; path and what name it
	// in an error.
	try := func(r Run, path, what string) error {
		profile, key := template.NoMIG, strconv.Itoa(r.GPUs)
		if r.MIGProfile != "" {
			profile, key = r.MIGProfile, r.MIGProfile
		}
		req := workload.Request{Template: sp.Template, Version: version, Team: t, Trial: caps,
			Choice:         template.Choice{Class: r.Class, Count: r.GPUs, MIGProfile: profile, Params: sp.Params},
			IdempotencyKey: "trial-" + id + "-" + r.Class + "-" + key}
		rd, err := s.o.Workloads.Check(ctx, owner, req)
		if err == nil {
			version, req.Version = rd.Version.Version, rd.Version.Version
			err = measurable(rd)
		}
		var inv *fault.Invalid
		var nf *fault.NotFound
		switch {
		case errors.As(err, &nf) && nf.Kind == "template":
			return &fault.Invalid{Fields: []fault.Field{{Path: "template", Message: err.Error()}}}
		case errors.As(err, &inv):
			errs.Addf(path, "%s: %s", what, reason(inv))
			if r.MIGProfile == "" && slices.ContainsFunc(inv.Fields, func(f fault.Field) bool { return f.Path == "gpu.class" }) {
				classRefused[r.Class] = true
			}
			return nil
		case err != nil:
			return err // refused (forbidden), or Gantry cannot tell now
		}
		reqs = append(reqs, req)
		rs = append(rs, r)
		return nil
	}
	for ci, class := range sp.Classes {
		for gi, n := range sp.GPUs {
			if err := try(Run{Class: class, GPUs: n}, fmt.Sprintf("classes[%d]", ci), fmt.Sprintf("%s × %d GPUs (gpus[%d])", class, n, gi)); err != nil {
				return Trial{}, err
			}
		}
		for pi, p := range sp.MIGProfiles {
			if classRefused[class] {
				break
			}
			if err := try(Run{Class: class, GPUs: 1, MIGProfile: p}, fmt.Sprintf("migProfiles[%d]", pi), fmt.Sprintf("%s with %s (classes[%d])", class, p, ci)); err != nil {
				return Trial{}, err
			}
		}
	}
	if err := errs.Err(); err != nil {
		return Trial{}, err
	}
	tr := Trial{ID: id, Team: t, Owner: owner, Spec: sp, Runs: rs, CreatedAt: s.o.Now(), IdempotencyKey: key, RequestHash: hash}
	if err := s.o.Store.CreateTrial(ctx, tr); err != nil {
		var c *fault.Conflict
		if errors.As(err, &c) {
			return Trial{}, err
		}
		return Trial{}, fmt.Errorf("record trial: %w", err)
	}
	for i, req := range reqs {
		if ctx.Err() != nil {
			// The caller went away: what launched is recorded, the rest
			// says why it did not.
			for j := i; j < len(reqs); j++ {
				tr.Runs[j].Error = "not launched: the request ended first"
			}
			return tr, errors.Join(ctx.Err(), s.o.Store.UpdateTrialRuns(context.WithoutCancel(ctx), id, tr.Runs))
		}
		w, _, err := s.o.Workloads.Create(ctx, owner, req)
		if err != nil {
			tr.Runs[i].Error = err.Error()
			continue
		}
		tr.Runs[i].Workload = w.ID
	}
	if err := s.o.Store.UpdateTrialRuns(ctx, id, tr.Runs); err != nil {
		return tr, fmt.Errorf("record trial %s's runs: %w", id, err)
	}
	s.o.Log.InfoContext(ctx, "trial started", "trial_id", id, "team", t, "template", sp.Template, "runs", len(tr.Runs))
	return tr, nil
}

// measurable refuses a run that could not report its progress: a batch
// Job whose pods have an address to report to (else its step cap could not
// stop it and nothing would be measured). In a fleet, each run goes where
// the dispatcher places it and reports from there.
func measurable(rd workload.Rendered) error {
	switch {
	case rd.Version.Template.Spec.Workload != template.Job:
		return &fault.Invalid{Fields: []fault.Field{{Path: "template", Message: fmt.Sprintf(
			"template %q is a %s: trials run jobs, whose runs report their progress", rd.Version.Name, rd.Version.Template.Spec.Workload)}}}
	case rd.Meta.RunURL == "":
		return &fault.Unavailable{What: "trials", Err: errors.New("the cluster's pods have no address to report their progress to (runs.reportURL, or a publicURL that is not a loopback address): a trial's runs could be neither stopped at their steps nor measured")}
	}
	return nil
}

// Get is a trial the caller may read (its team's workloads), measured.
func (s *Service) Get(ctx context.Context, id string) (Trial, Results, error) {
	tr, err := s.o.Store.Trial(ctx, id)
	if err != nil {
		return Trial{}, Results{}, err
	}
	caller, ok := identity.From(ctx)
	if !ok || !s.o.Authorizer.Allowed(caller, tr.Team, access.WorkloadsRead) {
		return Trial{}, Results{}, &fault.NotFound{Kind: "trial", Name: id}
	}
	res, err := s.measure(ctx, tr)
	return tr, res, err
}

// List is the trials of the teams the caller may read, newest first.
func (s *Service) List(ctx context.Context, limit int) ([]Trial, error) {
	if limit < 1 || limit > 500 {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "limit", Message: "must be between 1 and 500"}}}
	}
	caller, ok := identity.From(ctx)
	if !ok {
		return nil, nil
	}
	all, names := s.o.Authorizer.Teams(caller, access.WorkloadsRead)
	var teams []team.Name
	if !all {
		teams = []team.Name{}
		for _, n := range names {
			teams = append(teams, team.Name(n))
		}
	}
	return s.o.Store.ListTrials(ctx, teams, limit)
}

// reason is an Invalid's problems as one sentence.
func reason(inv *fault.Invalid) string {
	parts := make([]string, len(inv.Fields))
	for i, f := range inv.Fields {
		parts[i] = f.String()
	}
	return strings.Join(parts, "; ")
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
