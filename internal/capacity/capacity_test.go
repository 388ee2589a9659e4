package capacity

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/workload"
)

type pools []nodegroup.PoolState

func (p pools) States() ([]nodegroup.PoolState, bool) { return p, p != nil }

type launches []workload.Demand

func (l launches) Demand(_ context.Context, since time.Time) ([]workload.Demand, error) {
	var out []workload.Demand
	for _, d := range l {
		if d.Ended.IsZero() || d.Ended.After(since) {
			out = append(out, d)
		}
	}
	return out, nil
}

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func classes(t *testing.T) *gpu.Catalog {
	t.Helper()
	c, err := gpu.LoadFile(filepath.Join("..", "..", "templates", "gpu-classes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func groups(t *testing.T, gs ...nodegroup.Group) *nodegroup.Set {
	t.Helper()
	set, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind, Groups: gs}, []string{"L4", "H100-80GB"})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func service(t *testing.T, set *nodegroup.Set, p Pools, l launches) *Service {
	t.Helper()
	s, err := New(Options{NodeGroups: set, Pools: p, Launches: l, Classes: classes(t), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGroups(t *testing.T) {
	set := groups(t,
		nodegroup.Group{Name: "a", Class: "L4", Purchase: nodegroup.OnDemand, GPUsPerNode: 4, Max: 2},
		nodegroup.Group{Name: "b", Class: "L4", Purchase: nodegroup.Spot, GPUsPerNode: 4, Max: 2})
	if _, err := New(Options{NodeGroups: set}); err == nil {
		t.Fatal("built without its parts")
	}
	s := service(t, set, pools{{Group: nodegroup.Group{Name: "b"}, Nodes: 1, Booting: 1}}, nil)
	g := s.Groups()
	if len(g) != 2 || g[0].Name != "a" || g[0].State != nil || g[1].State == nil || g[1].State.Nodes != 1 || g[1].State.Booting != 1 {
		t.Fatalf("groups: %+v", g)
	}
	s = service(t, set, NoPools{}, nil)
	if g := s.Groups(); len(g) != 2 || g[1].State != nil {
		t.Fatalf("without a cluster: %+v", g)
	}
}

// TestForecast: a class whose launches run for weeks forecasts what it
// has now; a MIG slice counts at its share; another class's launches and
// launches created after now are not read; bad steps are refused.
func TestForecast(t *testing.T) {
	l := launches{
		{Created: now.Add(-30 * 24 * time.Hour), GPUClass: "H100-80GB", GPUCount: 8},
		{Created: now.Add(-20 * 24 * time.Hour), GPUClass: "H100-80GB", MIGProfile: "3g.40gb", GPUCount: 2}, // 2 × 4/8
		{Created: now.Add(-10 * 24 * time.Hour), Ended: now.Add(-9 * 24 * time.Hour), GPUClass: "H100-80GB", GPUCount: 4},
		{Created: now.Add(-time.Hour), GPUClass: "L4", GPUCount: 3},
		{Created: now.Add(time.Hour), GPUClass: "H100-80GB", GPUCount: 8},
	}
	s := service(t, groups(t), NoPools{}, l)
	f, err := s.Forecast(context.Background(), "H100-80GB", 2*time.Hour, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if f.Now != 9 || f.Launches != 3 || len(f.Points) != 12 || !f.Points[0].T.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("now %v, %d launches, %d points from %v", f.Now, f.Launches, len(f.Points), f.Points[0].T)
	}
	for _, p := range f.Points {
		if p.GPUs != 9 || p.Lo > p.GPUs || p.Hi < p.GPUs || p.WeekAgo != 9 {
			t.Fatalf("point %+v: want 9 wanted, as a day and a week ago", p)
		}
	}
	var nf *fault.NotFound
	if _, err := s.Forecast(context.Background(), "B200", 2*time.Hour, 10*time.Minute); !errors.As(err, &nf) {
		t.Fatalf("an unknown class: %v", err)
	}
	var bad *fault.Invalid
	for _, c := range []struct{ horizon, step time.Duration }{{2 * time.Hour, 30 * time.Second}, {13 * time.Hour, 10 * time.Minute}, {5 * time.Minute, 10 * time.Minute}, {12 * time.Hour, time.Minute}} {
		if _, err := s.Forecast(context.Background(), "H100-80GB", c.horizon, c.step); !errors.As(err, &bad) {
			t.Errorf("horizon %v step %v: %v", c.horizon, c.step, err)
		}
	}
}

func TestLevelAbove(t *testing.T) {
	lows := []float64{0, 8, 8, 8, 16, 16, 16, 16, 24, 24} // ten hours
	for _, c := range []struct {
		share float64
		unit  int
		want  int
	}{
		{1, 1, 0}, {0.9, 1, 8}, {0.6, 8, 16}, {0.2, 8, 24}, {0.1, 8, 24}, {0.5, 5, 15}, {0.9, 3, 6},
	} {
		if got := levelAbove(lows, c.share, c.unit); got != c.want {
			t.Errorf("share %v unit %d: %d, want %d", c.share, c.unit, got, c.want)
		}
	}
	if got := levelAbove(nil, 0.9, 8); got != 0 {
		t.Errorf("no hours: %d", got)
	}
}

func TestSavings(t *testing.T) {
	demand := []float64{10, 10, 2, 0} // four hours
	// 8 reserved at $4 against $7 on demand: used 8+8+2+0 = 18 GPU-hours
	// ($126 on demand) for 32 GPU-hours paid ($128): $2 more.
	if got := savings(demand, 1, 8, 7, 4); math.Abs(got-(-2)) > 1e-9 {
		t.Fatalf("savings %v, want -2", got)
	}
	if got := savings(demand, 1, 0, 7, 4); got != 0 {
		t.Fatalf("nothing reserved saves %v", got)
	}
}

// TestReserved: steady demand of 16 H100 GPUs with a peak above it is
// worth two reserved machines, priced at the groups' GPU-hours; a class
// without a reserved group gets a level but no savings; a class without
// launches is refused.
func TestReserved(t *testing.T) {
	l := launches{
		{Created: now.Add(-40 * 24 * time.Hour), GPUClass: "H100-80GB", GPUCount: 8},
		{Created: now.Add(-40 * 24 * time.Hour), GPUClass: "H100-80GB", GPUCount: 8},
		{Created: now.Add(-3 * 24 * time.Hour), Ended: now.Add(-2 * 24 * time.Hour), GPUClass: "H100-80GB", GPUCount: 8},
		{Created: now.Add(-10 * 24 * time.Hour), GPUClass: "L4", GPUCount: 3},
	}
	set := groups(t,
		nodegroup.Group{Name: "r", Class: "H100-80GB", Purchase: nodegroup.Reserved, GPUsPerNode: 8, Min: 1, Max: 1, PricePerNodeHour: 32},
		nodegroup.Group{Name: "od", Class: "H100-80GB", Purchase: nodegroup.OnDemand, GPUsPerNode: 8, Max: 4, PricePerNodeHour: 56})
	s := service(t, set, NoPools{}, l)
	r, err := s.Reserved(context.Background(), "H100-80GB", 0.9)
	if err != nil {
		t.Fatal(err)
	}
	// 16 GPUs all 28 days: reserving 16 at $4 instead of $7 saves $3 ×
	// 16 × 720 h a month.
	if r.Level != 16 || r.Unit != 8 || r.ReservedNow != 8 || !r.Priced || r.OnDemandPrice != 7 || r.ReservedPrice != 4 ||
		math.Abs(r.SavingsPerMonth-3*16*720) > 1 || r.Best != 16 {
		t.Fatalf("advice %+v", r)
	}
	l4, err := s.Reserved(context.Background(), "L4", 0.9)
	if err != nil || l4.Level != 3 || l4.Priced || l4.SavingsPerMonth != 0 {
		t.Fatalf("L4 without a reserved group: %+v %v", l4, err)
	}
	var bad *fault.Invalid
	if _, err := s.Reserved(context.Background(), "A100-40GB", 0.9); !errors.As(err, &bad) {
		t.Fatalf("no launches: %v", err)
	}
	if _, err := s.Reserved(context.Background(), "H100-80GB", 1.5); !errors.As(err, &bad) {
		t.Fatalf("share 1.5: %v", err)
	}
}
