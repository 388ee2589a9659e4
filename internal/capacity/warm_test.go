package capacity

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/workload"
)

// rush is a class's history where 8 H100s arrive four minutes after now's
// time of day on each of the last ten days and run an hour, beside 4 that
// have run for a month: the forecast's upper band, five minutes ahead, is
// 12.
func rush() launches {
	l := launches{{Created: now.Add(-30 * 24 * time.Hour), GPUClass: "H100-80GB", GPUCount: 4}}
	for d := 1; d <= 10; d++ {
		at := now.Add(4*time.Minute - time.Duration(d)*24*time.Hour)
		l = append(l, workload.Demand{Created: at, Ended: at.Add(time.Hour), GPUClass: "H100-80GB", GPUCount: 8})
	}
	return l
}

var (
	onDemand = nodegroup.Group{Name: "h100-od", Class: "H100-80GB", Purchase: nodegroup.OnDemand, GPUsPerNode: 8, Max: 2,
		PricePerNodeHour: 55.2, WarmPerDay: 100} // $6.90 a GPU-hour
	spot = nodegroup.Group{Name: "h100-spot", Class: "H100-80GB", Purchase: nodegroup.Spot, GPUsPerNode: 8, Max: 1,
		PricePerNodeHour: 36, WarmPerDay: 1} // $4.50 a GPU-hour
	reserved = nodegroup.Group{Name: "h100-reserved", Class: "H100-80GB", Purchase: nodegroup.Reserved, GPUsPerNode: 8, Min: 1, Max: 1, PricePerNodeHour: 38}
)

// TestPlanWarm: what the forecast's upper band wants beyond now and the
// reserved GPUs is warmed, cheapest group first, each group to what its
// day's cap has left; a class without history warms nothing.
func TestPlanWarm(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		groups []nodegroup.Group
		l      launches
		spent  map[string]float64
		want   map[string]int
		why    string
	}{
		{"the rush", []nodegroup.Group{onDemand}, rush(), nil, map[string]int{"h100-od": 8}, "peaks at 12.0 H100-80GB GPUs within 5m0s; 4.0 wanted now, 0 reserved"},
		{"a reserved machine takes part", []nodegroup.Group{reserved, onDemand}, rush(), nil, map[string]int{"h100-od": 4}, "8 reserved"},
		// $0.50 left at $6.90 a GPU-hour pays for 4 GPUs over a minute.
		{"the cap", []nodegroup.Group{onDemand}, rush(), map[string]float64{"h100-od": 99.5}, map[string]int{"h100-od": 4}, "held to what $0.50 of today's $100.00 cap pays for"},
		{"spent", []nodegroup.Group{onDemand}, rush(), map[string]float64{"h100-od": 120}, map[string]int{"h100-od": 0}, "held to what $0.00"},
		// Spot is cheaper: it is warmed first, up to its one machine's 8
		// GPUs; its $1 a day pays for 13 GPU-minutes.
		{"cheapest first", []nodegroup.Group{onDemand, spot}, rush(), nil, map[string]int{"h100-spot": 8, "h100-od": 0}, ""},
		{"spot's cap", []nodegroup.Group{onDemand, spot}, rush(), map[string]float64{"h100-spot": 0.95}, map[string]int{"h100-spot": 0, "h100-od": 8}, ""},
		{"no history", []nodegroup.Group{onDemand}, nil, nil, map[string]int{"h100-od": 0}, "0.0 wanted now"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := service(t, groups(t, c.groups...), NoPools{}, c.l)
			plans, err := s.PlanWarm(ctx, c.spent, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, p := range plans {
				got[p.Group.Name] = p.GPUs
				if p.Group.Name == c.groups[len(c.groups)-1].Name && !strings.Contains(p.Why, c.why) {
					t.Errorf("why %q, want %q in it", p.Why, c.why)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("plans %+v, want %v", plans, c.want)
			}
			for g, n := range c.want {
				if got[g] != n {
					t.Errorf("%s: %d GPUs warm, want %d (%+v)", g, got[g], n, plans)
				}
			}
		})
	}
}

// holder is placeholders that run as soon as they are asked for. dead
// refuses every Hold (the leader died after it charged).
type holder struct {
	gpus  map[string]int
	since map[string]time.Time
	dead  bool
}

func (h *holder) Held(_ context.Context, group string) (Holding, error) {
	return Holding{Asked: h.gpus[group], Running: h.gpus[group], Since: h.since[group]}, nil
}

func (h *holder) Hold(_ context.Context, g nodegroup.Group, gpus int, at time.Time) error {
	if h.dead {
		return errors.New("the leader is dead")
	}
	h.gpus[g.Name], h.since[g.Name] = gpus, at
	return nil
}

func (h *holder) Warming(context.Context) ([]string, error) {
	var out []string
	for g, n := range h.gpus {
		if n > 0 {
			out = append(out, g)
		}
	}
	return out, nil
}

func (h *holder) Release(_ context.Context, group string) error {
	h.gpus[group] = 0
	return nil
}

type ledger = MemoryLedger

// TestWarmerLeaderKilledAfterCharging: a leader that charged a group's
// placeholders and died before it reset their clock (Hold) leaves them
// running since the old time; the next leader's warmer charges only what
// came after the charge — the day's spend is the GPUs' time at the price,
// to the cent, not the overlap twice.
func TestWarmerLeaderKilledAfterCharging(t *testing.T) {
	at := now
	s, err := New(Options{NodeGroups: groups(t, onDemand), Pools: NoPools{}, Launches: rush(), Classes: classes(t), Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	h, l := &holder{gpus: map[string]int{}, since: map[string]time.Time{}}, &ledger{}
	leader := func() *Warmer {
		w, err := NewWarmer(s, h, l, time.Minute, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if err := leader().Pass(context.Background()); err != nil || h.gpus["h100-od"] != 8 {
		t.Fatalf("first pass: %v, held %v", err, h.gpus)
	}
	held := at
	at = at.Add(10 * time.Minute)
	h.dead = true
	if err := leader().Pass(context.Background()); err == nil {
		t.Fatal("a pass whose Hold failed said nothing")
	}
	h.dead = false
	at = at.Add(7 * time.Minute) // the next leader's first pass
	if err := leader().Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	cost := 0.0
	for _, sp := range l.spend {
		cost += sp.Cost
	}
	// 8 GPUs for 17 minutes at $6.90 an hour.
	if want := 8 * at.Sub(held).Hours() * 6.90; math.Abs(cost-want) > 0.005 {
		t.Fatalf("charged $%.4f for 8 GPUs over %v, want $%.2f (%+v)", cost, at.Sub(held), want, l.spend)
	}
}

// TestWarmerPass: a pass holds what the plan wants and charges what was
// held since the last pass at the group's price; once the day's cap is
// nearly spent the placeholders shrink to what it pays for.
func TestWarmerPass(t *testing.T) {
	at := now
	s, err := New(Options{NodeGroups: groups(t, onDemand), Pools: NoPools{}, Launches: rush(), Classes: classes(t), Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	h, l := &holder{gpus: map[string]int{}, since: map[string]time.Time{}}, &ledger{}
	if _, err := NewWarmer(s, nil, l, time.Minute, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a warmer without a holder")
	}
	w, err := NewWarmer(s, h, l, time.Minute, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Pass(context.Background()); err != nil || h.gpus["h100-od"] != 8 || len(l.spend) != 0 {
		t.Fatalf("first pass: %v, held %v, spent %v", err, h.gpus, l.spend)
	}
	// 8 GPUs held for a minute at $6.90 an hour: $0.92; still wanted.
	at = at.Add(time.Minute)
	if err := w.Pass(context.Background()); err != nil || h.gpus["h100-od"] != 8 || len(l.spend) != 1 || math.Abs(l.spend[0].Cost-0.92) > 1e-9 || math.Abs(l.spend[0].GPUHours-8.0/60) > 1e-9 {
		t.Fatalf("second pass: %v, held %v, spent %+v", err, h.gpus, l.spend)
	}
	// With the day's cap nearly spent the placeholders shrink: the minute they held
	// is charged first ($0.92 + $0.92 + $98 leaves $0.16, at
	// $0.115 a GPU-minute: 1 GPU).
	l.spend = append(l.spend, workload.WarmSpend{Group: "h100-od", Day: now.Truncate(24 * time.Hour), Cost: 98})
	at = at.Add(time.Minute)
	if err := w.Pass(context.Background()); err != nil || h.gpus["h100-od"] != 1 || len(l.spend) != 3 || math.Abs(l.spend[2].Cost-0.92) > 1e-9 {
		t.Errorf("at the cap: %v, held %v, spent %+v", err, h.gpus, l.spend)
	}
	// Placeholders of a group that is not warmed (another file's, or
	// warmPerDay removed) are charged and released.
	h.gpus["old-group"], h.since["old-group"] = 4, at.Add(-time.Hour)
	at = at.Add(time.Minute)
	err = w.Pass(context.Background())
	old := slices.IndexFunc(l.spend, func(s workload.WarmSpend) bool { return s.Group == "old-group" })
	if err != nil || h.gpus["old-group"] != 0 || old < 0 || math.Abs(l.spend[old].GPUHours-4*61.0/60) > 1e-9 || l.spend[old].Cost != 0 {
		t.Errorf("a group no longer warmed: %v, held %v, spent %+v", err, h.gpus, l.spend)
	}
}
