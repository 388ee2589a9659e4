// Package workload owns workloads: launching a template version for a team (the
// choices checked, the objects rendered and their hash recorded), previewing what a
// launch would create, and listing, reading and deleting workload records. It
// declares the store it needs; applying objects to a cluster plugs in here later.
package workload

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
)

// Status is where a workload is in its lifecycle.
type Status string

// Statuses. Pending means recorded and rendered, not yet running.
const (
	Pending   Status = "Pending"
	Scheduled Status = "Scheduled"
	Running   Status = "Running"
	Succeeded Status = "Succeeded"
	Failed    Status = "Failed"
	Stopped   Status = "Stopped"
	Deleted   Status = "Deleted"
)

// Statuses lists every status.
var Statuses = []Status{Pending, Scheduled, Running, Succeeded, Failed, Stopped, Deleted}

// Workload is the record of one launch.
type Workload struct {
	ID              string
	Name            string
	Team            string
	Owner           string
	Template        string
	TemplateVersion int
	Kind            string
	GPUClass        string
	MIGProfile      string
	GPUCount        int
	Parameters      map[string]string
	ObjectsHash     string
	AppliedHash     string // the ObjectsHash last applied to the cluster; "" until then
	Status          Status
	Reason          string // why the workload is stuck or failed
	Endpoint        string // in-cluster address of a service or notebook
	Image           string // the verified image, pinned by digest
	TEE             string // the TEE of a confidential workload, "" for others
	IdempotencyKey  string // the caller's key for this launch, if any
	RequestHash     string // fingerprint of the launch request, to tell repeats from reuse
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Applied reports whether the workload's objects are on the cluster.
func (w Workload) Applied() bool { return w.AppliedHash != "" && w.AppliedHash == w.ObjectsHash }

// Filter selects workloads; After continues a listing after that key.
type Filter struct {
	Team  string
	Teams []string // when set, only these teams

	Owner    string
	Template string
	Status   Status
	Limit    int
	After    *Key
}

// Key orders workloads, newest first.
type Key struct {
	CreatedAt time.Time
	ID        string
}

// Store keeps workload records.
type Store interface {
	CreateWorkload(ctx context.Context, w Workload) error
	// Workload returns one record; *fault.NotFound if none.
	Workload(ctx context.Context, id string) (Workload, error)
	// WorkloadByIdempotencyKey returns the owner's workload launched with key.
	WorkloadByIdempotencyKey(ctx context.Context, owner, key string) (Workload, error)
	// ListWorkloads returns up to f.Limit records, newest first.
	ListWorkloads(ctx context.Context, f Filter) ([]Workload, error)
	// SetWorkloadStatus changes a record's status and reason; *fault.NotFound if none.
	SetWorkloadStatus(ctx context.Context, id string, s Status, reason string, at time.Time) error
	// MarkApplied records that objects with this hash were applied.
	MarkApplied(ctx context.Context, id, hash string, at time.Time) error
	// UnappliedWorkloads returns up to limit live workloads not yet applied.
	UnappliedWorkloads(ctx context.Context, limit int) ([]Workload, error)
}

// Cluster is where workloads run.
type Cluster interface {
	EnsureNamespace(ctx context.Context, name, team string) error
	Apply(ctx context.Context, objs []render.Object) error
	Delete(ctx context.Context, namespace, kind, name string) error
	// Events returns the events of objects whose names start with prefix.
	Events(ctx context.Context, namespace, prefix string) ([]Event, error)
	// Logs streams the log of the main container of the newest pod labelled
	// with the workload id; *fault.Conflict when there is no pod yet.
	Logs(ctx context.Context, namespace, workloadID string, follow bool, tailLines int64) (io.ReadCloser, error)
	// Managed lists the primary objects (Jobs, Deployments, StatefulSets,
	// VirtualMachines) that carry Gantry's labels.
	Managed(ctx context.Context) ([]ObjectRef, error)
	// SetRunStrategy starts (Always) or stops (Halted) a VirtualMachine.
	SetRunStrategy(ctx context.Context, namespace, name, strategy string) error
}

// ObjectRef names a workload's primary object on the cluster.
type ObjectRef struct {
	Namespace  string
	Kind       string
	Name       string
	WorkloadID string
}

func (o ObjectRef) String() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// Event is something the cluster reported about a workload's objects.
type Event struct {
	Time    time.Time
	Type    string // Normal or Warning
	Reason  string
	Message string
	Object  string // Kind/name
	Count   int
}

// Authorizer decides what the caller (the identity in the context) may do in a
// team.
type Authorizer interface {
	Allowed(id identity.Identity, team, permission string) bool
	Teams(id identity.Identity, permission string) (all bool, teams []string)
	MayUse(team, template, class string) error
}

// Templates finds template versions and the GPU classes they are checked against.
type Templates interface {
	Get(ctx context.Context, name string, version int) (catalog.Version, error)
	Classes() *gpu.Catalog
}

// Service is the workload domain logic.
type Service struct {
	store     Store
	templates Templates
	namespace func(team string) string
	cluster   Cluster    // nil: workloads are recorded, not applied
	authz     Authorizer // nil: no team checks (system use and tests of other layers)
	images    Images     // nil: nothing can be launched
	initData  string     // "": confidential launches are refused
	now       func() time.Time
	newID     func() string
}

// Images verifies a template's catalog image (signature, annotations,
// attestations) and pins it by digest. A refusal says which check failed.
type Images interface {
	// PinImage verifies the catalog image ref and returns the reference that
	// runs (pinned by digest) and its TEE ("" unless a confidential image).
	PinImage(ctx context.Context, ref string) (pinned, tee string, err error)
}

// WithConfidential enables confidential launches: their pods carry Kata init
// data pointing the attestation agent at this key broker.
func (s *Service) WithConfidential(kbsURL string) error {
	d, err := render.InitData(kbsURL)
	if err != nil {
		return err
	}
	s.initData = d
	return nil
}

// WithImages sets the image verification every launch goes through.
func (s *Service) WithImages(i Images) *Service {
	s.images = i
	return s
}

// WithAuthorizer makes every user-facing operation check the caller's
// permissions in the workload's team.
func (s *Service) WithAuthorizer(a Authorizer) *Service {
	s.authz = a
	return s
}

// may reports whether the caller may do permission in team (always, without
// an authorizer).
func (s *Service) may(ctx context.Context, team, permission string) bool {
	if s.authz == nil {
		return true
	}
	id, ok := identity.From(ctx)
	return ok && s.authz.Allowed(id, team, permission)
}

// visible returns the workload if the caller may read it; another team's
// workload is not found, so that its existence does not leak.
func (s *Service) visible(ctx context.Context, id string) (Workload, error) {
	w, err := s.store.Workload(ctx, id)
	if err != nil {
		return w, err
	}
	if !s.may(ctx, w.Team, "workloads:read") {
		return Workload{}, &fault.NotFound{Kind: "workload", Name: id}
	}
	return w, nil
}

// WithCluster makes launches apply their objects to the cluster.
func (s *Service) WithCluster(c Cluster) *Service {
	s.cluster = c
	return s
}

// New returns a workload service; namespace maps a team to its namespace.
func New(store Store, templates Templates, namespace func(team string) string) *Service {
	return &Service{store: store, templates: templates, namespace: namespace, now: time.Now, newID: NewID}
}

// Request asks to launch a template.
type Request struct {
	Template       string
	Version        int // 0: the live version
	Team           string
	Choice         template.Choice
	IdempotencyKey string // optional: the same key returns the same workload
}

// fingerprint identifies what a request asks for, so that a repeat under the
// same Idempotency-Key can be told from a different request.
func (r Request) fingerprint() string {
	fields := []any{r.Template, r.Version, r.Team, r.Choice.Class, r.Choice.MIGProfile, r.Choice.Count, r.Choice.Params}
	if r.Choice.Confidential {
		fields = append(fields, "confidential") // absent otherwise, so earlier keys keep their fingerprint
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
}

// Preview renders a request without recording anything.
func (s *Service) Preview(ctx context.Context, owner string, req Request) (Rendered, error) {
	return s.render(ctx, owner, req, "preview0")
}

func (s *Service) render(ctx context.Context, owner string, req Request, id string) (Rendered, error) {
	var errs fault.List
	if !template.ValidName(req.Team) {
		errs.Addf("team", "%q must be a lowercase DNS label of at most %d characters", req.Team, template.MaxNameLen)
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
	v, err := s.templates.Get(ctx, req.Template, req.Version)
	if err != nil {
		return Rendered{}, err
	}
	r, err := v.Template.Resolve(s.templates.Classes(), req.Choice)
	if err != nil {
		return Rendered{}, err
	}
	if s.images == nil {
		return Rendered{}, &fault.Unavailable{What: "image verification", Err: errors.New("no image catalog is configured, and Gantry runs only verified images")}
	}
	pinned, tee, err := s.images.PinImage(ctx, v.Template.Spec.Image)
	if err != nil {
		return Rendered{}, err
	}
	meta := render.Meta{WorkloadID: id, Team: req.Team, Owner: owner, Namespace: s.namespace(req.Team), TemplateVersion: v.Version, Image: pinned}
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
	objs, err := render.Objects(r, meta)
	if err != nil {
		return Rendered{}, err
	}
	hash, err := render.Hash(objs)
	if err != nil {
		return Rendered{}, fmt.Errorf("hash rendered objects: %w", err)
	}
	return Rendered{Version: v, Meta: meta, Choice: r, Objects: objs, Hash: hash}, nil
}

// Create records a launch of the request. The objects are rendered (so every
// problem surfaces now) and their hash recorded with the workload. With an
// idempotency key, a repeat returns the first launch's workload and replayed true.
func (s *Service) Create(ctx context.Context, owner string, req Request) (w Workload, replayed bool, err error) {
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
	if template.ValidName(req.Team) && !s.may(ctx, req.Team, "workloads:launch") {
		return Workload{}, &fault.Forbidden{Reason: fmt.Sprintf("you may not launch workloads in team %q", req.Team)}
	}
	id := s.newID()
	rd, err := s.render(ctx, owner, req, id)
	if err != nil {
		return Workload{}, err
	}
	if s.authz != nil {
		if err := s.authz.MayUse(req.Team, rd.Version.Name, rd.Choice.Class.Name); err != nil {
			return Workload{}, &fault.Forbidden{Reason: policyReason(err)}
		}
	}
	now := s.now().UTC().Truncate(time.Microsecond)
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
		Status:          Pending,
		IdempotencyKey:  req.IdempotencyKey,
		RequestHash:     req.fingerprint(),
		Endpoint:        endpoint(rd),
		Image:           rd.Meta.Image,
		TEE:             rd.Meta.TEE,
		CreatedAt:       now,
		UpdatedAt:       now,
	}
	if rd.Choice.MIG != nil {
		w.MIGProfile = rd.Choice.MIG.Name
	}
	if err := s.store.CreateWorkload(ctx, w); err != nil {
		return Workload{}, fmt.Errorf("record workload: %w", err)
	}
	if s.cluster == nil {
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

// endpoint is the in-cluster address of a service's or notebook's first port.
func endpoint(rd Rendered) string {
	spec := rd.Version.Template.Spec
	if spec.Workload == template.Job || len(spec.Ports) == 0 {
		return ""
	}
	return fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", rd.Meta.Name(rd.Version.Name), rd.Meta.Namespace, spec.Ports[0].Port)
}

// apply puts a recorded workload's objects on the cluster and records the
// outcome. A rejection by the API server fails the workload with the server's
// reason; an unreachable server leaves it pending (and the *fault.Unavailable
// is returned).
func (s *Service) apply(ctx context.Context, w Workload, objs []render.Object) (Workload, error) {
	now := func() time.Time { return s.now().UTC().Truncate(time.Microsecond) }
	err := s.cluster.EnsureNamespace(ctx, s.namespace(w.Team), w.Team)
	if err == nil {
		err = s.cluster.Apply(ctx, objs)
	}
	var un *fault.Unavailable
	switch {
	case err == nil:
		if err := s.store.MarkApplied(ctx, w.ID, w.ObjectsHash, now()); err != nil {
			return w, err
		}
		w.AppliedHash = w.ObjectsHash
		if w.Reason != "" { // no longer waiting for the cluster
			w.Reason = ""
			if err := s.store.SetWorkloadStatus(ctx, w.ID, w.Status, "", now()); err != nil {
				return w, err
			}
		}
		return w, nil
	case errors.As(err, &un):
		w.Reason = "waiting for the Kubernetes API server; the launch is kept and applied when it answers"
		if serr := s.store.SetWorkloadStatus(ctx, w.ID, Pending, w.Reason, now()); serr != nil {
			return w, serr
		}
		return w, err
	}
	w.Status, w.Reason = Failed, err.Error()
	if serr := s.store.SetWorkloadStatus(ctx, w.ID, Failed, w.Reason, now()); serr != nil {
		return w, serr
	}
	return w, err
}

// Reconcile applies every recorded workload whose objects are not yet on the
// cluster (a crash or an unreachable cluster in the middle of a launch). It
// renders each again from what was recorded and refuses if that no longer gives
// the recorded hash.
func (s *Service) Reconcile(ctx context.Context) (applied int, err error) {
	if s.cluster == nil {
		return 0, nil
	}
	pending, err := s.store.UnappliedWorkloads(ctx, 500)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, w := range pending {
		objs, err := s.rerender(ctx, w)
		if err == nil {
			_, err = s.apply(ctx, w, objs)
		}
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

// Orphans finds objects on the cluster that carry Gantry's labels but belong to
// no live workload (no record, or one that was stopped or deleted), and removes
// them when remove is set.
func (s *Service) Orphans(ctx context.Context, remove bool) ([]ObjectRef, error) {
	if s.cluster == nil {
		return nil, nil
	}
	objs, err := s.cluster.Managed(ctx)
	if err != nil {
		return nil, err
	}
	var out []ObjectRef
	for _, o := range objs {
		w, err := s.store.Workload(ctx, o.WorkloadID)
		var nf *fault.NotFound
		switch {
		case errors.As(err, &nf):
		case err != nil:
			return out, err
		case w.Status != Deleted && w.Status != Stopped:
			continue
		}
		out = append(out, o)
		if remove {
			if err := s.cluster.Delete(ctx, o.Namespace, o.Kind, o.Name); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// rerender renders a recorded workload again, exactly as it was launched.
func (s *Service) rerender(ctx context.Context, w Workload) ([]render.Object, error) {
	v, err := s.templates.Get(ctx, w.Template, w.TemplateVersion)
	if err != nil {
		return nil, err
	}
	c := template.Choice{Class: w.GPUClass, Count: w.GPUCount, MIGProfile: w.MIGProfile, Params: map[string]any{}, Confidential: w.TEE != ""}
	if c.MIGProfile == "" {
		c.MIGProfile = template.NoMIG
	}
	for k, val := range w.Parameters {
		c.Params[k] = val
	}
	r, err := v.Template.Resolve(s.templates.Classes(), c)
	if err != nil {
		return nil, err
	}
	objs, err := render.Objects(r, render.Meta{WorkloadID: w.ID, Team: w.Team, Owner: w.Owner, Namespace: s.namespace(w.Team), TemplateVersion: w.TemplateVersion, Image: w.Image, TEE: w.TEE, InitData: s.initDataFor(w.TEE)})
	if err != nil {
		return nil, err
	}
	if h, err := render.Hash(objs); err != nil || h != w.ObjectsHash {
		return nil, fmt.Errorf("rendering again gives other objects than were recorded (hash %.12s, recorded %.12s)", h, w.ObjectsHash)
	}
	return objs, nil
}

// Observe records what the cluster reports about a workload. Deleted and
// stopped workloads keep their status; nothing is written when nothing changed.
func (s *Service) Observe(ctx context.Context, id string, st Status, reason string) error {
	if !validStatus(st) {
		return fmt.Errorf("observe %s: unknown status %q", id, st)
	}
	w, err := s.store.Workload(ctx, id)
	if err != nil {
		return err
	}
	if w.Status == Deleted || w.Status == Stopped || (w.Status == st && w.Reason == reason) {
		return nil
	}
	return s.store.SetWorkloadStatus(ctx, id, st, reason, s.now().UTC().Truncate(time.Microsecond))
}

// primaryKind is the kind of the object that owns a workload's other objects.
func primaryKind(workloadKind string) string {
	switch workloadKind {
	case template.Service:
		return "Deployment"
	case template.Notebook:
		return "StatefulSet"
	case template.VM:
		return "VirtualMachine"
	}
	return "Job"
}

// Get returns one workload.
func (s *Service) Get(ctx context.Context, id string) (Workload, error) {
	return s.visible(ctx, id)
}

// Page is one page of a listing; Next continues it ("" at the end).
type Page struct {
	Items []Workload
	Next  string
}

// Listing limits.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// List returns workloads matching f, newest first; cursor continues an earlier
// page.
func (s *Service) List(ctx context.Context, f Filter, cursor string) (Page, error) {
	var errs fault.List
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	if f.Limit < 1 || f.Limit > MaxLimit {
		errs.Addf("limit", "must be between 1 and %d", MaxLimit)
	}
	if f.Status != "" && !validStatus(f.Status) {
		errs.Addf("status", "%q is not a workload status", f.Status)
	}
	if cursor != "" {
		k, err := decodeCursor(cursor)
		if err != nil {
			errs.Addf("cursor", "is not a cursor returned by this API")
		}
		f.After = k
	}
	if err := errs.Err(); err != nil {
		return Page{}, err
	}
	if s.authz != nil {
		id, _ := identity.From(ctx)
		all, teams := s.authz.Teams(id, "workloads:read")
		switch {
		case all:
		case f.Team != "":
			if !slices.Contains(teams, f.Team) {
				return Page{Items: []Workload{}}, nil // another team's workloads: none to see
			}
		default:
			if len(teams) == 0 {
				return Page{Items: []Workload{}}, nil
			}
			f.Teams = teams
		}
	}
	want := f.Limit
	f.Limit++ // one more tells whether there is a next page
	items, err := s.store.ListWorkloads(ctx, f)
	if err != nil {
		return Page{}, err
	}
	p := Page{Items: items}
	if len(items) > want {
		p.Items = items[:want]
		last := p.Items[want-1]
		p.Next = encodeCursor(Key{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	return p, nil
}

// Delete removes a workload's objects from the cluster and marks it deleted;
// the record stays for accounting.
func (s *Service) Delete(ctx context.Context, id string) error {
	_, err := s.end(ctx, id, Deleted)
	return err
}

// Stop removes a workload's objects from the cluster and marks it stopped.
// A VM is stopped by its runStrategy (KubeVirt removes the running instance,
// the VirtualMachine stays) and can be started again; other workloads' objects
// are removed.
func (s *Service) Stop(ctx context.Context, id string) (Workload, error) {
	return s.end(ctx, id, Stopped)
}

// Start runs a stopped VM again.
func (s *Service) Start(ctx context.Context, id string) (Workload, error) {
	w, err := s.manageable(ctx, id)
	if err != nil {
		return w, err
	}
	if w.Kind != template.VM {
		return w, &fault.Conflict{Kind: "workload", Name: id, Reason: "only a vm can be started again; launch the template anew"}
	}
	if w.Status == Deleted {
		return w, &fault.Conflict{Kind: "workload", Name: id, Reason: "was deleted"}
	}
	if w.Status != Stopped {
		return w, nil
	}
	// Pending is recorded before the VM is told to run, so that what the
	// cluster reports next (Scheduled, Running) is not overwritten by it.
	now := s.now().UTC().Truncate(time.Microsecond)
	if err := s.store.SetWorkloadStatus(ctx, id, Pending, "", now); err != nil {
		return w, err
	}
	if s.cluster != nil && w.AppliedHash != "" {
		if err := s.cluster.SetRunStrategy(ctx, s.namespace(w.Team), w.Name, "Always"); err != nil {
			// Not started: it is still stopped.
			if serr := s.store.SetWorkloadStatus(ctx, id, Stopped, "", s.now().UTC().Truncate(time.Microsecond)); serr != nil {
				return w, errors.Join(err, serr)
			}
			return w, err
		}
	}
	w.Status, w.Reason, w.UpdatedAt = Pending, "", now
	return w, nil
}

// manageable returns a workload the caller may stop, start or delete.
func (s *Service) manageable(ctx context.Context, id string) (Workload, error) {
	w, err := s.visible(ctx, id)
	if err != nil {
		return w, err
	}
	caller, _ := identity.From(ctx)
	if !s.may(ctx, w.Team, "workloads:manage") && !(w.Owner == caller.String() && s.may(ctx, w.Team, "own-workloads:manage")) {
		return w, &fault.Forbidden{Reason: fmt.Sprintf("only its owner or a team-admin of %q may stop, start or delete this workload", w.Team)}
	}
	return w, nil
}

func (s *Service) end(ctx context.Context, id string, st Status) (Workload, error) {
	w, err := s.manageable(ctx, id)
	if err != nil {
		return w, err
	}
	if w.Status == Deleted || w.Status == st {
		return w, nil
	}
	if s.cluster != nil && w.AppliedHash != "" {
		var err error
		if w.Kind == template.VM && st == Stopped {
			err = s.cluster.SetRunStrategy(ctx, s.namespace(w.Team), w.Name, "Halted")
		} else {
			err = s.cluster.Delete(ctx, s.namespace(w.Team), primaryKind(w.Kind), w.Name)
		}
		if err != nil {
			return w, err
		}
	}
	w.Status, w.Reason, w.UpdatedAt = st, "", s.now().UTC().Truncate(time.Microsecond)
	return w, s.store.SetWorkloadStatus(ctx, id, st, "", w.UpdatedAt)
}

// Logs streams a workload's log (its newest pod's main container).
func (s *Service) Logs(ctx context.Context, id string, follow bool, tailLines int64) (io.ReadCloser, error) {
	w, err := s.visible(ctx, id)
	if err != nil {
		return nil, err
	}
	if s.cluster == nil || w.AppliedHash == "" {
		return nil, &fault.Conflict{Kind: "workload", Name: id, Reason: "is not running on a cluster, so it has no log"}
	}
	return s.cluster.Logs(ctx, s.namespace(w.Team), id, follow, tailLines)
}

// Events returns what the cluster reported about a workload's objects.
func (s *Service) Events(ctx context.Context, id string) ([]Event, error) {
	w, err := s.visible(ctx, id)
	if err != nil {
		return nil, err
	}
	if s.cluster == nil {
		return []Event{}, nil
	}
	return s.cluster.Events(ctx, s.namespace(w.Team), w.Name)
}

func validStatus(st Status) bool {
	for _, x := range Statuses {
		if x == st {
			return true
		}
	}
	return false
}

func encodeCursor(k Key) string {
	b, _ := json.Marshal([]any{k.CreatedAt.UnixMicro(), k.ID})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(c string) (*Key, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, err
	}
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil || len(v) != 2 {
		return nil, fmt.Errorf("bad cursor")
	}
	var at int64
	var id string
	if json.Unmarshal(v[0], &at) != nil || json.Unmarshal(v[1], &id) != nil || !ValidID(id) {
		return nil, fmt.Errorf("bad cursor")
	}
	return &Key{CreatedAt: time.UnixMicro(at).UTC(), ID: id}, nil
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// IDLength is the length of a workload id.
const IDLength = 10

// NewID returns a random workload id: 10 characters from [a-z0-9], starting with a
// letter (about 51 bits).
func NewID() string {
	b := make([]byte, IDLength)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	for i := range b {
		n := len(idAlphabet)
		if i == 0 {
			n = 26
		}
		b[i] = idAlphabet[int(b[i])%n]
	}
	return string(b)
}

// ValidID reports whether s looks like a workload id.
func ValidID(s string) bool {
	if len(s) != IDLength || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return strings.Trim(s, idAlphabet) == ""
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
