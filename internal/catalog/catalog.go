// Package catalog owns the template catalog as a history of immutable versions:
// creating, updating and deleting templates (each change a new version, nothing
// ever rewritten), and planning and applying a directory of template files the
// GitOps way (create, update, prune, with a diff). Every path validates exactly as
// template.Parse does.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	udiff "github.com/aymanbagabas/go-udiff"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/template"
)

// Version is one immutable version of a template. Only its Status (and the
// reason for it) changes after it is stored.
type Version struct {
	Name         string
	Version      int
	Template     *template.Template
	Digest       string
	CreatedAt    time.Time
	CreatedBy    string
	Status       Status
	StatusReason string
}

// Status is a version's standing with the platform team.
type Status string

// Statuses: an active version launches; a deprecated one launches with a
// warning; a revoked one (a security fix, say) is refused for launches and
// starts, and its running workloads are flagged. Revoked is final.
const (
	Active     Status = "active"
	Deprecated Status = "deprecated"
	Revoked    Status = "revoked"
)

// Warning is what a launch of v should tell its caller, "" for an active version.
func (v Version) Warning() string {
	if v.Status == Active || v.Status == "" {
		return ""
	}
	return fmt.Sprintf("template %s version %d is %s: %s", v.Name, v.Version, v.Status, v.StatusReason)
}

// Change is one template change applied by Store.ApplyTemplates: a new version
// (Template set) or a deletion (Template nil). Expect is the live version the
// change was planned against (0: none), so concurrent edits conflict instead of
// overwriting each other.
type Change struct {
	Name     string
	Template *template.Template
	Digest   string
	Expect   int
	Actor    string
	At       time.Time
}

// Store keeps template versions.
type Store interface {
	// CurrentTemplates returns the live version of every template not deleted.
	CurrentTemplates(ctx context.Context) ([]Version, error)
	// TemplateVersion returns one version (0: the live one); *fault.NotFound if none.
	TemplateVersion(ctx context.Context, name string, version int) (Version, error)
	// TemplateVersionStatus returns one version's status and its reason,
	// without its document; *fault.NotFound if there is no such version.
	TemplateVersionStatus(ctx context.Context, name string, version int) (Status, string, error)
	// TemplateHistory returns every version of a template, oldest first.
	TemplateHistory(ctx context.Context, name string) ([]Version, error)
	// ApplyTemplates applies all changes in one transaction or none of them,
	// returning the versions created (in the changes' name order, the order
	// rows are locked in); *fault.Conflict when an Expect is stale.
	ApplyTemplates(ctx context.Context, changes []Change) ([]Version, error)
	// AnyTemplateEver reports whether any template was ever stored.
	AnyTemplateEver(ctx context.Context) (bool, error)
	// SetTemplateVersionStatus sets a version's status; *fault.NotFound if
	// there is no such version, *fault.Conflict if it is revoked.
	SetTemplateVersionStatus(ctx context.Context, name string, version int, status Status, reason string) error
}

// Service is the catalog's domain logic.
type Service struct {
	store   Store
	classes *gpu.Catalog
	images  template.Images // nil: images are not checked against the image catalog
	now     func() time.Time

	mu       sync.Mutex
	statuses map[versionKey]knownStatus // Status's answers, for StatusTTL
	changes  uint64                     // statuses set through this Service so far
}

type versionKey struct {
	name    string
	version int
}

type knownStatus struct {
	status Status
	reason string
	at     time.Time
}

// StatusTTL is how long Status answers a version's status from memory: a
// workload's flag (its template version deprecated or revoked) is advice,
// and reading it once per version per page and per workload read was a
// database round trip on every one of them. A status set on this replica
// shows at once; one set on another within StatusTTL. What a revocation
// forbids (starting the version again) reads the version itself.
const StatusTTL = 5 * time.Second

// Options are what a Service is made of: Store, Classes and Now are
// required.
type Options struct {
	Store   Store
	Classes *gpu.Catalog
	// Images is the image catalog every template's image is checked
	// against (nil: images are not checked, for tests of the catalog alone).
	Images template.Images
	Now    func() time.Time
}

// New returns a catalog service.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Classes == nil || o.Now == nil {
		return nil, errors.New("catalog: Store, Classes and Now are required")
	}
	return &Service{store: o.Store, classes: o.Classes, images: o.Images, now: o.Now, statuses: map[versionKey]knownStatus{}}, nil
}

// Classes returns the GPU class catalog the templates are checked against.
func (s *Service) Classes() *gpu.Catalog { return s.classes }

// List returns the live version of every template.
func (s *Service) List(ctx context.Context) ([]Version, error) { return s.store.CurrentTemplates(ctx) }

// Get returns a version of a template (0: the live one).
func (s *Service) Get(ctx context.Context, name string, version int) (Version, error) {
	return s.store.TemplateVersion(ctx, name, version)
}

// Status returns a version's status and why it was set, as it was at most
// StatusTTL ago (a list of workloads flags the versions it runs with them).
// Only versions that exist are kept, so the memory it takes is bounded by
// the catalog's.
func (s *Service) Status(ctx context.Context, name string, version int) (Status, string, error) {
	k, now := versionKey{name, version}, s.now()
	s.mu.Lock()
	known, ok := s.statuses[k]
	s.mu.Unlock()
	if ok && now.Sub(known.at) < StatusTTL && !now.Before(known.at) {
		return known.status, known.reason, nil
	}
	s.mu.Lock()
	changes := s.changes
	s.mu.Unlock()
	status, reason, err := s.store.TemplateVersionStatus(ctx, name, version)
	if err != nil {
		return "", "", err
	}
	s.mu.Lock()
	if s.changes == changes { // else what was read may predate a change made here
		s.statuses[k] = knownStatus{status: status, reason: reason, at: now}
	}
	s.mu.Unlock()
	return status, reason, nil
}

// forget drops what Status keeps of a version, after its status changed.
func (s *Service) forget(name string, version int) {
	s.mu.Lock()
	delete(s.statuses, versionKey{name, version})
	s.changes++
	s.mu.Unlock()
}

// History returns every version of a template.
func (s *Service) History(ctx context.Context, name string) ([]Version, error) {
	h, err := s.store.TemplateHistory(ctx, name)
	if err == nil && len(h) == 0 {
		return nil, &fault.NotFound{Kind: "template", Name: name}
	}
	return h, err
}

// SetStatus deprecates, revokes or (from deprecated) reactivates a version;
// deprecating and revoking need a reason, which every later launch of it is
// told.
func (s *Service) SetStatus(ctx context.Context, name string, version int, status Status, reason string) (Version, error) {
	var errs fault.List
	reason = strings.TrimSpace(reason)
	switch status {
	case Active, Deprecated, Revoked:
	default:
		errs.Addf("status", "%q is not one of active, deprecated, revoked", status)
	}
	if status != Active && reason == "" {
		errs.Addf("reason", "is required: say why (it is shown to everyone who launches the version)")
	}
	if len(reason) > 500 {
		errs.Addf("reason", "at most 500 characters")
	}
	if version < 1 {
		errs.Addf("version", "must be a version number (1 or more)")
	}
	if err := errs.Err(); err != nil {
		return Version{}, err
	}
	err := s.store.SetTemplateVersionStatus(ctx, name, version, status, reason)
	s.forget(name, version) // even on an error: the write may have been made
	if err != nil {
		return Version{}, err
	}
	return s.store.TemplateVersion(ctx, name, version)
}

// Parse validates a template document exactly as files are validated.
func (s *Service) Parse(source string, data []byte) (*template.Template, error) {
	return template.Parse(source, data, s.classes, s.images)
}

// Create stores the first live version of a template.
func (s *Service) Create(ctx context.Context, actor string, t *template.Template) (Version, error) {
	if err := t.ValidateWith(s.classes, s.images); err != nil {
		return Version{}, err
	}
	cur, err := s.live(ctx, t.Metadata.Name)
	if err != nil {
		return Version{}, err
	}
	if cur != nil {
		return Version{}, &fault.Conflict{Kind: "template", Name: t.Metadata.Name, Reason: "already exists; update it instead"}
	}
	vs, err := s.store.ApplyTemplates(ctx, []Change{s.put(actor, t, 0)})
	if err != nil {
		return Version{}, err
	}
	return vs[0], nil
}

// Update stores a new version of an existing template; when nothing changed it
// returns the live version and false. With expect, only while that version
// is the live one (*fault.Stale otherwise, decided in the transaction that
// stores it).
func (s *Service) Update(ctx context.Context, actor, name string, t *template.Template, expect *int) (Version, bool, error) {
	if t.Metadata.Name != name {
		var errs fault.List
		errs.Addf("metadata.name", "%q does not match the template being updated, %q", t.Metadata.Name, name)
		return Version{}, false, errs.Err()
	}
	if err := t.ValidateWith(s.classes, s.images); err != nil {
		return Version{}, false, err
	}
	cur, err := s.live(ctx, name)
	if err != nil {
		return Version{}, false, err
	}
	if cur == nil {
		return Version{}, false, &fault.NotFound{Kind: "template", Name: name}
	}
	if expect != nil && *expect != cur.Version {
		return Version{}, false, &fault.Stale{Kind: "template", Name: name}
	}
	if cur.Digest == t.Digest() {
		return *cur, false, nil
	}
	vs, err := s.store.ApplyTemplates(ctx, []Change{s.put(actor, t, cur.Version)})
	if err != nil {
		return Version{}, false, staleIf(expect != nil, err)
	}
	return vs[0], true, nil
}

// staleIf is the store's refusal of a change planned against a version no
// longer live (*fault.Conflict: someone's change landed in between) as a
// *fault.Stale where the caller named the version it changed from — the
// same answer as when the change arrived already stale.
func staleIf(expected bool, err error) error {
	var c *fault.Conflict
	if expected && errors.As(err, &c) {
		return &fault.Stale{Kind: c.Kind, Name: c.Name}
	}
	return err
}

// Delete retires a template; its versions stay for the workloads that used
// them. With expect, only while that version is the live one.
func (s *Service) Delete(ctx context.Context, actor, name string, expect *int) error {
	cur, err := s.live(ctx, name)
	if err != nil {
		return err
	}
	if cur == nil {
		return &fault.NotFound{Kind: "template", Name: name}
	}
	if expect != nil && *expect != cur.Version {
		return &fault.Stale{Kind: "template", Name: name}
	}
	_, err = s.store.ApplyTemplates(ctx, []Change{{Name: name, Expect: cur.Version, Actor: actor, At: s.now()}})
	return staleIf(expect != nil, err)
}

func (s *Service) put(actor string, t *template.Template, expect int) Change {
	return Change{Name: t.Metadata.Name, Template: t, Digest: t.Digest(), Expect: expect, Actor: actor, At: s.now()}
}

// live returns the live version, or nil when there is none.
func (s *Service) live(ctx context.Context, name string) (*Version, error) {
	v, err := s.store.TemplateVersion(ctx, name, 0)
	if err != nil {
		var nf *fault.NotFound
		if errors.As(err, &nf) {
			return nil, nil
		}
		return nil, err
	}
	return &v, nil
}

// Action is what applying a file does to one template.
type Action string

// Actions of a plan.
const (
	Create    Action = "create"
	Update    Action = "update"
	Delete    Action = "delete"
	Unchanged Action = "unchanged"
)

// Step is one template's part of a plan.
type Step struct {
	Name   string
	Action Action
	Source string // the file, for create and update
	Diff   string // unified diff of the template's YAML, for create, update and delete
	change Change
}

// Plan is what applying a directory of templates would do.
type Plan struct {
	Steps []Step
	// expected: the plan was made with versions the caller named
	// (PlanOptions.Expect).
	expected bool
}

// Changed reports whether the plan changes anything.
func (p Plan) Changed() bool {
	for _, s := range p.Steps {
		if s.Action != Unchanged {
			return true
		}
	}
	return false
}

// PlanOptions say how files are applied.
type PlanOptions struct {
	// Prune deletes the live templates that no file defines; refused when
	// the files define none (an empty directory would retire the catalog).
	Prune bool
	// Expect is the live version each named template must be at (0: it
	// must not exist), as the person applying read it: otherwise the plan
	// is refused with a *fault.Stale. The store checks again as it applies.
	Expect map[string]int
}

// Plan compares files with the live catalog.
func (s *Service) Plan(ctx context.Context, actor string, files []template.File, o PlanOptions) (Plan, error) {
	if o.Prune && len(files) == 0 {
		return Plan{}, &fault.Invalid{Fields: []fault.Field{{Path: "prune", Message: "the files define no template: pruning would delete every template in the catalog"}}}
	}
	live, err := s.store.CurrentTemplates(ctx)
	if err != nil {
		return Plan{}, err
	}
	byName := map[string]Version{}
	for _, v := range live {
		byName[v.Name] = v
	}
	for _, name := range slices.Sorted(maps.Keys(o.Expect)) {
		if byName[name].Version != o.Expect[name] { // a missing template is version 0
			return Plan{}, &fault.Stale{Kind: "template", Name: name}
		}
	}
	prune := o.Prune
	p := Plan{expected: len(o.Expect) > 0}
	inFiles := map[string]bool{}
	for _, f := range files {
		t := f.Template
		if err := t.ValidateWith(s.classes, s.images); err != nil {
			return Plan{}, err
		}
		name := t.Metadata.Name
		inFiles[name] = true
		cur, ok := byName[name]
		step := Step{Name: name, Source: f.Path}
		switch {
		case !ok:
			step.Action, step.change = Create, s.put(actor, t, 0)
			step.Diff = diff(name, nil, t)
		case cur.Digest != t.Digest():
			step.Action, step.change = Update, s.put(actor, t, cur.Version)
			step.Diff = diff(name, cur.Template, t)
		default:
			step.Action = Unchanged
		}
		p.Steps = append(p.Steps, step)
	}
	if prune {
		for _, v := range live {
			if !inFiles[v.Name] {
				p.Steps = append(p.Steps, Step{Name: v.Name, Action: Delete, Diff: diff(v.Name, v.Template, nil),
					change: Change{Name: v.Name, Expect: v.Version, Actor: actor, At: s.now()}})
			}
		}
	}
	return p, nil
}

// Apply carries out a plan in one transaction: all of it or none of it.
func (s *Service) Apply(ctx context.Context, p Plan) ([]Version, error) {
	var changes []Change
	for _, st := range p.Steps {
		if st.Action != Unchanged {
			changes = append(changes, st.change)
		}
	}
	if len(changes) == 0 {
		return nil, nil
	}
	vs, err := s.store.ApplyTemplates(ctx, changes)
	return vs, staleIf(p.expected, err)
}

// Seed loads files as the initial catalog when no template was ever stored, and
// reports whether it did.
func (s *Service) Seed(ctx context.Context, actor string, files []template.File) (bool, error) {
	any, err := s.store.AnyTemplateEver(ctx)
	if err != nil || any {
		return false, err
	}
	p, err := s.Plan(ctx, actor, files, PlanOptions{})
	if err != nil {
		return false, err
	}
	vs, err := s.Apply(ctx, p)
	var c *fault.Conflict
	if errors.As(err, &c) {
		// Another replica seeded between the check and the apply (a first
		// install with several on one database): the catalog is there.
		if any, aerr := s.store.AnyTemplateEver(ctx); aerr == nil && any {
			return false, nil
		}
	}
	// No version written: another replica's seed committed between the
	// check and the plan, which found every template already there.
	return err == nil && len(vs) > 0, err
}

// YAML renders a template as canonical YAML.
func YAML(t *template.Template) string {
	if t == nil {
		return ""
	}
	b, err := yaml.Marshal(t)
	if err != nil {
		return fmt.Sprintf("# cannot render: %v\n", err)
	}
	return string(b)
}

func diff(name string, from, to *template.Template) string {
	d := udiff.Unified("live/"+name, "files/"+name, YAML(from), YAML(to))
	return strings.TrimRight(d, "\n")
}
