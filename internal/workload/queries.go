package workload

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/team"
)

// Get returns one workload.
func (s *Service) Get(ctx context.Context, id string) (Workload, error) {
	w, err := s.visible(ctx, id)
	if err != nil {
		return w, err
	}
	ws := []Workload{w}
	s.flag(ctx, ws)
	return ws[0], nil
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
	id, _ := identity.From(ctx)
	all, teams := s.authz.Teams(id, access.WorkloadsRead)
	switch {
	case all:
	case f.Team != "":
		if !slices.Contains(teams, f.Team.String()) {
			return Page{Items: []Workload{}}, nil // another team's workloads: none to see
		}
	default:
		if len(teams) == 0 {
			return Page{Items: []Workload{}}, nil
		}
		for _, t := range teams {
			f.Teams = append(f.Teams, team.Name(t)) // names from the policy, checked when it loaded
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
	s.flag(ctx, p.Items)
	return p, nil
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
	for {
		r, err := s.cluster.Logs(ctx, s.namespace(w.Team), id, follow, tailLines)
		var none *NoPodYet
		if !follow || !errors.As(err, &none) {
			return r, err
		}
		// Following a workload whose pod is not placed or started yet
		// (Pending, Queued, its image pulling): wait for it, as a person
		// pasting launch-then-follow expects, until it runs, ends or the
		// caller goes away.
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second): // wall time: a person waits, not a loop
		}
		if w, werr := s.store.Workload(ctx, id); werr != nil || w.Status.Ended() {
			return nil, err
		}
	}
}

// NoPodYet is the cluster's answer for the log of a workload none of whose
// pods is placed on a node yet: a *fault.Conflict to the API; a followed log
// waits for it instead.
type NoPodYet struct{ ID string }

func (e *NoPodYet) Error() string { return e.conflict().Error() }

// Unwrap makes it a *fault.Conflict for whoever maps errors.
func (e *NoPodYet) Unwrap() error { return e.conflict() }

func (e *NoPodYet) conflict() *fault.Conflict {
	return &fault.Conflict{Kind: "workload", Name: e.ID, Reason: "has no running pod yet, so no log"}
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
	return s.cluster.Events(ctx, s.namespace(w.Team), w.Name, w.ID)
}

// Namespace is the namespace a workload's objects live in.
func (s *Service) Namespace(w Workload) string { return s.namespace(w.Team) }

// Manageable returns the workload if the caller may stop, start or delete
// it (its owner, or who manages the team's workloads), else the error the
// API answers.
func (s *Service) Manageable(ctx context.Context, id string) (Workload, error) {
	return s.manageable(ctx, id)
}
