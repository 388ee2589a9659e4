package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/workload"
)

// Warm capacity: machines of an on-demand or spot group kept ready ahead of
// the forecast, by means the autoscaler understands — placeholder pods of
// the lowest priority, pinned to the group, that Karpenter boots machines
// for and that real work preempts (the scheduler evicts them for a pod of
// higher priority; their Deployment brings them back, pending, and Karpenter
// boots for them again while the plan still wants them). Each group's
// warming is held to its warmPerDay: the placeholders' GPU-hours at the
// group's price, summed per day (UTC) in the store, are the platform's idle
// cost.

// Holder keeps node groups' placeholder pods on the cluster.
type Holder interface {
	// Held says what a group's placeholders hold now.
	Held(ctx context.Context, group string) (Holding, error)
	// Hold sets g's placeholders to gpus GPUs from now.
	Hold(ctx context.Context, g nodegroup.Group, gpus int, now time.Time) error
	// Warming lists the groups whose placeholders ask for GPUs.
	Warming(ctx context.Context) ([]string, error)
	// Release sets a group's placeholders to none (a group no longer
	// warmed).
	Release(ctx context.Context, group string) error
}

// Holding is what a group's placeholders hold: Asked GPUs, Running of
// them on machines, since the last Hold (zero: never).
type Holding struct {
	Asked, Running int
	Since          time.Time
}

// Ledger keeps what warming cost per node group and day.
type Ledger interface {
	// ChargeWarm adds gpus GPUs held from since to now at price per
	// GPU-hour to group's warming on now's day (UTC), from where the group
	// was last charged if that is later, and marks it charged to now: a
	// charge repeated after a failover adds nothing twice.
	ChargeWarm(ctx context.Context, group string, since, now time.Time, gpus int, price float64) error
	// WarmSpend lists warming's cost per group and day overlapping [from, to).
	WarmSpend(ctx context.Context, from, to time.Time) ([]workload.WarmSpend, error)
}

// WarmPlan is how many GPUs of a group to hold warm now, and why.
type WarmPlan struct {
	Group nodegroup.Group
	GPUs  int
	Why   string
}

// warmStep is the forecast's step when sizing warm capacity.
const warmStep = 5 * time.Minute

// PlanWarm sizes the warm capacity of every group with a warmPerDay, for
// the next interval. Per class: look as far ahead as its slowest warmed
// group boots, plus the interval (a machine asked for now must be up when
// the demand comes); take the forecast's upper band (its 90th percentile)
// at its highest in that window; what exceeds both the GPUs wanted now and
// the class's reserved GPUs is warmed, cheapest group first, each at most
// its max and what its day's cap has left for the interval (spent: each
// group's warming cost today).
func (s *Service) PlanWarm(ctx context.Context, spent map[string]float64, interval time.Duration) ([]WarmPlan, error) {
	byClass := map[string][]nodegroup.Group{}
	var classes []string
	for _, g := range s.groups.List() {
		if g.WarmPerDay <= 0 {
			continue
		}
		if _, ok := byClass[g.Class]; !ok {
			classes = append(classes, g.Class)
		}
		byClass[g.Class] = append(byClass[g.Class], g)
	}
	var out []WarmPlan
	for _, class := range classes {
		groups := byClass[class]
		slices.SortStableFunc(groups, func(a, b nodegroup.Group) int { return cmp.Compare(a.GPUHourPrice(), b.GPUHourPrice()) })
		lead := interval
		for _, g := range groups {
			lead = max(lead, g.Boot()+interval)
		}
		horizon := min(((lead+warmStep-1)/warmStep)*warmStep, MaxHorizon)
		f, err := s.Forecast(ctx, class, horizon, warmStep)
		if err != nil {
			return nil, fmt.Errorf("warm %s: %w", class, err)
		}
		peak := f.Now
		for _, p := range f.Points {
			peak = max(peak, p.Hi)
		}
		reserved := 0
		for _, g := range s.groups.ForClass(class) {
			if g.Purchase == nodegroup.Reserved {
				reserved += g.Min * g.GPUsPerNode
			}
		}
		base := max(f.Now, float64(reserved))
		want := max(0, int(math.Ceil(peak-base-1e-9)))
		why := fmt.Sprintf("forecast (90th percentile) peaks at %.1f %s GPUs within %s; %.1f wanted now, %d reserved", peak, class, horizon, f.Now, reserved)
		for _, g := range groups {
			n := min(want, g.MaxGPUs())
			left := g.WarmPerDay - spent[g.Name]
			afford := max(0, int(math.Floor(left/(g.GPUHourPrice()*interval.Hours())+1e-9)))
			gwhy := why
			if n > afford {
				n = afford
				gwhy += fmt.Sprintf("; held to what $%.2f of today's $%.2f cap pays for", max(0, left), g.WarmPerDay)
			}
			want -= n
			out = append(out, WarmPlan{Group: g, GPUs: n, Why: gwhy})
		}
	}
	return out, nil
}

// Warmer runs warm capacity: each pass plans every warmed group, holds its
// placeholders and records what the ones held until now cost. One runs on
// the leader.
type Warmer struct {
	s        *Service
	hold     Holder
	ledger   Ledger
	interval time.Duration
	log      *slog.Logger
}

// NewWarmer returns a warmer of s's groups that passes every interval.
func NewWarmer(s *Service, hold Holder, ledger Ledger, interval time.Duration, log *slog.Logger) (*Warmer, error) {
	if s == nil || hold == nil || ledger == nil || interval <= 0 || log == nil {
		return nil, errors.New("capacity: a warmer needs the service, a holder, a ledger, an interval and a log")
	}
	return &Warmer{s: s, hold: hold, ledger: ledger, interval: interval, log: log}, nil
}

// Pass charges what each warmed group's placeholders ran since the last
// pass (those running on machines now, over the time since) to the day at
// the group's price, then plans each group against the day's spend and
// holds what the plan says; a group that is no longer warmed (its
// warmPerDay removed, or the group gone from the file) is charged and
// released. A group whose charge fails is left as it is, its time charged
// at the next pass that can; when planning fails, the charged groups keep
// their size and their clocks restart.
func (w *Warmer) Pass(ctx context.Context) error {
	now := w.s.now().UTC()
	var errs []error
	warmed := map[string]nodegroup.Group{}
	var order []string
	for _, g := range w.s.groups.List() {
		if g.WarmPerDay > 0 {
			warmed[g.Name] = g
			order = append(order, g.Name)
		}
	}
	holding, err := w.hold.Warming(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range holding {
		if _, ok := warmed[name]; ok {
			continue
		}
		price := 0.0 // gone from the file: no price to charge at
		if g, ok := w.s.groups.Get(name); ok {
			price = g.GPUHourPrice()
		}
		h, err := w.hold.Held(ctx, name)
		if err == nil {
			err = w.charge(ctx, name, price, h, now)
		}
		if err == nil {
			err = w.hold.Release(ctx, name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", name, err))
			continue
		}
		w.log.Info("warm capacity released: the group is no longer warmed", "node_group", name, "gpus", h.Asked)
	}
	asked := map[string]int{}
	for _, name := range order {
		h, err := w.hold.Held(ctx, name)
		if err == nil {
			err = w.charge(ctx, name, warmed[name].GPUHourPrice(), h, now)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("warm %s: %w", name, err))
			continue
		}
		asked[name] = h.Asked
	}
	plans, err := w.plan(ctx, now)
	if err != nil {
		for _, name := range order {
			if n, ok := asked[name]; ok {
				if err := w.hold.Hold(ctx, warmed[name], n, now); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return errors.Join(append(errs, err)...)
	}
	for _, p := range plans {
		before, ok := asked[p.Group.Name]
		if !ok || (before == 0 && p.GPUs == 0) {
			continue // not charged, left as it is; or nothing held, nothing wanted
		}
		if err := w.hold.Hold(ctx, p.Group, p.GPUs, now); err != nil {
			errs = append(errs, fmt.Errorf("warm %s: %w", p.Group.Name, err))
			continue
		}
		if p.GPUs != before {
			w.log.Info("warm capacity", "node_group", p.Group.Name, "gpus", p.GPUs, "before", before, "why", p.Why)
		}
	}
	return errors.Join(errs...)
}

// charge adds what a group's running placeholders cost since their last
// Hold.
func (w *Warmer) charge(ctx context.Context, group string, price float64, h Holding, now time.Time) error {
	if h.Running <= 0 || h.Since.IsZero() || !now.After(h.Since) {
		return nil
	}
	return w.ledger.ChargeWarm(ctx, group, h.Since, now, h.Running, price)
}

// plan sizes the warmed groups against the day's spend.
func (w *Warmer) plan(ctx context.Context, now time.Time) ([]WarmPlan, error) {
	day := now.Truncate(24 * time.Hour)
	spend, err := w.ledger.WarmSpend(ctx, day, day.Add(24*time.Hour))
	if err != nil {
		return nil, err
	}
	spent := map[string]float64{}
	for _, sp := range spend {
		spent[sp.Group] += sp.Cost
	}
	return w.s.PlanWarm(ctx, spent, w.interval)
}

// MemoryLedger is a Ledger kept in memory (a replay's, a test's).
type MemoryLedger struct {
	mu      sync.Mutex
	spend   []workload.WarmSpend
	charged map[string]time.Time
}

// ChargeWarm implements Ledger.
func (l *MemoryLedger) ChargeWarm(_ context.Context, group string, since, now time.Time, gpus int, price float64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := since
	if t := l.charged[group]; t.After(from) {
		from = t
	}
	if !now.After(from) || gpus <= 0 {
		return nil
	}
	if l.charged == nil {
		l.charged = map[string]time.Time{}
	}
	l.charged[group] = now
	hours := float64(gpus) * now.Sub(from).Hours()
	l.spend = append(l.spend, workload.WarmSpend{Group: group, Day: now.UTC().Truncate(24 * time.Hour), Cost: hours * price, GPUHours: hours})
	return nil
}

// WarmSpend implements Ledger: each addition on the days from from's to
// before to, in the order added.
func (l *MemoryLedger) WarmSpend(_ context.Context, from, to time.Time) ([]workload.WarmSpend, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []workload.WarmSpend
	for _, s := range l.spend {
		if !s.Day.Before(from.UTC().Truncate(24*time.Hour)) && s.Day.Before(to) {
			out = append(out, s)
		}
	}
	return out, nil
}
