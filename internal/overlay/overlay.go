// Package overlay owns the platform team's changes, made through the API
// (the portal's Platform page), to what the files in git also set: a GPU
// class's price, a team's quota, a team's budget, a node group's size,
// price and timings, and a worker cluster's cordon. An edit is checked as
// the files are, stored with who made it and when (the request itself is in
// the audit log), laid over the files' values on every replica (the server
// applies the Set), and shown with the value it shadows; a reset removes it
// and the files' value is in force again. The files stay the source of
// truth for everything not edited here.
package overlay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/team"
)

// Kinds of edit, and the permission each needs on every team.
const (
	Price  = "price"  // a GPU class's price (gpu.Price), by class: gpu-classes:write
	Quota  = "quota"  // a team's quota (quota.Quota), by team: policy:write
	Budget = "budget" // a team's budget (budget.Budget), by team: policy:write
	// NodeGroup is a node group's change (nodegroup.Change), by group:
	// gpu-classes:write (the groups are declared beside the classes).
	NodeGroup = "nodeGroup"
	// Cluster is a worker cluster's cordon (fleet.Change), by cluster:
	// gpu-classes:write.
	Cluster = "cluster"
)

// Kinds lists them.
var Kinds = []string{Price, Quota, Budget, NodeGroup, Cluster}

func permission(kind string) access.Permission {
	switch kind {
	case Price, NodeGroup, Cluster:
		return access.GPUClassesWrite
	}
	return access.PolicyWrite
}

// teamKeyed reports whether kind's edits are keyed by team.
func teamKeyed(kind string) bool { return kind == Quota || kind == Budget }

// Edit is one change as stored.
type Edit struct {
	Kind, Key string // the class (price) or the team (quota, budget)
	Value     json.RawMessage
	By        string // issuer#subject
	At        time.Time
}

// Store keeps the edits.
type Store interface {
	PutOverlay(ctx context.Context, e Edit) error
	DeleteOverlay(ctx context.Context, kind, key string) (removed bool, err error)
	Overlays(ctx context.Context) ([]Edit, error)
}

// Set is the edits decoded, as they are laid over the files.
type Set struct {
	Prices  map[string]gpu.Price
	Quotas  map[string]quota.Quota
	Budgets map[string]budget.Budget
	// NodeGroups are the changes of node groups, to lay over the file's
	// (nodegroup.Set.With).
	NodeGroups map[string]nodegroup.Change
	// Clusters are the worker clusters' cordons, to lay over the clusters
	// file (fleet.Fleet.With).
	Clusters map[string]fleet.Change
	Edits    []Edit // as stored: who made each and when
}

func newSet(edits []Edit) Set {
	return Set{Prices: map[string]gpu.Price{}, Quotas: map[string]quota.Quota{}, Budgets: map[string]budget.Budget{},
		NodeGroups: map[string]nodegroup.Change{}, Clusters: map[string]fleet.Change{}, Edits: edits}
}

// Fingerprint identifies a set of edits (for a replica to tell whether
// another changed them).
func (s Set) Fingerprint() string {
	var b strings.Builder
	for _, e := range s.Edits {
		fmt.Fprintf(&b, "%s/%s@%d=%s;", e.Kind, e.Key, e.At.UnixMicro(), e.Value)
	}
	return b.String()
}

// Authorizer says on which teams a person holds a permission.
type Authorizer interface {
	Teams(id identity.Identity, permission access.Permission) (all bool, teams []string)
	Known(t team.Name) bool
}

// Options build a Service; all are required.
type Options struct {
	Store   Store
	Authz   Authorizer
	Classes *gpu.Catalog // the classes in force: what a price or quota may name
	// NodeGroups are the node groups of the file: what a node group edit
	// may name, and what it is checked against.
	NodeGroups *nodegroup.Set
	// Fleet is the clusters file's worker clusters: what a cordon may name.
	Fleet *fleet.Fleet
	// Apply puts a set of edits in force on this replica (the server lays
	// it over the files).
	Apply func(context.Context, Set) error
	Now   func() time.Time
}

// Service reads and changes the edits.
type Service struct{ o Options }

// New returns a Service.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Authz == nil || o.Classes == nil || o.NodeGroups == nil || o.Fleet == nil || o.Apply == nil || o.Now == nil {
		return nil, fmt.Errorf("overlay.New: Store, Authz, Classes, NodeGroups, Fleet, Apply and Now are required")
	}
	return &Service{o: o}, nil
}

// Load reads the stored edits (for the server's loop; no caller to check).
// An edit that no longer holds (its class is gone from the files) is left
// out of the set and named in the error, with the rest applied.
func (s *Service) Load(ctx context.Context) (Set, error) {
	edits, err := s.o.Store.Overlays(ctx)
	if err != nil {
		return Set{}, err
	}
	set := newSet(edits)
	var errs fault.List
	for _, e := range edits {
		if err := s.decode(e, set); err != nil {
			errs.Addf(e.Kind+"s."+e.Key, "%v", err)
		}
	}
	return set, errs.Err()
}

// decode checks one edit and puts it into set.
func (s *Service) decode(e Edit, set Set) error {
	var errs fault.List
	dec := func(v any) error {
		if err := json.Unmarshal(e.Value, v); err != nil {
			return fmt.Errorf("not a %s: %w", e.Kind, err)
		}
		return nil
	}
	switch e.Kind {
	case Price:
		var p gpu.Price
		if err := dec(&p); err != nil {
			return err
		}
		if _, ok := s.o.Classes.Get(e.Key); !ok {
			return &fault.NotFound{Kind: "GPU class", Name: e.Key}
		}
		if p.OnDemand <= 0 {
			errs.Addf("onDemand", "must be more than 0 (USD per GPU-hour)")
		}
		if p.Spot < 0 || p.Spot > p.OnDemand {
			errs.Addf("spot", "must be between 0 (no spot price) and the on-demand price %v", p.OnDemand)
		}
		if p.Currency != "" && p.Currency != "USD" {
			errs.Addf("currency", "%q: Gantry bills in USD", p.Currency)
		}
		if err := errs.Err(); err != nil {
			return err
		}
		set.Prices[e.Key] = p
	case Quota:
		var q quota.Quota
		if err := dec(&q); err != nil {
			return err
		}
		if q.Validate("", s.o.Classes, &errs); errs.Err() != nil {
			return relative(errs.Err())
		}
		set.Quotas[e.Key] = q
	case Budget:
		var b budget.Budget
		if err := dec(&b); err != nil {
			return err
		}
		if b.Validate("", &errs); errs.Err() != nil {
			return relative(errs.Err())
		}
		set.Budgets[e.Key] = b
	case NodeGroup:
		var c nodegroup.Change
		if err := dec(&c); err != nil {
			return err
		}
		if _, err := s.o.NodeGroups.Changed(e.Key, c, s.o.Classes.Names()); err != nil {
			return err
		}
		set.NodeGroups[e.Key] = c
	case Cluster:
		var c fleet.Change
		if err := dec(&c); err != nil {
			return err
		}
		if _, ok := s.o.Fleet.Get(e.Key); !ok {
			return &fault.NotFound{Kind: "worker cluster", Name: e.Key}
		}
		set.Clusters[e.Key] = c
	default:
		return fmt.Errorf("%q is not a kind of edit (%v)", e.Kind, Kinds)
	}
	return nil
}

// relative makes the field paths of a value checked under "" relative to
// the request's body ("amount", not ".amount").
func relative(err error) error {
	if inv, ok := err.(*fault.Invalid); ok {
		for i := range inv.Fields {
			inv.Fields[i].Path = strings.TrimPrefix(inv.Fields[i].Path, ".")
		}
	}
	return err
}

// may checks that the caller holds kind's permission on every team.
func (s *Service) may(ctx context.Context, kind string) (identity.Identity, error) {
	id, ok := identity.From(ctx)
	if !ok {
		return id, &fault.Forbidden{Reason: "not signed in"}
	}
	if all, _ := s.o.Authz.Teams(id, permission(kind)); !all {
		return id, &fault.Forbidden{Reason: fmt.Sprintf("changing a %s needs %s on every team", kind, permission(kind))}
	}
	return id, nil
}

// Put records value as the kind edit of key (a class or a team) and puts
// it in force on this replica; others follow within their reload interval.
// A value that does not hold is a *fault.Invalid with field paths; nothing
// is stored then.
func (s *Service) Put(ctx context.Context, kind, key string, value any) (Set, error) {
	id, err := s.may(ctx, kind)
	if err != nil {
		return Set{}, err
	}
	if teamKeyed(kind) {
		t, err := team.Parse(key)
		if err != nil {
			return Set{}, err
		}
		if !s.o.Authz.Known(t) {
			return Set{}, &fault.NotFound{Kind: "team", Name: key}
		}
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return Set{}, err
	}
	e := Edit{Kind: kind, Key: key, Value: raw, By: id.String(), At: s.o.Now().UTC().Truncate(time.Microsecond)}
	probe := newSet(nil)
	if err := s.decode(e, probe); err != nil {
		return Set{}, err
	}
	if err := s.o.Store.PutOverlay(ctx, e); err != nil {
		return Set{}, err
	}
	return s.applyNow(ctx)
}

// Reset removes the kind edit of key: the files' value is in force again.
// Resetting what was not edited is not an error.
func (s *Service) Reset(ctx context.Context, kind, key string) (Set, error) {
	if _, err := s.may(ctx, kind); err != nil {
		return Set{}, err
	}
	if _, err := s.o.Store.DeleteOverlay(ctx, kind, key); err != nil {
		return Set{}, err
	}
	return s.applyNow(ctx)
}

// List is the edits in force, for whoever reads the platform's settings.
func (s *Service) List(ctx context.Context) (Set, error) {
	id, ok := identity.From(ctx)
	if all, _ := s.o.Authz.Teams(id, access.PolicyRead); !ok || !all {
		if all, _ := s.o.Authz.Teams(id, access.GPUClassesWrite); !all {
			return Set{}, &fault.Forbidden{Reason: "reading the platform's edits needs policy:read or gpu-classes:write on every team"}
		}
	}
	set, err := s.load(ctx)
	sort.Slice(set.Edits, func(i, j int) bool { return set.Edits[i].At.After(set.Edits[j].At) })
	return set, err
}

// load is Load with an edit that no longer holds left out, not an error:
// it stays listed (so that it can be reset) and is not applied.
func (s *Service) load(ctx context.Context) (Set, error) {
	set, err := s.Load(ctx)
	var stale *fault.Invalid
	if errors.As(err, &stale) {
		return set, nil
	}
	return set, err
}

func (s *Service) applyNow(ctx context.Context) (Set, error) {
	set, err := s.load(ctx)
	if err != nil {
		return set, err
	}
	return set, s.o.Apply(ctx, set)
}
