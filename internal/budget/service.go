package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/team"
)

// Alert is one alert threshold of a budget reached in a period.
type Alert struct {
	Team       string
	CostCenter string // "" for the team's budget
	From       time.Time
	Threshold  float64
	At         time.Time
	Spent      float64
	Amount     float64
}

// Rules are the teams' budgets and approval rules: the policy in force.
type Rules interface {
	Budget(t team.Name) *Budget
	Approval(t team.Name) *Approval
	Budgets() map[string]Budget
}

// Spender meters what a team spent in [from, to): in all, and by the cost
// center of the templates it ran.
type Spender interface {
	Spend(ctx context.Context, t team.Name, from, to time.Time) (total float64, byCostCenter map[string]float64, err error)
}

// Store records alerts once, with their webhook, and the audit trail.
type Store interface {
	// Teams are the teams that have launched anything.
	Teams(ctx context.Context) ([]string, error)
	// RecordBudgetAlert records a once, with its webhook and its audit
	// record, in one transaction (false: recorded before).
	RecordBudgetAlert(ctx context.Context, a Alert, m notify.Message, rec audit.Record) (recorded bool, err error)
	BudgetAlerts(ctx context.Context, t team.Name, from time.Time) ([]Alert, error)
}

// Readers says where an identity may read (the policy): List shows the
// budgets of those teams only.
type Readers interface {
	Teams(id identity.Identity, permission access.Permission) (all bool, teams []string)
}

// Options configure a Service.
type Options struct {
	Rules   Rules
	Readers Readers
	Spender Spender
	Store   Store
	Log     *slog.Logger
	Now     func() time.Time
	// Fresh is how long a team's status is reused before it is metered
	// again (default 10 s).
	Fresh time.Duration
}

// Service tracks the teams' budgets: their status for the API's banner and
// for launches, and alerts when a threshold is reached.
type Service struct {
	o     Options
	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	at  time.Time
	st  Status
	ccs []Status
}

// New is complete when it returns.
func New(o Options) (*Service, error) {
	if o.Rules == nil || o.Readers == nil || o.Spender == nil || o.Store == nil || o.Log == nil || o.Now == nil {
		return nil, errors.New("budget: rules, readers, spender, store, log and clock are required")
	}
	if o.Fresh <= 0 {
		o.Fresh = 10 * time.Second
	}
	return &Service{o: o, cache: map[string]cached{}}, nil
}

// Status is where team's budget stands now, and its cost centers' (nil: the
// team has no budget).
func (s *Service) Status(ctx context.Context, t team.Name) (*Status, []Status, error) {
	team := t.String()
	b := s.o.Rules.Budget(t)
	if b == nil {
		return nil, nil, nil
	}
	now := s.o.Now()
	s.mu.Lock()
	c, ok := s.cache[team]
	s.mu.Unlock()
	if ok && now.Sub(c.at) < s.o.Fresh && now.Sub(c.at) >= 0 && c.st.Amount == b.Amount && !now.Before(c.st.From) && now.Before(c.st.To) && c.st.AtLimit == b.Limit() {
		return &c.st, c.ccs, nil
	}
	from, to := b.PeriodAt(now)
	total, byCC, err := s.o.Spender.Spend(ctx, t, from, to)
	if err != nil {
		return nil, nil, fmt.Errorf("budget of team %s: %w", team, err)
	}
	st := b.Status(t, total, from, to)
	var ccs []Status
	for _, cc := range sortedKeys(b.CostCenters) {
		ccs = append(ccs, b.CostCenterStatus(t, cc, byCC[cc], from, to))
	}
	s.mu.Lock()
	s.cache[team] = cached{at: now, st: st, ccs: ccs}
	s.mu.Unlock()
	return &st, ccs, nil
}

// Listed is one team's budget as List shows it.
type Listed struct {
	Status      Status
	CostCenters []Status
}

// List is the budgets the caller (the identity in ctx) may read: of every
// team they read workloads in (only that team, when only is set), those
// with a budget, in the teams' order.
func (s *Service) List(ctx context.Context, only string) ([]Listed, error) {
	id, _ := identity.From(ctx)
	all, mine := s.o.Readers.Teams(id, access.WorkloadsRead)
	teams, err := s.Teams(ctx)
	if err != nil {
		return nil, err
	}
	out := []Listed{}
	for _, t := range teams {
		if (!all && !slices.Contains(mine, t)) || (only != "" && t != only) {
			continue
		}
		st, ccs, err := s.Status(ctx, team.Name(t))
		if err != nil {
			return nil, err
		}
		if st != nil {
			out = append(out, Listed{Status: *st, CostCenters: ccs})
		}
	}
	return out, nil
}

// Teams are the teams with a budget, sorted: those the policy names, and
// those that have launched and fall under its default ("*") budget.
func (s *Service) Teams(ctx context.Context) ([]string, error) {
	set := s.o.Rules.Budgets()
	launched, err := s.o.Store.Teams(ctx)
	if err != nil {
		return nil, fmt.Errorf("budgets: teams: %w", err)
	}
	for _, t := range launched {
		if _, ok := set[t]; !ok {
			if b := s.o.Rules.Budget(team.Name(t)); b != nil {
				set[t] = *b
			}
		}
	}
	return sortedKeys(set), nil
}

// Verdict decides on a launch in team costing pricePerHour for hours (its
// max runtime; 0: none): held, waiting for approval (for how long), or
// neither.
func (s *Service) Verdict(ctx context.Context, team team.Name, pricePerHour, hours float64) (Verdict, time.Duration, error) {
	st, _, err := s.Status(ctx, team)
	if err != nil {
		return Verdict{}, 0, err
	}
	a := s.o.Rules.Approval(team)
	v := Launch(st, a, pricePerHour, hours)
	expiry := DefaultExpiry
	if a != nil {
		expiry = a.Expiry()
	}
	return v, expiry, nil
}

// Month is the team's monthly budget against spent in the month [from, to)
// and the alerts it sent then (nil status: no monthly budget).
func (s *Service) Month(ctx context.Context, team team.Name, spent float64, from, to time.Time) (*Status, []Alert, error) {
	b := s.o.Rules.Budget(team)
	if b == nil || (b.Period != "" && b.Period != "monthly") {
		return nil, nil, nil
	}
	st := b.Status(team, spent, from, to)
	alerts, err := s.o.Store.BudgetAlerts(ctx, team, from)
	return &st, alerts, err
}

// Held says whether the team's budget is spent under block, and why; an
// error means it is not known (the caller keeps what it did last).
func (s *Service) Held(ctx context.Context, team team.Name) (string, bool, error) {
	st, _, err := s.Status(ctx, team)
	if err != nil {
		return "", false, err
	}
	if st == nil || st.State != Exceeded || st.AtLimit != Block {
		return "", false, nil
	}
	return st.Banner, true, nil
}

// Run is one pass of the alert loop (on the leader): every team budget and
// cost center budget is metered, and each threshold reached this period
// that has not alerted yet alerts now — recorded with its webhook in one
// transaction (so once, even across replicas and restarts), then written
// to the audit log. It returns how many alerts went out.
func (s *Service) Run(ctx context.Context) (int, error) {
	teams, err := s.Teams(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, t := range teams {
		st, ccs, err := s.Status(ctx, team.Name(t))
		if err != nil || st == nil {
			errs = append(errs, err)
			continue
		}
		// The alerts this period already has are not tried again: a
		// pass writes only what is new.
		sent, err := s.o.Store.BudgetAlerts(ctx, team.Name(t), st.From)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, status := range append([]Status{*st}, ccs...) {
			for _, th := range status.Crossed {
				if slices.ContainsFunc(sent, func(a Alert) bool {
					return a.CostCenter == status.CostCenter && math.Round(a.Threshold*100) == math.Round(th*100) && a.From.Equal(status.From)
				}) {
					continue
				}
				ok, err := s.alert(ctx, status, th)
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					n++
				}
			}
		}
	}
	return n, errors.Join(errs...)
}

// EventThreshold is the webhook event of a budget alert.
const EventThreshold = "budget.threshold"

func (s *Service) alert(ctx context.Context, st Status, th float64) (bool, error) {
	now := s.o.Now()
	a := Alert{Team: st.Team, CostCenter: st.CostCenter, From: st.From, Threshold: th, At: now, Spent: st.Spent, Amount: st.Amount}
	text := fmt.Sprintf("Budget alert (%.0f %%): %s", th*100, st.Banner)
	fields := map[string]any{
		"team": st.Team, "threshold": th, "spent": st.Spent, "amount": st.Amount, "currency": "USD",
		"periodStart": st.From.Format(time.RFC3339), "periodEnd": st.To.Format(time.RFC3339), "state": string(st.State),
	}
	if st.CostCenter != "" {
		fields["costCenter"] = st.CostCenter
	} else {
		fields["atLimit"] = string(st.AtLimit)
	}
	m, err := notify.New(EventThreshold, text, fields, now)
	if err != nil {
		return false, err
	}
	object := "/api/v1/budgets?team=" + st.Team
	if st.CostCenter != "" {
		object += "&costCenter=" + st.CostCenter
	}
	rec := audit.Record{At: now, Actor: "gantry", Action: "budget alert", Object: object, Decision: audit.Allow, Reason: text, Source: "budget"}
	recorded, err := s.o.Store.RecordBudgetAlert(ctx, a, m, rec)
	if err != nil || !recorded {
		return false, err
	}
	s.o.Log.Info("budget alert", "team", st.Team, "cost_center", st.CostCenter, "threshold", th, "spent", st.Spent, "amount", st.Amount)
	return true, nil
}
