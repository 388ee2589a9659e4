package budget

import (
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

func day(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestPeriodAt(t *testing.T) {
	for _, tc := range []struct {
		b        Budget
		at       string
		from, to string
	}{
		{Budget{}, "2026-12-15T10:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{Budget{Period: "monthly"}, "2026-12-01T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{Budget{Period: "monthly"}, "2026-11-30T23:59:59Z", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"},
		// In UTC, whatever the zone of the time asked about.
		{Budget{}, "2026-12-01T00:30:00+01:00", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"},
		{Budget{Period: "weekly"}, "2026-12-02T12:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"}, // a Wednesday
		{Budget{Period: "weekly"}, "2026-12-06T23:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"}, // Sunday
		{Budget{Period: "weekly"}, "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"}, // Monday
		{Budget{Period: "14d", Anchor: "2026-01-05"}, "2026-01-18T23:59:59Z", "2026-01-05T00:00:00Z", "2026-01-19T00:00:00Z"},
		{Budget{Period: "14d", Anchor: "2026-01-05"}, "2026-01-19T00:00:00Z", "2026-01-19T00:00:00Z", "2026-02-02T00:00:00Z"},
		{Budget{Period: "14d", Anchor: "2026-01-05"}, "2026-01-04T00:00:00Z", "2025-12-22T00:00:00Z", "2026-01-05T00:00:00Z"}, // before the anchor
	} {
		from, to := tc.b.PeriodAt(day(tc.at))
		if !from.Equal(day(tc.from)) || !to.Equal(day(tc.to)) {
			t.Errorf("%+v at %s: [%s, %s), want [%s, %s)", tc.b, tc.at, from, to, tc.from, tc.to)
		}
	}
}

func TestStatus(t *testing.T) {
	from, to := day("2026-12-01T00:00:00Z"), day("2027-01-01T00:00:00Z")
	for _, tc := range []struct {
		b       Budget
		spent   float64
		state   State
		crossed int
		banner  string
	}{
		{Budget{Amount: 1000}, 799.99, OK, 0, ""},
		{Budget{Amount: 1000}, 800, Warning, 1, "Team vision has spent $800.00 of its $1,000.00 budget for 2026-12-01 to 2027-01-01 (80 %)."},
		{Budget{Amount: 1000}, 1000, Exceeded, 2, "Launches go ahead (policy: warn)."},
		{Budget{Amount: 1000, AtLimit: Block}, 1500, Exceeded, 2, "held in the team's queue until 2027-01-01"},
		{Budget{Amount: 1000, AtLimit: RequireApproval}, 1001, Exceeded, 2, "team-admin's approval"},
		{Budget{Amount: 1000, Alerts: []float64{0.5, 0.9, 0.5}}, 600, Warning, 1, "(60 %)"},
		{Budget{Amount: 1000, Alerts: []float64{1.2}}, 1100, Exceeded, 0, "policy: warn"},
	} {
		st := tc.b.Status("vision", tc.spent, from, to)
		if st.State != tc.state || len(st.Crossed) != tc.crossed || !strings.Contains(st.Banner, tc.banner) || (tc.banner == "") != (st.Banner == "") {
			t.Errorf("%+v spent %v: %s, crossed %v, banner %q; want %s, %d crossed, banner with %q", tc.b, tc.spent, st.State, st.Crossed, st.Banner, tc.state, tc.crossed, tc.banner)
		}
	}
	cc := Budget{Amount: 1000, AtLimit: Block, CostCenters: map[string]float64{"cc-7": 100}}.CostCenterStatus("vision", "cc-7", 120, from, to)
	if cc.State != Exceeded || cc.AtLimit != Warn || !strings.HasPrefix(cc.Banner, "Team vision's cost center cc-7 has spent $120.00 of its $100.00") || strings.Contains(cc.Banner, "held") {
		t.Errorf("cost center: %+v", cc)
	}
}

func TestLaunch(t *testing.T) {
	from, to := day("2026-12-01T00:00:00Z"), day("2027-01-01T00:00:00Z")
	spent := func(atLimit AtLimit) *Status {
		st := Budget{Amount: 100, AtLimit: atLimit}.Status("nlp", 120, from, to)
		return &st
	}
	under := Budget{Amount: 100, AtLimit: Block}.Status("nlp", 10, from, to)
	ceiling := &Approval{LaunchCeiling: 500}
	for _, tc := range []struct {
		name     string
		st       *Status
		a        *Approval
		price, h float64
		hold     bool
		approval bool
		why      string
	}{
		{"no rules", nil, nil, 32, 72, false, false, ""},
		{"spent, warn", spent(Warn), nil, 32, 72, false, false, ""},
		{"spent, block", spent(Block), ceiling, 32, 72, true, false, "policy: block"},
		{"spent, require approval", spent(RequireApproval), nil, 1, 1, false, true, "policy: require-approval"},
		{"under budget, under the ceiling", &under, ceiling, 4, 72, false, false, ""},
		{"above the ceiling", &under, ceiling, 32, 72, false, true, "it may cost $2,304.00 over its max runtime of 72h at $32.00/h, above the team's per-launch ceiling of $500.00"},
		{"at the ceiling", nil, ceiling, 5, 100, false, false, ""},
		{"open-ended", nil, ceiling, 1, 0, false, true, "$730.00 over a month (its template sets no max runtime)"},
		{"free", nil, ceiling, 0, 0, false, false, ""},
		{"no ceiling", nil, &Approval{}, 1000, 1000, false, false, ""},
	} {
		v := Launch(tc.st, tc.a, tc.price, tc.h)
		if v.Hold != tc.hold || v.Approval != tc.approval || !strings.Contains(v.Why, tc.why) {
			t.Errorf("%s: %+v, want hold %v approval %v why %q", tc.name, v, tc.hold, tc.approval, tc.why)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		b    Budget
		want []string
	}{
		{Budget{Amount: 10}, nil},
		{Budget{Amount: 10, Period: "14d", Anchor: "2026-01-05", Alerts: []float64{0.5, 1}, AtLimit: Block, CostCenters: map[string]float64{"x": 1}}, nil},
		{Budget{}, []string{"b.amount"}},
		{Budget{Amount: 10, Period: "quarterly"}, []string{"b.period"}},
		{Budget{Amount: 10, Period: "14d"}, []string{"b.anchor"}},
		{Budget{Amount: 10, Anchor: "2026-01-01"}, []string{"b.anchor"}},
		{Budget{Amount: 10, Alerts: []float64{0, 0.8}}, []string{"b.alerts[0]"}},
		{Budget{Amount: 10, AtLimit: "stop"}, []string{"b.atLimit"}},
		{Budget{Amount: 10, CostCenters: map[string]float64{"cc": -1}}, []string{"b.costCenters.cc"}},
	} {
		var errs fault.List
		tc.b.Validate("b", &errs)
		got := paths(errs.Err())
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%+v: %v, want %v (%v)", tc.b, got, tc.want, errs.Err())
		}
	}
	var errs fault.List
	Approval{LaunchCeiling: -1, Expires: "1s"}.Validate("a", &errs)
	if got := paths(errs.Err()); strings.Join(got, ",") != "a.launchCeiling,a.expires" {
		t.Errorf("approval: %v", got)
	}
	if (Approval{}).Expiry() != DefaultExpiry || (Approval{Expires: "2h"}).Expiry() != 2*time.Hour {
		t.Error("expiry")
	}
}

func paths(err error) []string {
	inv, ok := err.(*fault.Invalid)
	if !ok {
		return nil
	}
	var out []string
	for _, f := range inv.Fields {
		out = append(out, f.Path)
	}
	return out
}

func TestDollars(t *testing.T) {
	for v, want := range map[float64]string{0: "$0.00", 1.006: "$1.01", 999.99: "$999.99", 1000: "$1,000.00", 1234567.891: "$1,234,567.89", -20: "-$20.00"} {
		if got := Dollars(v); got != want {
			t.Errorf("%v: %q, want %q", v, got, want)
		}
	}
}
