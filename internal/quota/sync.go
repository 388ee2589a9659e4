package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/team"
)

// Policy is the quotas in force (package authz's Policy).
type Policy interface {
	// Quotas are the quotas of the teams the policy names.
	Quotas() map[string]Quota
	// Quota is a team's, from its entry or the policy's default one.
	Quota(t team.Name) Quota
}

// Kueue is the cluster's Kueue, as the Syncer drives it (package kube's
// Cluster).
type Kueue interface {
	// Teams are the teams that have a namespace Gantry applied.
	Teams(ctx context.Context) ([]string, error)
	// SyncQuotas applies the objects.
	SyncQuotas(ctx context.Context, objs []Object) error
	// ActivateCheck marks Gantry's AdmissionCheck active, unless it is.
	ActivateCheck(ctx context.Context) error
}

// Holds say whether a team's spent budget holds its launches (package
// budget's Service).
type Holds interface {
	Held(ctx context.Context, t team.Name) (why string, held bool, err error)
}

// SyncerOptions are what a Syncer is made of; all but Refresh are required.
type SyncerOptions struct {
	// Policy is the policy in force now (it reloads).
	Policy     func() Policy
	Classes    *gpu.Catalog
	Kueue      Kueue
	Holds      Holds
	Priorities []Priority
	Log        *slog.Logger
	// Refresh hands unchanged objects to Kueue again every Refresh passes
	// (someone may have edited them: the Kueue adapter applies those that
	// changed on the cluster). Default 10.
	Refresh int
	// Fleet, in a MultiKueue manager, are the worker clusters every team's
	// queue dispatches to (Options.Fleet); nil: none.
	Fleet func() []Worker
}

// Syncer keeps Kueue's objects as the policy's quotas say: one pass per Run,
// from the lifecycle owner's loop. It hands the objects to Kueue when the
// policy (or the first pass) gives other objects than it last handed, and
// every Refresh passes (Kueue applies those that changed).
type Syncer struct {
	o    SyncerOptions
	last string
	pass int
}

// NewSyncer checks the options.
func NewSyncer(o SyncerOptions) (*Syncer, error) {
	if o.Policy == nil || o.Classes == nil || o.Kueue == nil || o.Holds == nil || o.Log == nil {
		return nil, errors.New("quota: a Syncer needs Policy, Classes, Kueue, Holds and Log")
	}
	if o.Refresh <= 0 {
		o.Refresh = 10
	}
	return &Syncer{o: o}, nil
}

// Run is one pass. It reports whether it applied the objects. On an error
// nothing after it is done: a team's budget that cannot be read leaves the
// queues as last applied rather than release a hold by accident.
func (s *Syncer) Run(ctx context.Context) (applied bool, err error) {
	// The teams the policy names, and those (allowed by its default entry)
	// that have launched: each gets its ClusterQueue.
	policy := s.o.Policy()
	teams := policy.Quotas()
	onCluster, err := s.o.Kueue.Teams(ctx)
	if err != nil {
		return false, fmt.Errorf("teams on the cluster: %w", err)
	}
	for _, t := range onCluster {
		if _, ok := teams[t]; !ok {
			teams[t] = policy.Quota(team.Name(t))
		}
	}
	// Every queue carries Gantry's approval check; a team whose spent
	// budget blocks launches has its queue held.
	held := map[string]bool{}
	for t := range teams {
		_, ok, err := s.o.Holds.Held(ctx, team.Name(t))
		if err != nil {
			return false, fmt.Errorf("team %s's budget (queues left as they are): %w", t, err)
		}
		held[t] = ok
	}
	opt := Options{ApprovalCheck: true, Held: held}
	if s.o.Fleet != nil {
		opt.Fleet = s.o.Fleet()
	}
	objs := Objects(s.o.Classes, teams, s.o.Priorities, opt)
	data, err := json.Marshal(objs)
	if err != nil {
		return false, err
	}
	pass := s.pass
	s.pass++
	if string(data) == s.last && pass%s.o.Refresh != 0 {
		return false, nil
	}
	if err := s.o.Kueue.SyncQuotas(ctx, objs); err != nil {
		return false, fmt.Errorf("applying the Kueue objects: %w", err)
	}
	// Kueue holds every queue whose checks are not active: say so again
	// (the AdmissionCheck may have been made anew).
	if err := s.o.Kueue.ActivateCheck(ctx); err != nil {
		return true, fmt.Errorf("marking Gantry's AdmissionCheck active: %w", err)
	}
	if string(data) != s.last {
		s.o.Log.Info("quotas: Kueue objects synced", "objects", len(objs))
	}
	s.last = string(data)
	return true, nil
}
