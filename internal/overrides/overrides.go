// Package overrides owns a team's own choices for its launches' lifecycle,
// within the limits the platform team set in the templates: per template, an
// idle timeout (any from 10 minutes up to the template's idleTimeoutMax, or
// only shorter than its idleTimeout when it sets no maximum) and an
// off-hours schedule (added or changed, never removed where the template
// has one: sleeping only saves). Settings and templates in, the effective
// lifecycle or field-path errors out; the Service reads and changes a team's
// settings for its readers and team-admins.
package overrides

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/offhours"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
)

// MinIdleTimeout is the shortest idle timeout a team may choose.
const MinIdleTimeout = 10 * time.Minute

// Settings are a team's overrides, by template name.
type Settings struct {
	Templates map[string]Template `json:"templates"`
	UpdatedBy string              `json:"-"`
	UpdatedAt time.Time           `json:"-"`
	// Version counts the changes (0: never set); a change made from an
	// older one is refused.
	Version int64 `json:"-"`
}

// Template is a team's choice for one template ("" keeps the template's).
type Template struct {
	IdleTimeout string `json:"idleTimeout,omitempty"`
	Sleep       string `json:"sleep,omitempty"`
}

// Lookup finds a template's live version by name.
type Lookup func(name string) (*template.Template, error)

// Validate checks settings against the templates' limits; every problem
// comes back at once, by field path (templates.<name>.idleTimeout).
func (s Settings) Validate(lookup Lookup) error {
	var errs fault.List
	names := make([]string, 0, len(s.Templates))
	for n := range s.Templates {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 100 {
		errs.Addf("templates", "at most 100 templates, got %d", len(names))
	}
	for _, name := range names {
		o := s.Templates[name]
		path := "templates." + name
		t, err := lookup(name)
		if err != nil {
			errs.Addf(path, "no template %q", name)
			continue
		}
		lc := t.Spec.Lifecycle
		if o.IdleTimeout != "" {
			d, err := time.ParseDuration(o.IdleTimeout)
			own, _ := time.ParseDuration(lc.IdleTimeout)
			limit, _ := time.ParseDuration(lc.IdleTimeoutMax)
			if limit == 0 {
				limit = own
			}
			switch {
			case err != nil:
				errs.Addf(path+".idleTimeout", "%q is not a duration such as 30m or 4h", o.IdleTimeout)
			case lc.IdleTimeout == "":
				errs.Addf(path+".idleTimeout", "template %s has no idle timeout to change (the platform team sets spec.lifecycle.idleTimeout)", name)
			case d < MinIdleTimeout || d > limit:
				errs.Addf(path+".idleTimeout", "%s is outside what template %s allows: %s to %s (spec.lifecycle.idleTimeoutMax)", o.IdleTimeout, name, MinIdleTimeout, limit)
			}
		}
		if o.Sleep != "" {
			if _, err := offhours.Parse(o.Sleep); err != nil {
				errs.Addf(path+".sleep", "%v", err)
			} else if t.Spec.Workload == template.Job {
				errs.Addf(path+".sleep", "does not apply to jobs: a job stopped at night starts over")
			}
		}
	}
	return errs.Err()
}

// Effective is the lifecycle a team's launch of t follows: the template's,
// with the team's choices where it made them.
func (s Settings) Effective(t *template.Template) template.Lifecycle {
	lc := t.Spec.Lifecycle
	o, ok := s.Templates[t.Metadata.Name]
	if !ok {
		return lc
	}
	// Checked again: the template may have changed since the team chose.
	if one := (Settings{Templates: map[string]Template{t.Metadata.Name: {IdleTimeout: o.IdleTimeout}}}); o.IdleTimeout != "" && one.Validate(same(t)) == nil {
		lc.IdleTimeout = o.IdleTimeout
	}
	if o.Sleep != "" && t.Spec.Workload != template.Job {
		if _, err := offhours.Parse(o.Sleep); err == nil {
			lc.Sleep = o.Sleep
		}
	}
	return lc
}

func same(t *template.Template) Lookup {
	return func(string) (*template.Template, error) { return t, nil }
}

// Store keeps each team's settings.
type Store interface {
	TeamSettings(ctx context.Context, t team.Name) (Settings, error)
	// PutTeamSettings replaces the team's settings and returns their new
	// version; with ifVersion, only if that is the version stored (0: none
	// yet), else *fault.Stale — decided in the statement that writes.
	PutTeamSettings(ctx context.Context, t team.Name, s Settings, ifVersion *int64) (int64, error)
}

// Authorizer decides what the caller may do in a team.
type Authorizer interface {
	Allowed(id identity.Identity, t team.Name, permission access.Permission) bool
}

// Service reads and changes teams' settings: whoever may read a team's
// workloads reads them, a team-admin (members:manage) changes them.
type Service struct {
	store  Store
	authz  Authorizer
	lookup func(ctx context.Context, name string) (*template.Template, error)
	now    func() time.Time
}

// Options are what a Service is made of; all are required.
type Options struct {
	Store Store
	Authz Authorizer
	// Template looks up a template's live version by name.
	Template func(ctx context.Context, name string) (*template.Template, error)
	Now      func() time.Time
}

// New is complete when it returns.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Authz == nil || o.Template == nil || o.Now == nil {
		return nil, errors.New("overrides: Store, Authz, Template and Now are required")
	}
	return &Service{store: o.Store, authz: o.Authz, lookup: o.Template, now: o.Now}, nil
}

// Get is team's settings; another team's is *fault.NotFound.
func (s *Service) Get(ctx context.Context, team team.Name) (Settings, error) {
	id, _ := identity.From(ctx)
	if !s.authz.Allowed(id, team, access.WorkloadsRead) {
		return Settings{}, &fault.NotFound{Kind: "team", Name: team.String(), Denied: "may not read team " + team.String()}
	}
	return s.store.TeamSettings(ctx, team)
}

// Put replaces team's settings after checking them against the templates'
// limits.
func (s *Service) Put(ctx context.Context, team team.Name, set Settings, ifVersion *int64) (Settings, error) {
	id, _ := identity.From(ctx)
	if !s.authz.Allowed(id, team, access.WorkloadsRead) {
		return Settings{}, &fault.NotFound{Kind: "team", Name: team.String(), Denied: "may not read team " + team.String()}
	}
	if !s.authz.Allowed(id, team, access.MembersManage) {
		return Settings{}, &fault.Forbidden{Reason: fmt.Sprintf("only a team-admin of %q may change its settings", team)}
	}
	if err := set.Validate(func(name string) (*template.Template, error) { return s.lookup(ctx, name) }); err != nil {
		return Settings{}, err
	}
	if set.Templates == nil {
		set.Templates = map[string]Template{}
	}
	set.UpdatedBy, set.UpdatedAt = id.String(), s.now().UTC()
	v, err := s.store.PutTeamSettings(ctx, team, set, ifVersion)
	if err != nil {
		return Settings{}, err
	}
	set.Version = v
	return set, nil
}

// String says the settings in one line, for logs.
func (s Settings) String() string { return fmt.Sprintf("%d template overrides", len(s.Templates)) }
