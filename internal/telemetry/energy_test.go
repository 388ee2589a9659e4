package telemetry_test

import (
	"math"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// TestIntervalJoules: the energy of one interval between two samples, by
// each rule.
func TestIntervalJoules(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	sample := func(at time.Duration, share, energyMJ, powerW float64) telemetry.Sample {
		v := telemetry.NoValues()
		v[telemetry.Energy], v[telemetry.Power] = energyMJ, powerW
		return telemetry.Sample{Time: t0.Add(at), Share: share, Values: v}
	}
	nan := math.NaN()
	for _, tc := range []struct {
		name       string
		prev, cur  telemetry.Sample
		want       float64 // NaN: unmeasured
		wantMethod string
	}{
		{"the counter's rise", sample(0, 1, 1e6, 500), sample(10*time.Second, 1, 1e6+7e6, 900), 7000, telemetry.ByCounter},
		{"a share of a time-sliced GPU", sample(0, 0.25, 1e6, 500), sample(10*time.Second, 0.25, 1e6+8e6, 900), 2000, telemetry.ByCounter},
		{"an idle pod on a time-sliced GPU", sample(0, 0, 1e6, 0), sample(10*time.Second, 0, 1e6+8e6, 0), 0, telemetry.ByCounter},
		{"no counter: mean power", sample(0, 1, nan, 600), sample(10*time.Second, 1, nan, 800), 7000, telemetry.ByPower},
		{"no counter, a time-sliced pod: its power is its share already", sample(0, 0.5, nan, 300), sample(10*time.Second, 0.5, nan, 400), 3500, telemetry.ByPower},
		{"a driver reload: the counter went back", sample(0, 1, 9e9, 600), sample(10*time.Second, 1, 5e3, 800), 7000, telemetry.ByPower},
		{"only the later power", sample(0, 1, nan, nan), sample(10*time.Second, 1, nan, 700), 7000, telemetry.ByPower},
		{"a share out of range counts whole", sample(0, 2, 0, 700), sample(10*time.Second, 2, 7e6, 700), 7000, telemetry.ByCounter},
		{"neither", sample(0, 1, nan, nan), sample(10*time.Second, 1, nan, nan), nan, ""},
		{"too far apart", sample(0, 1, 1e6, 700), sample(6*time.Minute, 1, 2e6, 700), nan, ""},
		{"out of order", sample(10*time.Second, 1, 1e6, 700), sample(0, 1, 2e6, 700), nan, ""},
	} {
		got, method := telemetry.IntervalJoules(tc.prev, tc.cur)
		if method != tc.wantMethod || (math.IsNaN(tc.want) != math.IsNaN(got)) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-9) {
			t.Errorf("%s: %v J by %q, want %v by %q", tc.name, got, method, tc.want, tc.wantMethod)
		}
	}
	if k := telemetry.KWh(3.6e6); k != 1 {
		t.Errorf("3.6 MJ is %v kWh", k)
	}
}
