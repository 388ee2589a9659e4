// Package authz owns authorization: the casbin model and role rules in policy/,
// role bindings of users and identity-provider groups per team (domains), which
// templates and GPU classes each team may use, and reloading all of it from its
// files after validation (a broken file keeps the old policy and says why,
// file:line). Each reload builds a new immutable policy with an empty decision
// cache of its own (a policy never changes, so no cached decision can go
// stale), so a removed binding takes effect on the next request. Deny unless
// a rule allows.
package authz

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/casbin/casbin/v2"
	"github.com/casbin/casbin/v2/model"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// Roles, from most to least powerful.
var Roles = []string{"platform-admin", "platform-engineer", "team-admin", "member", "viewer"}

// AnyTeam is the domain that stands for every team.
const AnyTeam = "*"

// Files are the policy files in a directory.
type Files struct {
	Model    string // model.conf
	Roles    string // roles.csv
	Bindings string // bindings.yaml
	// Classes are the GPU classes quotas may name (nil: names unchecked).
	Classes *gpu.Catalog
}

// InDir names the policy files of dir.
func InDir(dir string) Files {
	return Files{Model: filepath.Join(dir, "model.conf"), Roles: filepath.Join(dir, "roles.csv"), Bindings: filepath.Join(dir, "bindings.yaml")}
}

// Bindings is bindings.yaml.
type Bindings struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Groups     []GroupBinding   `json:"groups"`
	Users      []UserBinding    `json:"users"`
	Teams      map[string]Usage `json:"teams"`
	// SecondFactor lists the roles whose grants hold only for a person who
	// signed in with a second factor (the provider's amr or acr said so);
	// without one, the person holds their other roles alone.
	SecondFactor []string `json:"secondFactor,omitempty"`
}

// GroupBinding gives a role to the members of an identity-provider group.
type GroupBinding struct {
	Group string `json:"group"`
	Team  string `json:"team,omitempty"`
	Role  string `json:"role"`
}

// UserBinding gives a role to one user (issuer#subject).
type UserBinding struct {
	User string `json:"user"`
	Team string `json:"team,omitempty"`
	Role string `json:"role"`
}

// Usage says what a team may launch; "*" allows all.
type Usage struct {
	Templates  []string `json:"templates"`
	GPUClasses []string `json:"gpuClasses"`
	// StorageClasses a template's volumes may name; a volume without a
	// storage class (the cluster's default) is always allowed, a named one
	// only when listed.
	StorageClasses []string `json:"storageClasses,omitempty"`
	// VMUsers are the cloud-init users a VM template may create. Unset: any
	// user but root; root only when listed by name ("*" does not include it).
	VMUsers []string `json:"vmUsers,omitempty"`
	// Quota is the team's share of the cluster's GPUs, enforced by Kueue.
	// Unset: none (its workloads wait in its queue, unless its cohort lends).
	Quota *quota.Quota `json:"quota,omitempty"`
	// Budget is the team's dollar budget per period, its alerts and what
	// a spent budget does. Unset: none.
	Budget *budget.Budget `json:"budget,omitempty"`
	// Approval says which of the team's launches need a team-admin's
	// approval. Unset: none (unless a spent budget requires it).
	Approval *budget.Approval `json:"approval,omitempty"`
}

// Policy is one loaded, immutable policy.
type Policy struct {
	teams map[string]Usage
	// full decides for a person signed in with a second factor (every
	// binding); weak for one without (the bindings of roles that need one
	// left out).
	full, weak *decider
	// secondFactor are the roles that need a second factor.
	secondFactor []string
}

// decider is casbin over one set of bindings, with its index and cache.
type decider struct {
	enforcer *casbin.SyncedEnforcer
	// bound indexes the subjects that hold any binding, and where, so that a
	// decision asks casbin only about subjects and domains that can allow.
	bound map[string]*where
	// decisions caches casbin's answers. The policy never changes (a reload
	// builds a new one with an empty cache), so no entry can go stale.
	decisions sync.Map // decisionKey -> bool
	cached    atomic.Int64
}

type decisionKey struct{ subject, team, obj, act string }

// maxCached bounds the decision cache; past it, decisions are computed each time.
const maxCached = 500_000

type where struct {
	teams map[string]bool
	any   bool // bound in "*": every team
}

// Load reads and validates the policy files; every problem comes back at once
// as *fault.Invalid with file:line.
func Load(f Files) (*Policy, error) {
	var errs fault.List
	modelText, err := yamldoc.ReadFileMax(f.Model, yamldoc.MaxPolicyFileSize)
	if err != nil {
		return nil, fmt.Errorf("read policy model: %w", err)
	}
	_, err = model.NewModelFromString(string(modelText)) // checked here, with the files' other problems
	if err != nil {
		errs.Add(fault.Field{File: f.Model, Message: "invalid casbin model: " + err.Error()})
	}
	rules, err := readRoles(f.Roles, &errs)
	if err != nil {
		return nil, err
	}
	data, err := yamldoc.ReadFileMax(f.Bindings, yamldoc.MaxPolicyFileSize)
	if err != nil {
		return nil, fmt.Errorf("read policy bindings: %w", err)
	}
	var b Bindings
	lines, derr := yamldoc.Decode(f.Bindings, data, &b)
	if derr != nil {
		errs.AddErr("", derr)
	} else if verr := b.validate(f.Classes); verr != nil {
		errs.AddErr("", lines.Locate(f.Bindings, verr))
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	var grouping, weak [][]string
	for _, g := range b.Groups {
		grouping = append(grouping, []string{groupSubject(g.Group), g.Role, domain(g.Team)})
	}
	for _, u := range b.Users {
		grouping = append(grouping, []string{u.User, u.Role, domain(u.Team)})
	}
	for _, g := range grouping {
		if !slices.Contains(b.SecondFactor, g[1]) {
			weak = append(weak, g)
		}
	}
	// Each decider has a model of its own: an enforcer keeps its rules in
	// its model.
	full, err := newDecider(string(modelText), rules, grouping, f)
	if err != nil {
		return nil, err
	}
	wd, err := newDecider(string(modelText), rules, weak, f)
	if err != nil {
		return nil, err
	}
	return &Policy{teams: b.Teams, full: full, weak: wd, secondFactor: b.SecondFactor}, nil
}

func newDecider(modelText string, rules, grouping [][]string, f Files) (*decider, error) {
	m, err := model.NewModelFromString(modelText)
	if err != nil {
		return nil, fmt.Errorf("policy model %s: %w", f.Model, err)
	}
	e, err := casbin.NewSyncedEnforcer(m)
	if err != nil {
		return nil, fmt.Errorf("policy model %s: %w", f.Model, err)
	}
	e.EnableAutoSave(false)
	if len(rules) > 0 {
		if _, err := e.AddPolicies(rules); err != nil {
			return nil, fmt.Errorf("policy roles %s: %w", f.Roles, err)
		}
	}
	bound := map[string]*where{}
	for _, g := range grouping {
		w := bound[g[0]]
		if w == nil {
			w = &where{teams: map[string]bool{}}
			bound[g[0]] = w
		}
		if g[2] == AnyTeam {
			w.any = true
		} else {
			w.teams[g[2]] = true
		}
	}
	if len(grouping) > 0 {
		if _, err := e.AddGroupingPolicies(dedupe(grouping)); err != nil {
			return nil, fmt.Errorf("policy bindings %s: %w", f.Bindings, err)
		}
	}
	return &decider{enforcer: e, bound: bound}, nil
}

func domain(team string) string {
	if team == "" {
		return AnyTeam
	}
	return team
}

func groupSubject(g string) string { return "group:" + g }

func dedupe(rules [][]string) [][]string {
	seen := map[string]bool{}
	var out [][]string
	for _, r := range rules {
		k := strings.Join(r, "\x00")
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

// readRoles reads role rules "p, role, domain, object, action", one a line.
func readRoles(path string, errs *fault.List) ([][]string, error) {
	data, err := yamldoc.ReadFileMax(path, yamldoc.MaxPolicyFileSize)
	if err != nil {
		return nil, fmt.Errorf("read policy roles: %w", err)
	}
	var rules [][]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		bad := func(msg string, args ...any) {
			errs.Add(fault.Field{File: path, Line: n, Message: fmt.Sprintf(msg, args...)})
		}
		if len(parts) != 5 || parts[0] != "p" {
			bad("want 'p, role, domain, object, action', got %q", line)
			continue
		}
		role, obj, act := parts[1], parts[3], parts[4]
		if !slices.Contains(Roles, role) {
			bad("unknown role %q (roles: %s)", role, strings.Join(Roles, ", "))
		}
		if parts[2] != AnyTeam {
			bad("role rules apply in every team: domain must be %q, got %q (bind roles to teams in bindings.yaml)", AnyTeam, parts[2])
		}
		platformRole := role == "platform-admin" || role == "platform-engineer"
		if obj != "*" || act != "*" {
			perm, ok := access.Parse(obj + ":" + act)
			switch {
			case !ok:
				bad("unknown permission %q (known: %s)", obj+":"+act, strings.Join(access.Names(), ", "))
			case perm.PlatformScoped() && !platformRole:
				// A team role is bound in one team; these act on every
				// team (the catalog, the policy, the audit log, people).
				bad("%s acts on the whole platform: only platform-admin and platform-engineer may hold it, not the team role %s", obj+":"+act, role)
			}
		} else if !platformRole {
			bad("every permission (*, *) includes those that act on the whole platform: only platform-admin and platform-engineer may hold it, not the team role %s", role)
		}
		rules = append(rules, parts[1:])
	}
	return rules, sc.Err()
}

func (b *Bindings) validate(classes *gpu.Catalog) error {
	var errs fault.List
	if b.APIVersion != "gantry.dev/v1alpha1" || b.Kind != "Policy" {
		errs.Addf("kind", "must be apiVersion gantry.dev/v1alpha1, kind Policy")
	}
	for i, g := range b.Groups {
		p := fmt.Sprintf("groups[%d]", i)
		if strings.TrimSpace(g.Group) == "" {
			errs.Addf(p+".group", "is required")
		}
		checkBinding(&errs, p, g.Team, g.Role)
	}
	for i, u := range b.Users {
		p := fmt.Sprintf("users[%d]", i)
		if !strings.Contains(u.User, "#") {
			errs.Addf(p+".user", "%q must be issuer#subject (users are never bound by email)", u.User)
		}
		checkBinding(&errs, p, u.Team, u.Role)
	}
	for i, r := range b.SecondFactor {
		if !slices.Contains(Roles, r) {
			errs.Addf(fmt.Sprintf("secondFactor[%d]", i), "unknown role %q (roles: %s)", r, strings.Join(Roles, ", "))
		}
	}
	names := make([]string, 0, len(b.Teams))
	for t := range b.Teams {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		if t != AnyTeam && !teamName(t) {
			errs.Addf("teams."+t, "%q is not a team name (a lowercase DNS label, or * for teams not listed)", t)
		}
		for i, sc := range b.Teams[t].StorageClasses {
			if sc != "*" && !storageClassRE.MatchString(sc) {
				errs.Addf(fmt.Sprintf("teams.%s.storageClasses[%d]", t, i), "%q is not a storage class name (or *)", sc)
			}
		}
		for i, u := range b.Teams[t].VMUsers {
			if u != "*" && !vmUserRE.MatchString(u) {
				errs.Addf(fmt.Sprintf("teams.%s.vmUsers[%d]", t, i), "%q is not a Linux user name (or *)", u)
			}
		}
		if q := b.Teams[t].Quota; q != nil {
			q.Validate("teams."+t+".quota", classes, &errs)
		}
		if bu := b.Teams[t].Budget; bu != nil {
			bu.Validate("teams."+t+".budget", &errs)
		}
		if a := b.Teams[t].Approval; a != nil {
			a.Validate("teams."+t+".approval", &errs)
		}
	}
	return errs.Err()
}

var (
	storageClassRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	vmUserRE       = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

func checkBinding(errs *fault.List, path, team, role string) {
	if !slices.Contains(Roles, role) {
		errs.Addf(path+".role", "unknown role %q (roles: %s)", role, strings.Join(Roles, ", "))
	}
	if team != "" && team != AnyTeam && !teamName(team) {
		errs.Addf(path+".team", "%q is not a team name", team)
	}
	if (role == "platform-admin" || role == "platform-engineer") && team != "" && team != AnyTeam {
		errs.Addf(path+".team", "%s is a platform role: bind it without a team", role)
	}
}

// teamName reports whether s is a team name (the one rule, package team).
func teamName(s string) bool {
	_, err := team.Parse(s)
	return err == nil
}

// implied lists permissions that a stronger one grants too.
var implied = map[access.Permission]access.Permission{access.OwnWorkloadsManage: access.WorkloadsManage}

// Allowed reports whether id may do permission in team. The zero Permission
// is denied.
func (p *Policy) Allowed(id identity.Identity, t team.Name, permission access.Permission) bool {
	if permission == (access.Permission{}) {
		return false
	}
	team := t.String()
	if team == "" {
		team = AnyTeam
	}
	// A personal access token may be narrowed to reading and to one team.
	if id.ReadOnly && !permission.ReadOnly() {
		return false
	}
	if id.TokenTeam != "" && (team != id.TokenTeam || permission.PlatformScoped()) {
		return false // a narrowed token acts in its team, and nowhere platform-wide
	}
	if p.allowed(id, team, permission) {
		return true
	}
	if stronger, ok := implied[permission]; ok {
		return p.allowed(id, team, stronger)
	}
	return false
}

func (p *Policy) allowed(id identity.Identity, team string, permission access.Permission) bool {
	d := p.weak
	if id.SecondFactor {
		d = p.full
	}
	obj, act := permission.Object(), permission.Action()
	if d.allows(id.String(), team, obj, act) {
		return true
	}
	for _, g := range id.Groups {
		if d.allows(groupSubject(g), team, obj, act) {
			return true
		}
	}
	return false
}

// NeedsSecondFactor says whether id is refused permission everywhere only
// for want of a second factor: signed in with one, it would hold it.
func (p *Policy) NeedsSecondFactor(id identity.Identity, permission access.Permission) bool {
	if id.SecondFactor || p.AllowedSomewhere(id, permission) {
		return false
	}
	id.SecondFactor = true
	return p.AllowedSomewhere(id, permission)
}

// SecondFactorRoles are the roles that need a second factor.
func (p *Policy) SecondFactorRoles() []string { return slices.Clone(p.secondFactor) }

// Teams says where id holds permission: in every team (all), or in the teams
// listed.
func (p *Policy) Teams(id identity.Identity, permission access.Permission) (all bool, teams []string) {
	if id.TokenTeam != "" {
		if p.Allowed(id, team.Name(id.TokenTeam), permission) {
			return false, []string{id.TokenTeam}
		}
		return false, nil
	}
	if p.Allowed(id, AnyTeam, permission) {
		return true, nil
	}
	seen := map[string]bool{}
	subjects := append([]string{id.String()}, prefixed(id.Groups)...)
	for _, s := range subjects {
		if w := p.full.bound[s]; w != nil {
			for t := range w.teams {
				if !seen[t] && p.Allowed(id, team.Name(t), permission) {
					seen[t] = true
					teams = append(teams, t)
				}
			}
		}
	}
	sort.Strings(teams)
	return false, teams
}

// Known reports whether team is one of the policy's teams: listed under
// teams (every team is, when "*" is listed) or named by a binding.
func (p *Policy) Known(t team.Name) bool {
	team := t.String()
	if _, ok := p.teams[team]; ok && team != AnyTeam {
		return true
	}
	if _, ok := p.teams[AnyTeam]; ok {
		return true
	}
	for _, w := range p.full.bound {
		if w.teams[team] {
			return true
		}
	}
	return false
}

// AllowedSomewhere reports whether id holds permission in at least one team:
// the gate a route declares, before the operation checks the team it touches.
func (p *Policy) AllowedSomewhere(id identity.Identity, permission access.Permission) bool {
	all, teams := p.Teams(id, permission)
	return all || len(teams) > 0
}

func prefixed(groups []string) []string {
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = groupSubject(g)
	}
	return out
}

// allows asks casbin whether subject may act, in the team or through a binding
// that holds in every team; subjects without a binding there are denied without
// asking.
func (p *decider) allows(subject, team, obj, act string) bool {
	w := p.bound[subject]
	if w == nil || !(w.any || w.teams[team]) {
		return false // no binding that could allow: nothing to ask or cache
	}
	k := decisionKey{subject, team, obj, act}
	if v, ok := p.decisions.Load(k); ok {
		return v.(bool)
	}
	ok := p.decide(w, subject, team, obj, act)
	if p.cached.Load() < maxCached {
		if _, loaded := p.decisions.LoadOrStore(k, ok); !loaded {
			p.cached.Add(1)
		}
	}
	return ok
}

func (p *decider) decide(w *where, subject, team, obj, act string) bool {
	if w.teams[team] {
		if ok, err := p.enforcer.Enforce(subject, team, obj, act); err == nil && ok {
			return true
		}
	}
	if w.any {
		if ok, err := p.enforcer.Enforce(subject, AnyTeam, obj, act); err == nil && ok {
			return true
		}
	}
	return false
}

// RolesWith are the roles whose rules grant permission (in roles.csv's
// order), to say who could grant it to someone refused.
func (p *Policy) RolesWith(permission access.Permission) []string {
	rules, err := p.full.enforcer.GetPolicy()
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range rules {
		if len(r) < 4 || slices.Contains(out, r[0]) {
			continue
		}
		if (r[2] == "*" || r[2] == permission.Object()) && (r[3] == "*" || r[3] == permission.Action()) {
			out = append(out, r[0])
		}
	}
	return out
}

// MayUse reports whether team may launch what u uses; problems name the
// field.
func (p *Policy) MayUse(t team.Name, u access.Use) error {
	team := t.String()
	allowed, ok := p.teams[team]
	if !ok {
		allowed, ok = p.teams[AnyTeam] // the default for teams not listed, if any
	}
	listed := func(list []string, v string) bool { return slices.Contains(list, "*") || slices.Contains(list, v) }
	var errs fault.List
	if !ok || !listed(allowed.Templates, u.Template) {
		errs.Addf("template", "team %q may not use template %q", team, u.Template)
	}
	switch {
	case ok && listed(allowed.GPUClasses, u.GPUClass):
	case u.GPUClass == gpu.CPUClass:
		errs.Addf("cpuOnly", "team %q may not launch CPU-only (policy: list %s in teams.%s.gpuClasses)", team, gpu.CPUClass, team)
	default:
		errs.Addf("gpu.class", "team %q may not use GPU class %q", team, u.GPUClass)
	}
	for _, sc := range u.StorageClasses {
		if sc != "" && (!ok || !listed(allowed.StorageClasses, sc)) {
			errs.Addf("spec.volumes.storageClass", "team %q may not use storage class %q (policy: teams.%s.storageClasses)", team, sc, team)
		}
	}
	switch {
	case u.VMUser == "":
	case u.VMUser == "root":
		if !ok || !slices.Contains(allowed.VMUsers, "root") {
			errs.Addf("spec.vm.user", "team %q may not create VMs with user root (policy: list it by name in teams.%s.vmUsers)", team, team)
		}
	case ok && len(allowed.VMUsers) > 0 && !listed(allowed.VMUsers, u.VMUser):
		errs.Addf("spec.vm.user", "team %q may not create VMs with user %q (policy: teams.%s.vmUsers)", team, u.VMUser, team)
	}
	return errs.Err()
}

// Quota is a team's GPU quota: its own entry's, else the default entry's
// ("*"), else none.
func (p *Policy) Quota(t team.Name) quota.Quota {
	team := t.String()
	u, ok := p.teams[team]
	if !ok {
		u = p.teams[AnyTeam]
	}
	if u.Quota == nil {
		return quota.Quota{}
	}
	return *u.Quota
}

// usage is a team's entry, else the default entry ("*").
func (p *Policy) usage(team string) Usage {
	u, ok := p.teams[team]
	if !ok {
		u = p.teams[AnyTeam]
	}
	return u
}

// Budget is a team's budget (nil: none).
func (p *Policy) Budget(t team.Name) *budget.Budget { return p.usage(t.String()).Budget }

// Approval is a team's approval rule (nil: none).
func (p *Policy) Approval(t team.Name) *budget.Approval { return p.usage(t.String()).Approval }

// Budgets are the budgets of the teams the policy names (not the default).
func (p *Policy) Budgets() map[string]budget.Budget {
	out := map[string]budget.Budget{}
	for t, u := range p.teams {
		if t != AnyTeam && u.Budget != nil {
			out[t] = *u.Budget
		}
	}
	return out
}

// Quotas are the quotas of the teams the policy names (not the default).
func (p *Policy) Quotas() map[string]quota.Quota {
	out := map[string]quota.Quota{}
	for t := range p.teams {
		if t != AnyTeam {
			out[t] = p.Quota(team.Name(t))
		}
	}
	return out
}

// Authorizer holds the current policy and swaps it on reload.
type Authorizer struct {
	files   Files
	current atomic.Pointer[Policy] // base with overlay laid over it
	stamp   atomic.Value           // string: sizes and mtimes of the files

	mu      sync.Mutex // serializes Reload and SetOverlay
	base    *Policy    // the files' policy
	overlay Overlay
}

// Overlay is what the platform team changed through the API over the
// policy files: teams' quotas and budgets, by team. A team the files do not
// name gets the default entry's ("*") with the change.
type Overlay struct {
	Quotas  map[string]quota.Quota
	Budgets map[string]budget.Budget
}

// New loads the policy files; a problem is a start-up error.
func New(f Files) (*Authorizer, error) {
	p, err := Load(f)
	if err != nil {
		return nil, err
	}
	a := &Authorizer{files: f, base: p}
	a.current.Store(p)
	a.stamp.Store(stamp(f))
	return a, nil
}

// SetOverlay lays o over the files' policy, now and after every reload.
func (a *Authorizer) SetOverlay(o Overlay) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.overlay = o
	a.current.Store(a.base.with(o))
}

// with is p with o laid over its teams (p itself unchanged: a copy whose
// deciders are shared, the bindings being the same).
func (p *Policy) with(o Overlay) *Policy {
	if len(o.Quotas) == 0 && len(o.Budgets) == 0 {
		return p
	}
	out := *p
	out.teams = make(map[string]Usage, len(p.teams))
	for t, u := range p.teams {
		out.teams[t] = u
	}
	entry := func(t string) Usage {
		if u, ok := out.teams[t]; ok {
			return u
		}
		return p.teams[AnyTeam]
	}
	for t, q := range o.Quotas {
		u := entry(t)
		u.Quota = &q
		out.teams[t] = u
	}
	for t, b := range o.Budgets {
		u := entry(t)
		u.Budget = &b
		out.teams[t] = u
	}
	return &out
}

// Policy is the policy in force.
func (a *Authorizer) Policy() *Policy { return a.current.Load() }

// ErrUnchanged means Reload found the files as they were.
var ErrUnchanged = errors.New("policy files unchanged")

// Reload loads the files again if they changed. A broken file keeps the policy
// in force and returns why (file:line).
func (a *Authorizer) Reload() error {
	s := stamp(a.files)
	if s == a.stamp.Load().(string) {
		return ErrUnchanged
	}
	p, err := Load(a.files)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.base = p
	a.current.Store(p.with(a.overlay))
	a.mu.Unlock()
	a.stamp.Store(s)
	return nil
}

func stamp(f Files) string {
	var b strings.Builder
	for _, path := range []string{f.Model, f.Roles, f.Bindings} {
		if fi, err := os.Stat(path); err == nil {
			fmt.Fprintf(&b, "%s:%d:%d;", path, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

// Allowed decides with the policy in force.
func (a *Authorizer) Allowed(id identity.Identity, team team.Name, permission access.Permission) bool {
	return a.Policy().Allowed(id, team, permission)
}

// Known answers with the policy in force.
func (a *Authorizer) Known(t team.Name) bool { return a.Policy().Known(t) }

// AllowedSomewhere decides with the policy in force.
func (a *Authorizer) AllowedSomewhere(id identity.Identity, permission access.Permission) bool {
	return a.Policy().AllowedSomewhere(id, permission)
}

// Teams answers with the policy in force.
func (a *Authorizer) Teams(id identity.Identity, permission access.Permission) (bool, []string) {
	return a.Policy().Teams(id, permission)
}

// MayUse answers with the policy in force.
// RolesWith implements the API's refusal messages: the roles that grant
// permission.
func (a *Authorizer) RolesWith(permission access.Permission) []string {
	return a.Policy().RolesWith(permission)
}

func (a *Authorizer) MayUse(team team.Name, u access.Use) error {
	return a.Policy().MayUse(team, u)
}

// Quota answers with the policy in force.
func (a *Authorizer) Quota(team team.Name) quota.Quota {
	return a.Policy().Quota(team)
}

// Budget answers with the policy in force.
func (a *Authorizer) Budget(t team.Name) *budget.Budget { return a.Policy().Budget(t) }

// Approval answers with the policy in force.
func (a *Authorizer) Approval(t team.Name) *budget.Approval { return a.Policy().Approval(t) }

// Quotas answers with the policy in force.
func (a *Authorizer) Quotas() map[string]quota.Quota { return a.Policy().Quotas() }

// Budgets answers with the policy in force.
func (a *Authorizer) Budgets() map[string]budget.Budget { return a.Policy().Budgets() }

// NeedsSecondFactor answers with the policy in force.
func (a *Authorizer) NeedsSecondFactor(id identity.Identity, permission access.Permission) bool {
	return a.Policy().NeedsSecondFactor(id, permission)
}
