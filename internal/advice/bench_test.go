package advice

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// TestFleetWindowMatchesBruteForce: the sliding window's counts equal a
// recount of the last-seen times at every step.
func TestFleetWindowMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	f := NewFleet(600)
	seen, active := map[string]int64{}, map[string]int64{}
	var now int64
	for i := 0; i < 20000; i++ {
		now += int64(r.IntN(30))
		pod := fmt.Sprint(r.IntN(50))
		act := r.IntN(3) == 0
		f.Observe(pod, now, act)
		seen[pod] = now
		if act {
			active[pod] = now
		}
		s, a := 0, 0
		for p, ts := range seen {
			if ts > now-600 {
				s++
				if at, ok := active[p]; ok && at > now-600 {
					a++
				}
			}
		}
		want := 0.0
		if s > 0 {
			want = float64(a) / float64(s)
		}
		if got := f.Active(now); got != want {
			t.Fatalf("step %d: %v, want %v", i, got, want)
		}
	}
}

// BenchmarkOnline: the online rules over 1,000 GPUs × 24 h of 10 s samples
// (8.64 million samples, in time order), as `gantry advise replay` and
// Gantry run them. ns/op is the whole day.
func BenchmarkOnline(b *testing.B) {
	c := h100(b)
	const pods, samples = 1000, 8640
	ids := make([]string, pods)
	for i := range ids {
		ids[i] = fmt.Sprintf("pod-%04d", i)
	}
	for b.Loop() {
		e, _ := NewEngine(c, DefaultRules)
		n := 0
		for s := 0; s < samples; s++ {
			t := int64(s * 10)
			for i, id := range ids {
				duty := 0.0
				if (s/360+i)%3 != 0 { // an hour busy, half an hour idle
					duty = 60
				}
				n += len(e.Observe(id, Obs{T: t, Duty: duty, MemBytes: float64(20+i%20) * (1 << 30)}))
			}
		}
		if n == 0 {
			b.Fatal("no decisions")
		}
	}
}

// BenchmarkAdvise: the findings engine on one workload's day at 10 s steps
// (8,640 points of each of its 18 series); × 1,000 for a fleet.
func BenchmarkAdvise(b *testing.B) {
	c := h100(b)
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var series []telemetry.Series
	for _, m := range telemetry.AllMetrics() {
		s := telemetry.Series{Metric: m, Device: telemetry.Device{GPU: "GPU-1"}}
		for i := 0; i < 8640; i++ {
			v := float64(i%100) / 100
			if m == telemetry.FBUsed || m == telemetry.FBTotal {
				v = 40000 + float64(i%1000)
			}
			s.Points = append(s.Points, telemetry.Point{T: start.Add(time.Duration(i) * 10 * time.Second), Avg: v, Max: v, P95: v, N: 1})
		}
		series = append(series, s)
	}
	in := Input{Workload: "w", Class: c, Count: 1, Series: series, Step: 10 * time.Second, From: start, To: start.Add(24 * time.Hour)}
	for b.Loop() {
		if len(Advise(in)) == 0 {
			b.Fatal("no findings")
		}
	}
}
