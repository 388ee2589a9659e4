package workload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
)

// Request asks to launch a template.
type Request struct {
	Template       string
	Version        int       // 0: the live version
	Team           team.Name // checked by team.Parse where it came in
	Choice         template.Choice
	IdempotencyKey string // optional: the same key returns the same workload
	// Draft, for a preview only, is an unsaved template of that name to
	// render instead of a stored version (the editor's preview): it needs
	// templates:write rather than the right to launch in the team.
	Draft *template.Template
	// Trial, for a trial's run (package trial), caps it and marks it as
	// one.
	Trial *Trial
	// Flexible, for a flexible template's job, bounds how long it may be
	// held for cleaner power.
	Flexible Flexible
}

// fingerprint identifies what a request asks for, so that a repeat under the
// same Idempotency-Key can be told from a different request.
func (r Request) fingerprint() string {
	fields := []any{r.Template, r.Version, r.Team, r.Choice.Class, r.Choice.MIGProfile, r.Choice.Count, r.Choice.Params}
	if r.Choice.Confidential {
		fields = append(fields, "confidential") // absent otherwise, so earlier keys keep their fingerprint
	}
	if r.Choice.CPUOnly {
		fields = append(fields, "cpuOnly") // likewise
	}
	if r.Trial != nil {
		fields = append(fields, *r.Trial) // likewise
	}
	if r.Flexible.MaxDelay != nil || !r.Flexible.Deadline.IsZero() {
		fields = append(fields, r.Flexible) // likewise
	}
	b, _ := json.Marshal(fields)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Rendered is what a launch would create.
type Rendered struct {
	Version catalog.Version
	Meta    render.Meta
	Choice  *template.Resolved
	Objects []render.Object
	Hash    string
	// PricePerHour is the launch's list price an hour: its GPUs', or,
	// CPU-only, its cores'.
	PricePerHour float64
}

// Preview renders a request without recording anything.
// It refuses exactly what a launch refuses (the team, the template and GPU
// class the team may use), so that a preview tells nothing a launch would not.
func (s *Service) Preview(ctx context.Context, owner string, req Request) (Rendered, error) {
	if req.Draft == nil {
		return s.launchable(ctx, owner, req, "preview0")
	}
	if err := s.MayPreviewDraft(ctx); err != nil {
		return Rendered{}, err
	}
	var errs fault.List
	if req.Draft.Metadata.Name != req.Template {
		errs.Addf("source", "the draft is template %q, not %q", req.Draft.Metadata.Name, req.Template)
	}
	if req.Version != 0 {
		errs.Addf("templateVersion", "not with a draft")
	}
	if err := errs.Err(); err != nil {
		return Rendered{}, err
	}
	rd, err := s.render(ctx, owner, req, "preview0")
	if err != nil {
		return Rendered{}, err
	}
	if err := s.authz.MayUse(req.Team, uses(rd)); err != nil {
		return Rendered{}, &fault.Forbidden{Reason: policyReason(err)}
	}
	return rd, nil
}

// MayPreviewDraft refuses the caller a preview of a template's draft unless
// they may write templates: asked before the draft is even parsed (the
// parser's answer names the catalog's classes and images, and its work
// grows with the draft).
func (s *Service) MayPreviewDraft(ctx context.Context) error {
	id, ok := identity.From(ctx)
	if all, teams := s.authz.Teams(id, access.TemplatesWrite); !ok || !all && len(teams) == 0 {
		return &fault.Forbidden{Reason: "previewing a draft of a template needs the templates:write permission"}
	}
	return nil
}

// Check renders a request and refuses what a launch of it would refuse
// before anything is recorded: the team, the template and GPU class the
// team may use, and more GPUs than any node can ever hold. It records
// nothing (a trial checks each of its runs so before it launches any).
func (s *Service) Check(ctx context.Context, owner string, req Request) (Rendered, error) {
	rd, err := s.launchable(ctx, owner, req, "check0")
	if err != nil {
		return rd, err
	}
	return rd, s.fits(ctx, rd)
}

// launchable renders a request after the checks every launch makes: the
// caller may launch in the team, and the team may use the template and the
// GPU class.
func (s *Service) launchable(ctx context.Context, owner string, req Request, id string) (Rendered, error) {
	if req.Team != "" && !s.may(ctx, req.Team, access.WorkloadsLaunch) {
		return Rendered{}, &fault.Forbidden{Reason: fmt.Sprintf("you may not launch workloads in team %q", req.Team)}
	}
	rd, err := s.render(ctx, owner, req, id)
	if err != nil {
		return Rendered{}, err
	}
	if err := s.authz.MayUse(req.Team, uses(rd)); err != nil {
		return Rendered{}, &fault.Forbidden{Reason: policyReason(err)}
	}
	return rd, nil
}

// uses is what a rendered launch takes from its team's entitlements.
func uses(rd Rendered) access.Use {
	spec := rd.Version.Template.Spec
	u := access.Use{Template: rd.Version.Name, GPUClass: rd.Choice.Class.Name}
	for _, v := range spec.Volumes {
		u.StorageClasses = append(u.StorageClasses, v.StorageClass)
	}
	if spec.VM != nil {
		u.VMUser = spec.VM.User
	}
	return u
}

func (s *Service) render(ctx context.Context, owner string, req Request, id string) (Rendered, error) {
	var errs fault.List
	if req.Team == "" {
		errs.Addf("team", "is required")
	}
	if !template.ValidName(req.Template) {
		errs.Addf("template", "%q is not a template name", req.Template)
	}
	if req.Version < 0 {
		errs.Addf("templateVersion", "must not be negative")
	}
	if err := errs.Err(); err != nil {
		return Rendered{}, err
	}
	if req.Version != 0 {
		// An older version may be launched, but only of a template that is live.
		if _, err := s.templates.Get(ctx, req.Template, 0); err != nil {
			return Rendered{}, err
		}
	}
	v := catalog.Version{Name: req.Template, Template: req.Draft} // a draft: version 0, not saved
	if req.Draft == nil {
		var err error
		if v, err = s.templates.Get(ctx, req.Template, req.Version); err != nil {
			return Rendered{}, err
		}
	}
	if v.Status == catalog.Revoked {
		field := "templateVersion"
		if req.Version == 0 {
			field = "template"
		}
		return Rendered{}, &fault.Invalid{Fields: []fault.Field{{Path: field, Message: fmt.Sprintf(
			"template %s version %d was revoked (%s): launch a version that is not", v.Name, v.Version, v.StatusReason)}}}
	}
	r, err := v.Template.Resolve(s.templates.Classes(), req.Choice)
	if err != nil {
		return Rendered{}, err
	}

	pinned, tee, err := s.images.PinImage(ctx, v.Template.Spec.Image)
	if err != nil {
		return Rendered{}, err
	}
	meta := render.Meta{WorkloadID: id, Team: req.Team.String(), Owner: owner, Namespace: s.namespace(req.Team), TemplateVersion: v.Version, Image: pinned, Kueue: s.kueue, MultiKueue: s.fleet, RunURL: s.runURL}
	if r.CPUOnly {
		cpu, ok := s.templates.Classes().CPU()
		if !ok {
			return Rendered{}, &fault.Invalid{Fields: []fault.Field{{Path: "cpuOnly", Message: "this Gantry's GPU classes have no cpu section: CPU-only launches have nowhere to run"}}}
		}
		meta.CPUNodeLabel = cpu.NodeLabel
	}
	if r.Confidential {
		if tee == "" {
			return Rendered{}, &fault.Invalid{Fields: []fault.Field{{Path: "confidential", Message: fmt.Sprintf(
				"image %s of template %q is not a confidential image: confidential launches run only catalog images built for a TEE", v.Template.Spec.Image, v.Name)}}}
		}
		if s.initData == "" {
			return Rendered{}, &fault.Unavailable{What: "confidential computing", Err: errors.New("no key broker is configured (confidential.kbsURL)")}
		}
		meta.TEE, meta.InitData = tee, s.initData
	}
	r = capped(r, &meta, req.Trial)
	objs, err := render.Objects(r, meta)
	if err != nil {
		return Rendered{}, err
	}
	hash, err := render.Hash(objs)
	if err != nil {
		return Rendered{}, fmt.Errorf("hash rendered objects: %w", err)
	}
	return Rendered{Version: v, Meta: meta, Choice: r, Objects: objs, Hash: hash, PricePerHour: hourlyPrice(s.templates.Classes(), r)}, nil
}

// Create records a launch of the request. The objects are rendered (so every
// problem surfaces now) and their hash recorded with the workload. With an
// idempotency key, a repeat returns the first launch's workload and replayed true.
func (s *Service) Create(ctx context.Context, owner string, req Request) (w Workload, replayed bool, err error) {
	// Checked before a replay is answered too: a key does not let a caller
	// (a narrowed token, someone who lost the team) read what it may not.
	if req.Team != "" && !s.may(ctx, req.Team, access.WorkloadsLaunch) {
		return Workload{}, false, &fault.Forbidden{Reason: fmt.Sprintf("you may not launch workloads in team %q", req.Team)}
	}
	if req.IdempotencyKey != "" {
		w, err := s.byKey(ctx, owner, req)
		if err == nil {
			return w, true, nil
		}
		var nf *fault.NotFound
		if !errors.As(err, &nf) {
			return Workload{}, false, err
		}
	}
	w, err = s.create(ctx, owner, req)
	var c *fault.Conflict
	if req.IdempotencyKey != "" && errors.As(err, &c) {
		// Launched concurrently under the same key: answer with that launch.
		if w, err := s.byKey(ctx, owner, req); err == nil {
			return w, true, nil
		}
	}
	return w, false, err
}

func (s *Service) byKey(ctx context.Context, owner string, req Request) (Workload, error) {
	w, err := s.store.WorkloadByIdempotencyKey(ctx, owner, req.IdempotencyKey)
	if err != nil {
		return w, err
	}
	if w.RequestHash != req.fingerprint() {
		return Workload{}, &fault.Conflict{Kind: "Idempotency-Key", Name: req.IdempotencyKey, Reason: "was used for a different launch request"}
	}
	return w, nil
}

func (s *Service) create(ctx context.Context, owner string, req Request) (Workload, error) {
	id := s.newID()
	rd, err := s.launchable(ctx, owner, req, id)
	if err != nil {
		return Workload{}, err
	}
	if err := s.fits(ctx, rd); err != nil {
		return Workload{}, err
	}
	now := s.clock()
	price := rd.PricePerHour
	w := Workload{
		ID:              id,
		Name:            rd.Meta.Name(rd.Version.Name),
		Team:            req.Team,
		Owner:           owner,
		Template:        rd.Version.Name,
		TemplateVersion: rd.Version.Version,
		Kind:            rd.Version.Template.Spec.Workload,
		GPUClass:        rd.Choice.Class.Name,
		GPUCount:        rd.Choice.Count,
		Parameters:      rd.Choice.Params,
		ObjectsHash:     rd.Hash,
		PricePerHour:    price,
		Status:          Pending,
		IdempotencyKey:  req.IdempotencyKey,
		RequestHash:     req.fingerprint(),
		Endpoint:        endpoint(rd),
		Image:           rd.Meta.Image,
		TEE:             rd.Meta.TEE,
		ExpiresAt:       expiry(now, rd.Choice.Template.Spec.Lifecycle.MaxRuntime), // a trial's cap
		Trial:           req.Trial,
		CreatedAt:       now,
		UpdatedAt:       now,
	}
	if rd.Choice.MIG != nil {
		w.MIGProfile = rd.Choice.MIG.Name
	}
	if rd.Version.Status == catalog.Deprecated { // launched, with the warning
		w.TemplateStatus, w.TemplateStatusReason = rd.Version.Status, rd.Version.StatusReason
	}
	if err := s.govern(ctx, &w, rd); err != nil {
		return Workload{}, err
	}
	if err := s.deferral(ctx, &w, rd, req); err != nil {
		return Workload{}, err
	}
	if err := s.store.CreateWorkload(ctx, w); err != nil {
		var limit *PendingLimit
		if errors.As(err, &limit) {
			return Workload{}, &fault.Conflict{Kind: "launch", Name: w.Template, Reason: fmt.Sprintf(
				"needs approval (%s), and %d of your launches in team %s already wait for one: wait for a decision, or delete one", w.Approval.Why, limit.Waiting, w.Team)}
		}
		return Workload{}, fmt.Errorf("record workload: %w", err)
	}
	if s.cluster == nil || (w.Status == PendingApproval && !s.kueue) || w.Deferral.Holding() {
		// Without Kueue a launch held for approval is applied once
		// approved; one held for cleaner power once released.
		return w, nil
	}
	// Recorded first, applied second: if Gantry stops in between, the reconciler
	// applies it; if the cluster is unreachable, the launch is kept and applied
	// once it is back.
	w, err = s.apply(ctx, w, rd.Objects)
	var un *fault.Unavailable
	if errors.As(err, &un) {
		return w, nil // accepted; pending until the cluster answers
	}
	return w, err
}

// govern applies the team's budget and approval rules to a launch about to
// be recorded: a launch that needs approval is recorded PendingApproval (with
// Kueue it is applied, and waits at Gantry's AdmissionCheck); one in a team
// whose spent budget blocks launches waits in the team's queue, which Kueue
// holds (without Kueue, it is refused).
func (s *Service) govern(ctx context.Context, w *Workload, rd Rendered) error {
	hours := 0.0
	if d, err := time.ParseDuration(rd.Choice.Template.Spec.Lifecycle.MaxRuntime); err == nil {
		hours = d.Hours()
	}
	v, expiry, err := s.budgets.Verdict(ctx, w.Team, w.PricePerHour, hours)
	if err != nil {
		return err
	}
	switch {
	case v.Hold && !s.kueue:
		return &fault.Forbidden{Reason: "the launch is refused: " + v.Why}
	case v.Hold:
		w.Reason, w.Held = HeldPrefix+v.Why, true
		// Not only at the next quota sync: this launch must not slip in.
		if s.cluster != nil {
			if err := s.cluster.HoldQueue(ctx, w.Team); err != nil {
				s.log.WarnContext(ctx, "team's queue not held at once; the next quota sync holds it", "workload_id", w.ID, "team", w.Team, "err", err)
			}
		}
	case v.Approval:
		// Kueue reserves a held launch's quota while it waits: one person
		// may not fill the team's queue with launches nobody approved.
		waiting, err := s.store.ListWorkloads(ctx, Filter{Team: w.Team, Owner: w.Owner, Status: PendingApproval, Limit: MaxPendingApprovals})
		if err != nil {
			return err
		}
		if len(waiting) >= MaxPendingApprovals {
			return &fault.Conflict{Kind: "launch", Name: w.Template, Reason: fmt.Sprintf(
				"needs approval (%s), and %d of your launches in team %s already wait for one: wait for a decision, or delete one", v.Why, len(waiting), w.Team)}
		}
		w.Status = PendingApproval
		w.Approval = Approval{Why: v.Why, Expires: w.CreatedAt.Add(expiry)}
		w.Reason = approvalReason(w.Team, w.Approval)
	}
	return nil
}

// fits refuses a launch no node of the fleet could ever hold: more GPUs (or
// MIG slices) than any one node of its class has, or a GPU resource (a MIG
// profile) none of the class's nodes offers. One the cluster cannot answer
// for is let through (recorded; it waits like any other), as is a class
// with no nodes at all (a pool scaled to zero). A VM's passthrough devices
// are the cluster's to judge. A class with node groups is judged by its
// groups at their max instead (fitsGroups): its nodes now are not all it
// can have. In a fleet the workers run the work, not the manager whose
// nodes these would be: none is refused here (the dispatcher says why no
// worker may run one).
func (s *Service) fits(ctx context.Context, rd Rendered) error {
	if s.fleet {
		return nil
	}
	if rd.Choice.CPUOnly {
		return s.fitsCPU(ctx, rd)
	}
	if rd.Choice.Count == 0 || rd.Version.Template.Spec.Workload == template.VM {
		return nil
	}
	if answered, err := s.fitsGroups(rd.Choice); answered {
		return err
	}
	if s.cluster == nil {
		return nil
	}
	resource := render.GPUResource(rd.Choice)
	// Bounded: a cluster that does not answer must not cost the launch,
	// which is recorded and waits for it.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	most, nodes, err := s.cluster.MostOnOneNode(cctx, rd.Choice.Class, resource)
	if err != nil {
		s.log.WarnContext(ctx, "whether any node could hold the launch is not known", "class", rd.Choice.Class.Name, "err", err)
		return nil
	}
	if most == 0 && nodes > 0 {
		field, what := "gpu.class", "GPUs ("+resource+")"
		if rd.Choice.MIG != nil {
			field, what = "gpu.migProfile", "MIG profile "+rd.Choice.MIG.Name+" ("+resource+"): their MIG layout has no such slice"
		}
		return &fault.Invalid{Fields: []fault.Field{{Path: field, Message: fmt.Sprintf(
			"no node of %s (%d in all) offers %s; it could never start here", rd.Choice.Class.Name, nodes, what)}}}
	}
	// A node that lists the resource at 0 (most -1: a device plugin
	// restarting or its devices unhealthy): not known.
	if most > 0 && most < rd.Choice.Count {
		return &fault.Invalid{Fields: []fault.Field{{Path: "gpu.count", Message: fmt.Sprintf(
			"no node of %s has %d %s: it could never start here (the most on one node is %d)", rd.Choice.Class.Name, rd.Choice.Count, resource, most)}}}
	}
	return nil
}

// fitsCPU refuses a CPU-only launch that asks for more cores than any CPU
// node has at all. None at all is let through (a node may join; the
// estimate says it waits for one), as is a cluster that does not answer.
func (s *Service) fitsCPU(ctx context.Context, rd Rendered) error {
	if s.cluster == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, most, nodes, err := s.cluster.FreeCPU(cctx, rd.Meta.CPUNodeLabel)
	if err != nil {
		s.log.WarnContext(ctx, "whether a CPU node could hold the launch is not known", "err", err)
		return nil
	}
	if need := int64(math.Round(rd.Choice.CPUCores() * 1000)); nodes > 0 && most < need {
		return &fault.Invalid{Fields: []fault.Field{{Path: "cpuOnly", Message: fmt.Sprintf(
			"no CPU node has %g cores: it could never start here (the most on one is %g)", float64(need)/1000, float64(most)/1000)}}}
	}
	return nil
}

// HeldPrefix starts the reason of a launch that a spent budget holds in its
// team's queue (policy block), for people; Workload.Held says it for code.
const HeldPrefix = "held: "

// MaxPendingApprovals is how many of one person's launches in a team may
// wait for approval at once. The store decides it where it records a launch
// (PendingLimit); the count above only answers early.
const MaxPendingApprovals = 5

// PendingLimit is the store's refusal to record a launch held for approval
// past MaxPendingApprovals of its owner's in its team.
type PendingLimit struct {
	Waiting int
}

func (e *PendingLimit) Error() string {
	return fmt.Sprintf("%d launches already wait for approval", e.Waiting)
}

// approvalReason says who must approve a held launch, why, and until when.
func approvalReason(t team.Name, a Approval) string {
	what := "approval"
	if a.Restart {
		what = "approval to start again"
	}
	return fmt.Sprintf("waiting for %s by a team-admin of %s or a platform-admin until %s: %s",
		what, t, a.Expires.Format(time.RFC3339), a.Why)
}

// expiry is when a workload started at from must stop, given its template's
// max runtime (validated with the template; zero: none).
func expiry(from time.Time, maxRuntime string) time.Time {
	d, err := time.ParseDuration(maxRuntime)
	if maxRuntime == "" || err != nil || d <= 0 {
		return time.Time{}
	}
	return from.Add(d)
}

// endpoint is the in-cluster address of a notebook's interactive port (where
// Gantry's proxy forwards) or of a service's first port.
func endpoint(rd Rendered) string {
	spec := rd.Version.Template.Spec
	port := spec.InteractivePort()
	switch {
	case port != 0:
	case spec.Workload == template.Service && len(spec.Ports) > 0:
		port = spec.Ports[0].Port
	default:
		return ""
	}
	return fmt.Sprintf("http://%s.%s%s:%d", rd.Meta.Name(rd.Version.Name), rd.Meta.Namespace, serviceDomain, port)
}

// serviceDomain ends a Service's cluster DNS name after its namespace: an
// endpoint is http://<service>.<namespace>serviceDomain:<port> (serviceURL
// checks it).
const serviceDomain = ".svc.cluster.local"

// waitingForCluster is the reason a launch gives while the API server does
// not answer.
const waitingForCluster = "waiting for the Kubernetes API server; the launch is kept and applied when it answers"

// apply puts a recorded workload's objects on the cluster and records the
// outcome. A refusal by the API server fails the workload with the server's
// reason; an unreachable server leaves it pending (and the *fault.Unavailable
// is returned). Whatever the cluster reported meanwhile is kept: only the
// applied hash and the waiting reason change.
func (s *Service) apply(ctx context.Context, w Workload, objs []render.Object) (Workload, error) {
	err := s.cluster.EnsureNamespace(ctx, s.namespace(w.Team), w.Team)
	if err == nil {
		err = s.cluster.Apply(ctx, objs)
	}
	var un *fault.Unavailable
	switch {
	case err == nil:
		return s.store.UpdateWorkload(ctx, w.ID, func(w Workload) (Workload, error) {
			w.AppliedHash, w.UpdatedAt = w.ObjectsHash, s.clock()
			if w.Reason == waitingForCluster {
				w.Reason = ""
			}
			return w, nil
		})
	case errors.As(err, &un):
		got, uerr := s.store.UpdateWorkload(ctx, w.ID, func(w Workload) (Workload, error) {
			if w.Status == Pending {
				w.Reason, w.UpdatedAt = waitingForCluster, s.clock()
			}
			return w, nil
		})
		return got, errors.Join(err, uerr)
	}
	got, terr := s.transition(ctx, w.ID, Refused, err.Error())
	if terr != nil {
		return w, errors.Join(err, terr)
	}
	return got, err
}

// rerender renders a recorded workload again, exactly as it was launched,
// with the worker cluster a flexible job's start was planned on marked on
// its Job once its window released it (render.Plan: a mark for the
// dispatcher, outside the hash).
func (s *Service) rerender(ctx context.Context, w Workload) ([]render.Object, error) {
	v, err := s.templates.Get(ctx, w.Template, w.TemplateVersion)
	if err != nil {
		return nil, err
	}
	c := template.Choice{Class: w.GPUClass, Count: w.GPUCount, MIGProfile: w.MIGProfile, Params: map[string]any{}, Confidential: w.TEE != ""}
	if c.MIGProfile == "" {
		c.MIGProfile = template.NoMIG
	}
	if w.GPUClass == gpu.CPUClass {
		c = template.Choice{CPUOnly: true, Params: map[string]any{}}
	}
	for k, val := range w.Parameters {
		c.Params[k] = val
	}
	r, err := v.Template.Resolve(s.templates.Classes(), c)
	if err != nil {
		return nil, err
	}
	meta := render.Meta{WorkloadID: w.ID, Team: w.Team.String(), Owner: w.Owner, Namespace: s.namespace(w.Team), TemplateVersion: w.TemplateVersion, Image: w.Image, TEE: w.TEE, InitData: s.initDataFor(w.TEE), Kueue: s.kueue, MultiKueue: s.fleet, RunURL: s.runURL}
	if cpu, ok := s.templates.Classes().CPU(); ok && r.CPUOnly {
		meta.CPUNodeLabel = cpu.NodeLabel
	}
	r = capped(r, &meta, w.Trial)
	// As launched: with progress reports, or — recorded before this
	// replica reported them, or by one whose pods could not reach it —
	// without.
	var h string
	for _, runURL := range slices.Compact([]string{meta.RunURL, ""}) {
		meta.RunURL = runURL
		objs, err := render.Objects(r, meta)
		if err != nil {
			return nil, err
		}
		if h, err = render.Hash(objs); err == nil && h == w.ObjectsHash {
			if d := w.Deferral; d != nil && d.ReleasedBy == "forecast" {
				// Released in the window planned for that cluster; a start
				// asked for sooner is placed as any launch.
				render.Plan(objs, d.Cluster)
			}
			return objs, nil
		}
	}
	return nil, &fault.Conflict{Kind: "workload", Name: w.ID, Reason: fmt.Sprintf(
		"rendering it again gives other objects than were recorded (hash %.12s, recorded %.12s)", h, w.ObjectsHash)}
}

// policyReason joins a policy refusal's problems into one sentence.
func policyReason(err error) string {
	var inv *fault.Invalid
	if !errors.As(err, &inv) {
		return err.Error()
	}
	parts := make([]string, len(inv.Fields))
	for i, f := range inv.Fields {
		parts[i] = f.Message
	}
	return strings.Join(parts, "; ")
}

// initDataFor is the init data a re-rendered workload carries: none unless
// it is confidential.
func (s *Service) initDataFor(tee string) string {
	if tee == "" {
		return ""
	}
	return s.initData
}

// fitsGroups refuses a launch of whole GPUs that its class's node groups
// could never hold, even at their max. It answers only for classes with
// node groups, and not for MIG slices or confidential GPUs, which run on
// machines the groups do not describe.
func (s *Service) fitsGroups(r *template.Resolved) (answered bool, err error) {
	if r.MIG != nil || r.Confidential || len(s.groups.ForClass(r.Class.Name)) == 0 {
		return false, nil
	}
	err = s.groups.Check(nodegroup.Request{Class: r.Class.Name, GPUsPerPod: r.Count, Pods: 1, Spot: r.Template.Spec.Scheduling.Spot})
	var tb *nodegroup.TooBigError
	if errors.As(err, &tb) {
		return true, &fault.Invalid{Fields: []fault.Field{{Path: "gpu.count", Message: err.Error() + ": it could never start here"}}}
	}
	return true, err
}

// hourlyPrice is what a resolved launch costs an hour at list price: its
// GPUs (or MIG slices, or spot), or, CPU-only, its cores.
func hourlyPrice(classes *gpu.Catalog, r *template.Resolved) float64 {
	if r.CPUOnly {
		cpu, _ := classes.CPU()
		return cpu.HourlyPrice(r.CPUCores())
	}
	price, _ := r.Class.HourlyPrice(r.MIG, r.Count, r.Template.Spec.Scheduling.Spot)
	return price
}
