package budget

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/team"
)

// policy is fixed rules: named budgets and a default ("*") one.
type policy struct {
	named map[string]Budget
	def   *Budget
}

func (p policy) Budget(tm team.Name) *Budget {
	t := tm.String()
	if b, ok := p.named[t]; ok {
		return &b
	}
	return p.def
}
func (p policy) Approval(team.Name) *Approval { return nil }

// Teams: everyone reads team vision; "admin" reads every team.
func (p policy) Teams(id identity.Identity, _ access.Permission) (bool, []string) {
	return id.Subject == "admin", []string{"vision"}
}
func (p policy) Budgets() map[string]Budget {
	out := map[string]Budget{}
	for k, v := range p.named {
		out[k] = v
	}
	return out
}

// spender says each team spent what its map says, or fails.
type spender struct {
	spent map[string]float64
	err   error
}

func (s spender) Spend(_ context.Context, tm team.Name, _, _ time.Time) (float64, map[string]float64, error) {
	return s.spent[tm.String()], map[string]float64{"cc-1": s.spent[tm.String()] / 2}, s.err
}

// memStore keeps alerts once per key, as the store's primary key does (the
// store's own behaviour is in its conformance suite).
type memStore struct {
	mu       sync.Mutex
	teams    []string
	alerts   map[string]Alert
	messages []notify.Message
	audited  []audit.Record
}

func (m *memStore) Teams(context.Context) ([]string, error) { return m.teams, nil }
func (m *memStore) RecordBudgetAlert(_ context.Context, a Alert, msg notify.Message, rec audit.Record) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := a.Team + "/" + a.CostCenter + "/" + a.From.String() + "/" + time.Duration(a.Threshold*1000).String()
	if _, ok := m.alerts[k]; ok {
		return false, nil
	}
	m.alerts[k] = a
	m.messages = append(m.messages, msg)
	m.audited = append(m.audited, rec)
	return true, nil
}
func (m *memStore) BudgetAlerts(context.Context, team.Name, time.Time) ([]Alert, error) {
	return nil, nil
}

// TestRun: every threshold reached alerts once — the team's and its cost
// centers' — audited; a default budget covers the teams that launched and
// the policy does not name; a status that cannot be read is an error, and
// Held says so instead of releasing a hold.
func TestRun(t *testing.T) {
	now := time.Date(2026, 12, 15, 9, 0, 0, 0, time.UTC)
	rules := policy{
		named: map[string]Budget{"vision": {Amount: 100, CostCenters: map[string]float64{"cc-1": 40}}},
		def:   &Budget{Amount: 10, AtLimit: Block},
	}
	st := &memStore{teams: []string{"nlp", "vision"}, alerts: map[string]Alert{}}
	sp := spender{spent: map[string]float64{"vision": 85, "nlp": 12}}
	s, err := New(Options{Rules: rules, Readers: rules, Spender: sp, Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Fresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	// vision: 80 % of its budget, and its cost center's 100 % (42.5 of 40)
	// and 80 %; nlp (the default budget): 80 % and 100 %.
	if n, err := s.Run(context.Background()); n != 5 || err != nil {
		t.Fatalf("first pass: %d alerts, %v; want 5", n, err)
	}
	if n, err := s.Run(context.Background()); n != 0 || err != nil {
		t.Fatalf("second pass: %d alerts, %v; want none", n, err)
	}
	if len(st.messages) != 5 || len(st.audited) != 5 || st.audited[0].Actor != "gantry" || st.audited[0].Action != "budget alert" {
		t.Fatalf("%d webhooks, %d audit records (%+v)", len(st.messages), len(st.audited), st.audited)
	}
	if teams, _ := s.Teams(context.Background()); len(teams) != 2 {
		t.Errorf("teams with a budget: %v", teams)
	}
	if why, held, err := s.Held(context.Background(), "nlp"); !held || err != nil || why == "" {
		t.Errorf("nlp under the default block: held %v %q %v", held, why, err)
	}
	if _, held, err := s.Held(context.Background(), "vision"); held || err != nil {
		t.Errorf("vision under warn: held %v %v", held, err)
	}
	broken, _ := New(Options{Rules: rules, Readers: rules, Spender: spender{err: errors.New("database is locked")}, Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	if _, held, err := broken.Held(context.Background(), "nlp"); err == nil || held {
		t.Errorf("spend unknown: held %v, %v; want an error", held, err)
	}
	if _, err := broken.Run(context.Background()); err == nil {
		t.Error("an alert pass that could not meter said nothing")
	}
}

// TestListShowsOnlyTheCallersTeams: List filters by the identity in the
// context itself, so no handler can forget to; a narrowed question (only)
// cannot widen it.
func TestListShowsOnlyTheCallersTeams(t *testing.T) {
	now := time.Date(2026, 12, 15, 9, 0, 0, 0, time.UTC)
	rules := policy{named: map[string]Budget{"vision": {Amount: 100}}, def: &Budget{Amount: 10}}
	st := &memStore{teams: []string{"nlp", "vision"}, alerts: map[string]Alert{}}
	s, err := New(Options{Rules: rules, Readers: rules, Spender: spender{spent: map[string]float64{}}, Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	teams := func(who, only string) []string {
		list, err := s.List(identity.With(context.Background(), identity.Identity{Subject: who}), only)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range list {
			out = append(out, l.Status.Team)
		}
		return out
	}
	for _, tc := range []struct {
		who, only string
		want      []string
	}{
		{"admin", "", []string{"nlp", "vision"}},
		{"ann", "", []string{"vision"}},
		{"ann", "nlp", nil},
		{"admin", "nlp", []string{"nlp"}},
	} {
		if got := teams(tc.who, tc.only); !slices.Equal(got, tc.want) {
			t.Errorf("%q asking for %q: %v, want %v", tc.who, tc.only, got, tc.want)
		}
	}
	if _, err := New(Options{Rules: rules, Spender: spender{}, Store: st, Log: slog.New(slog.DiscardHandler), Now: time.Now}); err == nil {
		t.Fatal("a service without readers was made")
	}
}
