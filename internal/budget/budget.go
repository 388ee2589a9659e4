// Package budget owns the money rules of cost governance: as plain data and
// pure functions (budget.go) a team's dollar budget per period (monthly,
// weekly or a custom number of days), its alert thresholds and what happens
// when it is spent (warn, require approval, block), per-cost-center budgets,
// and when a launch needs a team-admin's approval (its cost at the
// template's max runtime above the team's per-launch ceiling) — spend in, a
// status, a banner and a launch verdict out; and the Service over them
// (service.go), which meters the teams' spend, answers launches and sends
// each threshold's alert once. Amounts are USD, as the GPU classes' prices
// are.
package budget

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/team"
)

// AtLimit is what a team's policy does once its budget is spent.
type AtLimit string

// What a spent budget does to new launches.
const (
	// Warn lets launches go ahead; the alert and the banner say so.
	Warn AtLimit = "warn"
	// RequireApproval holds each new launch until a team-admin approves it.
	RequireApproval AtLimit = "require-approval"
	// Block holds every new launch in the team's queue (Kueue's
	// ClusterQueue stopPolicy Hold) until the next period or a larger
	// budget; what runs keeps running.
	Block AtLimit = "block"
)

// Budget is a team's dollar budget (policy: teams.<team>.budget).
type Budget struct {
	// Amount is the dollars the team may spend in a period.
	Amount float64 `json:"amount"`
	// Period is "monthly" (calendar months, the default), "weekly" (from
	// Monday) or "<N>d" (N days from Anchor), all in UTC.
	Period string `json:"period,omitempty"`
	// Anchor (YYYY-MM-DD) starts the first period of an "<N>d" budget.
	Anchor string `json:"anchor,omitempty"`
	// Alerts are the shares of Amount at which an alert goes out, once a
	// period each (default 0.8 and 1).
	Alerts []float64 `json:"alerts,omitempty"`
	// AtLimit says what a spent budget does (default warn).
	AtLimit AtLimit `json:"atLimit,omitempty"`
	// CostCenters are budgets, in the same period, for the team's spend on
	// templates of each cost center; they alert, and do not hold launches.
	CostCenters map[string]float64 `json:"costCenters,omitempty"`
}

// Approval says when a team's launches need a team-admin's approval
// (policy: teams.<team>.approval).
type Approval struct {
	// LaunchCeiling: a launch whose cost at its template's max runtime (a
	// month, 730 h, when the template sets none) exceeds it needs approval.
	// 0: no ceiling.
	LaunchCeiling float64 `json:"launchCeiling,omitempty"`
	// Expires is how long a launch waits for a decision before it is
	// refused (a Go duration, default 24h).
	Expires string `json:"expires,omitempty"`
}

// DefaultAlerts are the alert thresholds of a budget that names none.
var DefaultAlerts = []float64{0.8, 1}

// DefaultExpiry is how long a launch waits for approval unless the policy
// says otherwise.
const DefaultExpiry = 24 * time.Hour

// OpenEndedHours prices a launch whose template sets no max runtime: a month.
const OpenEndedHours = 730

var daysRE = regexp.MustCompile(`^([1-9][0-9]{0,2})d$`)

// Validate adds the budget's problems under path.
func (b Budget) Validate(path string, errs *fault.List) {
	if !(b.Amount > 0) || math.IsInf(b.Amount, 0) {
		errs.Addf(path+".amount", "must be a positive number of dollars, got %v", b.Amount)
	}
	switch {
	case b.Period == "" || b.Period == "monthly" || b.Period == "weekly":
		if b.Anchor != "" {
			errs.Addf(path+".anchor", "only a period of days (\"14d\") has an anchor")
		}
	case daysRE.MatchString(b.Period):
		if _, err := time.Parse(time.DateOnly, b.Anchor); err != nil {
			errs.Addf(path+".anchor", "a period of days needs the first period's start as YYYY-MM-DD, got %q", b.Anchor)
		}
	default:
		errs.Addf(path+".period", "%q: monthly, weekly, or a number of days such as 14d (up to 999d)", b.Period)
	}
	for i, a := range b.Alerts {
		if !(a > 0) || a > 10 {
			errs.Addf(fmt.Sprintf("%s.alerts[%d]", path, i), "a share of the amount above 0 (0.8 is 80 %%), got %v", a)
		}
	}
	switch b.AtLimit {
	case "", Warn, RequireApproval, Block:
	default:
		errs.Addf(path+".atLimit", "%q: one of warn, require-approval, block", b.AtLimit)
	}
	for _, cc := range sortedKeys(b.CostCenters) {
		if v := b.CostCenters[cc]; !(v > 0) || math.IsInf(v, 0) {
			errs.Addf(path+".costCenters."+cc, "must be a positive number of dollars, got %v", v)
		}
	}
}

// Validate adds the approval rule's problems under path.
func (a Approval) Validate(path string, errs *fault.List) {
	if a.LaunchCeiling < 0 || math.IsInf(a.LaunchCeiling, 0) || math.IsNaN(a.LaunchCeiling) {
		errs.Addf(path+".launchCeiling", "must be a number of dollars (0: none), got %v", a.LaunchCeiling)
	}
	if a.Expires != "" {
		if d, err := time.ParseDuration(a.Expires); err != nil || d < time.Minute || d > 90*24*time.Hour {
			errs.Addf(path+".expires", "%q: a duration from 1m to 2160h", a.Expires)
		}
	}
}

// Expiry is how long a launch waits for a decision.
func (a Approval) Expiry() time.Duration {
	if d, err := time.ParseDuration(a.Expires); err == nil && d > 0 {
		return d
	}
	return DefaultExpiry
}

// Thresholds are the budget's alert shares, ascending, without repeats.
func (b Budget) Thresholds() []float64 {
	t := b.Alerts
	if len(t) == 0 {
		t = DefaultAlerts
	}
	out := slices.Clone(t)
	slices.Sort(out)
	return slices.Compact(out)
}

// Limit is what a spent budget does.
func (b Budget) Limit() AtLimit {
	if b.AtLimit == "" {
		return Warn
	}
	return b.AtLimit
}

// PeriodAt is the period that holds t: [from, to), in UTC.
func (b Budget) PeriodAt(t time.Time) (from, to time.Time) {
	t = t.UTC()
	switch {
	case b.Period == "weekly":
		day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		from = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7)) // back to Monday
		return from, from.AddDate(0, 0, 7)
	case daysRE.MatchString(b.Period):
		n, _ := strconv.Atoi(strings.TrimSuffix(b.Period, "d"))
		anchor, err := time.Parse(time.DateOnly, b.Anchor)
		if err != nil {
			break // validated with the policy; a month as the fallback
		}
		length := time.Duration(n) * 24 * time.Hour
		k := int64(math.Floor(float64(t.Sub(anchor)) / float64(length)))
		from = anchor.Add(time.Duration(k) * length)
		return from, from.Add(length)
	}
	from = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return from, from.AddDate(0, 1, 0)
}

// State is where a budget stands.
type State string

// States.
const (
	OK       State = "ok"
	Warning  State = "warning"  // an alert threshold below 100 % is reached
	Exceeded State = "exceeded" // the whole amount is spent
)

// Status is a budget against what was spent in its period.
type Status struct {
	Team       string
	CostCenter string // "" for the team's budget
	From, To   time.Time
	Amount     float64
	Spent      float64
	Crossed    []float64 // the alert thresholds reached, ascending
	State      State
	AtLimit    AtLimit
	// Banner says it in one sentence for the team's pages ("" when OK).
	Banner string
}

// Share is the part of the amount spent.
func (s Status) Share() float64 { return s.Spent / s.Amount }

// Status is the budget with spent dollars spent in [from, to).
func (b Budget) Status(t team.Name, spent float64, from, to time.Time) Status {
	team := t.String()
	st := Status{Team: team, From: from, To: to, Amount: b.Amount, Spent: spent, State: OK, AtLimit: b.Limit()}
	for _, t := range b.Thresholds() {
		if spent >= t*b.Amount {
			st.Crossed = append(st.Crossed, t)
		}
	}
	switch {
	case spent >= b.Amount:
		st.State = Exceeded
	case len(st.Crossed) > 0:
		st.State = Warning
	}
	st.Banner = banner(st)
	return st
}

// CostCenterStatus is a cost center's budget of the team against its spend;
// it warns and never holds launches.
func (b Budget) CostCenterStatus(t team.Name, costCenter string, spent float64, from, to time.Time) Status {
	cc := Budget{Amount: b.CostCenters[costCenter], Period: b.Period, Anchor: b.Anchor, Alerts: b.Alerts, AtLimit: Warn}
	st := cc.Status(t, spent, from, to)
	st.CostCenter = costCenter
	st.Banner = banner(st)
	return st
}

func banner(st Status) string {
	if st.State == OK {
		return ""
	}
	who := "Team " + st.Team
	if st.CostCenter != "" {
		who += "'s cost center " + st.CostCenter
	}
	s := fmt.Sprintf("%s has spent %s of its %s budget for %s to %s (%.0f %%).", who, Dollars(st.Spent), Dollars(st.Amount),
		st.From.Format(time.DateOnly), st.To.Format(time.DateOnly), 100*st.Share())
	if st.State != Exceeded || st.CostCenter != "" {
		return s
	}
	switch st.AtLimit {
	case Block:
		return s + " New launches are held in the team's queue until " + st.To.Format(time.DateOnly) + " or a larger budget (policy: block); running workloads go on."
	case RequireApproval:
		return s + " Each new launch waits for a team-admin's approval (policy: require-approval)."
	}
	return s + " Launches go ahead (policy: warn)."
}

// Verdict is what the budget and the approval rule say of one launch.
type Verdict struct {
	// Hold: the team's budget is spent under block; the launch waits in
	// its queue.
	Hold bool
	// Approval: a team-admin must approve the launch first.
	Approval bool
	// Why says it, with the figures.
	Why string
}

// Launch decides on a launch that costs pricePerHour for hours (its max
// runtime; 0: none, priced as OpenEndedHours) in a team whose budget stands
// at st (nil: no budget) under approval rule a (nil: none).
func Launch(st *Status, a *Approval, pricePerHour, hours float64) Verdict {
	if st != nil && st.State == Exceeded {
		switch st.AtLimit {
		case Block:
			return Verdict{Hold: true, Why: st.Banner}
		case RequireApproval:
			return Verdict{Approval: true, Why: st.Banner}
		}
	}
	if a == nil || a.LaunchCeiling <= 0 || pricePerHour <= 0 {
		return Verdict{}
	}
	horizon := fmt.Sprintf("its max runtime of %s", formatHours(hours))
	if hours <= 0 {
		hours, horizon = OpenEndedHours, "a month (its template sets no max runtime)"
	}
	if cost := pricePerHour * hours; cost > a.LaunchCeiling {
		return Verdict{Approval: true, Why: fmt.Sprintf("it may cost %s over %s at %s/h, above the team's per-launch ceiling of %s",
			Dollars(cost), horizon, Dollars(pricePerHour), Dollars(a.LaunchCeiling))}
	}
	return Verdict{}
}

func formatHours(h float64) string {
	return strings.TrimSuffix(strings.TrimSuffix(time.Duration(h*float64(time.Hour)).String(), "0s"), "0m")
}

// Dollars writes an amount as $1,234.56.
func Dollars(v float64) string {
	neg := v < 0
	cents := int64(math.Round(math.Abs(v) * 100))
	whole := strconv.FormatInt(cents/100, 10)
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	s := fmt.Sprintf("$%s.%02d", b.String(), cents%100)
	if neg {
		return "-" + s
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Round rounds dollars to cents.
func Round(v float64) float64 { return math.Round(v*100) / 100 }
