package store_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/replay"
	"github.com/gantryhq/gantry/internal/store/stores"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// testEnergy: a workload's kWh, from the rollups' joules, is within 2 % of
// integrating its power readings over the same window — on a replayed
// trace pod (the counter), on a GPU without a counter (its power), through
// a driver reload that restarts the counter, and split by share between two
// pods that time-slice one GPU (each reading's power its share, as the
// agent splits it); a MIG instance the replay gives no power has none.
func testEnergy(t *testing.T, s *stores.All) {
	ctx := context.Background()
	tr, err := replay.GenAI()
	if err != nil {
		t.Fatal(err)
	}
	pod := ""
	for p := range tr.Series {
		if time.Duration(tr.Span(p))*time.Second >= replay.TraceDefaultSpan && (pod == "" || p < pod) {
			pod = p
		}
	}
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Hour)
	gpus := []replay.GPU{
		{UUID: "GPU-e0", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{UUID: "GPU-e1", Index: 1, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{UUID: "GPU-e2", Index: 2, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{UUID: "GPU-e3", Index: 3, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{UUID: "GPU-e4", Index: 4, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, MIG: []replay.MIG{{UUID: "MIG-e4-a", Profile: "3g.40gb", InstanceID: 1}}},
	}
	node := replay.NewNode(gpus)
	compute, err := replay.Lookup("compute-bound", "")
	if err != nil {
		t.Fatal(err)
	}
	for i, dev := range []string{"GPU-e0", "GPU-e1", "GPU-e2", "GPU-e3", "MIG-e4-a"} {
		p := replay.TraceProfile(tr, pod)
		if i > 0 {
			p = compute
		}
		if err := node.Play(dev, p, start, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	key := func(dev telemetry.Device, w, podName string) telemetry.SeriesKey {
		return telemetry.SeriesKey{Node: "e1", Device: dev, Pod: telemetry.PodRef{Namespace: "gantry-vision", Name: podName, Container: "main"}, Workload: w}
	}
	truth := map[string]float64{} // workload → joules by the power readings (trapezoid)
	last := map[string]telemetry.Values{}
	var lastAt time.Time
	var rs []telemetry.Stored
	offset := 0.0 // GPU-e2's counter after its driver reload
	for at := start; at.Before(end); at = at.Add(10 * time.Second) {
		samples, err := node.Sample(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, sm := range samples {
			v := sm.Values
			var stored []telemetry.Stored
			switch id := sm.Device.ID(); id {
			case "GPU-e0": // a trace pod, the counter
				stored = append(stored, telemetry.Stored{Series: key(sm.Device, "en-trace", "p0"), Time: at, Share: 1, Values: v})
			case "GPU-e1": // no counter: power only
				v[telemetry.Energy] = math.NaN()
				stored = append(stored, telemetry.Stored{Series: key(sm.Device, "en-power", "p1"), Time: at, Share: 1, Values: v})
			case "GPU-e2": // the driver reloads an hour in: the counter starts again
				if at.Sub(start) == time.Hour {
					offset = v[telemetry.Energy]
				}
				v[telemetry.Energy] -= offset
				stored = append(stored, telemetry.Stored{Series: key(sm.Device, "en-reload", "p2"), Time: at, Share: 1, Values: v})
			case "GPU-e3": // time-sliced by two pods: each reading's power is its share already, as the agent splits it
				va, vb := v, v
				va[telemetry.Power], vb[telemetry.Power] = v[telemetry.Power]*0.3, v[telemetry.Power]*0.7
				stored = append(stored, telemetry.Stored{Series: key(sm.Device, "en-a", "pa"), Attribution: "process", Time: at, Share: 0.3, Values: va},
					telemetry.Stored{Series: key(sm.Device, "en-b", "pb"), Attribution: "process", Time: at, Share: 0.7, Values: vb})
			default: // the MIG instance
				stored = append(stored, telemetry.Stored{Series: key(sm.Device, "en-mig", "pm"), Time: at, Share: 1, Values: v})
			}
			for _, st := range stored {
				w := st.Series.Workload
				if p0, ok := last[w]; ok && !math.IsNaN(p0[telemetry.Power]) {
					truth[w] += (p0[telemetry.Power] + st.Values[telemetry.Power]) / 2 * at.Sub(lastAt).Seconds()
				}
				last[w] = st.Values
			}
			rs = append(rs, stored...)
		}
		lastAt = at
	}
	if err := s.AppendSamples(ctx, rs); err != nil {
		t.Fatal(err)
	}
	svc := rolledUp(t, s, end.Add(time.Hour))
	sum := func(from, to time.Time) map[string]float64 {
		t.Helper()
		hourly, err := s.GPUEnergy(ctx, from, to)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for w, hours := range hourly {
			for h, k := range hours {
				if h.Before(from.Truncate(time.Hour)) || !h.Before(to) || h.Minute() != 0 {
					t.Errorf("%s: an hour %s outside [%s, %s)", w, h, from, to)
				}
				out[w] += k
			}
		}
		return out
	}
	got := sum(start, end.Add(time.Minute))
	if hours, _ := s.GPUEnergy(ctx, start, end); len(hours["en-trace"]) != 2 {
		t.Errorf("en-trace's hours: %v, want two", hours["en-trace"])
	}
	for _, w := range []string{"en-trace", "en-power", "en-reload", "en-a", "en-b"} {
		want := telemetry.KWh(truth[w])
		if want <= 0 || math.Abs(got[w]-want) > 0.02*want {
			t.Errorf("%s: %.4f kWh, want %.4f (±2 %%, the power readings integrated)", w, got[w], want)
		}
		t.Logf("%s: %.4f kWh against %.4f by the power readings (%+.2f %%)", w, got[w], want, 100*(got[w]-want)/want)
	}
	if a, b := got["en-a"], got["en-b"]; math.Abs(a/(a+b)-0.3) > 0.001 {
		t.Errorf("the shared GPU split %.4f / %.4f, want 0.3 / 0.7", a, b)
	}
	if _, ok := got["en-mig"]; ok {
		t.Errorf("a MIG instance without power or counter measured %v kWh", got["en-mig"])
	}
	// A window holds the energy of the intervals that end in it.
	half := sum(start, start.Add(time.Hour))
	if r := half["en-power"] / got["en-power"]; r < 0.45 || r > 0.55 {
		t.Errorf("the first hour holds %.3f of two hours' steady energy", r)
	}

	// Per device (the series API): each workload's one device, its kWh
	// the same as showback's, and how its share was found.
	for w, how := range map[string]string{"en-trace": telemetry.SplitWholeGPU, "en-power": telemetry.SplitWholeGPU, "en-reload": telemetry.SplitWholeGPU,
		"en-a": telemetry.SplitByProcess, "en-b": telemetry.SplitByProcess, "en-mig": telemetry.SplitMIG} {
		devs, err := svc.Energy(ctx, w, start, end.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) != 1 {
			t.Fatalf("%s: energy on %d devices, want 1: %+v", w, len(devs), devs)
		}
		d := devs[0]
		if d.How != how || d.Node != "e1" || d.Pod.Container != "main" {
			t.Errorf("%s: %+v, want how %s on node e1", w, d, how)
		}
		if w == "en-mig" {
			if d.KWh != 0 || d.Minutes != 0 || d.Unmeasured != 120 {
				t.Errorf("%s: %.4f kWh over %d minutes, %d unmeasured; want none measured of 120", w, d.KWh, d.Minutes, d.Unmeasured)
			}
			continue
		}
		if math.Abs(d.KWh-got[w]) > 1e-9*got[w] || d.Minutes != 120 || d.Unmeasured != 0 {
			t.Errorf("%s: %.6f kWh over %d minutes (%d unmeasured); showback has %.6f, want it over 120 minutes", w, d.KWh, d.Minutes, d.Unmeasured, got[w])
		}
	}
	// A window before the workload ran holds no device of it.
	if devs, err := svc.Energy(ctx, "en-trace", start.Add(-time.Hour), start); err != nil || len(devs) != 0 {
		t.Errorf("energy before the run: %+v, %v; want none", devs, err)
	}
}

// appendSteady appends n series' samples every 10 s over [start, end): 500 W
// (its energy counter rising with it), half the SMs active, 60 % busy.
func appendSteady(b *testing.B, s *stores.All, start, end time.Time, n int, key func(g int) telemetry.SeriesKey) {
	b.Helper()
	ctx := context.Background()
	var rs []telemetry.Stored
	for at := start; at.Before(end); at = at.Add(10 * time.Second) {
		for g := range n {
			v := telemetry.NoValues()
			v[telemetry.Power], v[telemetry.Energy], v[telemetry.SMActive], v[telemetry.GPUUtil] = 500, float64(at.Sub(start).Milliseconds())*500, 0.5, 60
			rs = append(rs, telemetry.Stored{Series: key(g), Time: at, Share: 1, Values: v})
		}
		if len(rs) >= 4000 {
			if err := s.AppendSamples(ctx, rs); err != nil {
				b.Fatal(err)
			}
			rs = rs[:0]
		}
	}
	if err := s.AppendSamples(ctx, rs); err != nil {
		b.Fatal(err)
	}
}

// rolledUp is the telemetry service over s at now, with every sample
// appended before rolled up.
func rolledUp(t testing.TB, s *stores.All, now time.Time) *telemetry.Service {
	t.Helper()
	svc, err := telemetry.New(telemetry.Options{Store: s.Telemetry, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for {
		n, err := svc.RollUp(context.Background(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return svc
		}
	}
}

// BenchmarkRollupRead: what a one-minute rollup reads — its own minute of
// 200 series sampled every 10 s, against the same with the 5 minutes before
// it that it now reads to count the energy of the interval crossing into
// the minute (telemetry.EnergyGap).
func BenchmarkRollupRead(b *testing.B) {
	ctx := context.Background()
	for name, open := range backends(b) {
		b.Run(name, func(b *testing.B) {
			s := open(b)
			start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
			appendSteady(b, s, start, start.Add(time.Hour), 200, func(g int) telemetry.SeriesKey {
				return telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-" + strconv.Itoa(g), Index: g % 8}, Workload: "w" + strconv.Itoa(g)}
			})
			for _, tc := range []struct {
				name     string
				lookback time.Duration
			}{{"minute", 0}, {"withLookback", telemetry.EnergyGap}} {
				b.Run(tc.name, func(b *testing.B) {
					i, rows := 0, 0
					for b.Loop() {
						bucket := start.Add(10*time.Minute + time.Duration(i%40)*time.Minute)
						i++
						if err := s.SamplesBetween(ctx, bucket.Add(-tc.lookback), bucket.Add(time.Minute), func(telemetry.Sample) error { rows++; return nil }); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(rows)/float64(i), "rows/op")
				})
			}
		})
	}
}

// BenchmarkSeriesEnergy: what the metrics endpoint's energy adds to a
// workload's series read — a day of an 8-GPU workload (10 s samples,
// rolled up per minute), the series at the portal's 5-minute step beside
// its energy per device over the same day.
func BenchmarkSeriesEnergy(b *testing.B) {
	ctx := context.Background()
	for name, open := range backends(b) {
		b.Run(name, func(b *testing.B) {
			s := open(b)
			start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
			end := start.Add(24 * time.Hour)
			appendSteady(b, s, start, end, 8, func(g int) telemetry.SeriesKey {
				return telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-" + strconv.Itoa(g), Index: g},
					Pod: telemetry.PodRef{Namespace: "gantry-vision", Name: "p0", Container: "main"}, Workload: "bench"}
			})
			svc := rolledUp(b, s, end.Add(time.Hour))
			b.Run("series", func(b *testing.B) {
				for b.Loop() {
					got, err := svc.Series(ctx, telemetry.Query{Target: telemetry.Target{ID: "bench"}, From: start, To: end, Step: 5 * time.Minute})
					if err != nil || len(got) == 0 {
						b.Fatal(len(got), err)
					}
				}
			})
			b.Run("energy", func(b *testing.B) {
				for b.Loop() {
					got, err := svc.Energy(ctx, "bench", start, end)
					if err != nil || len(got) != 8 {
						b.Fatal(len(got), err)
					}
				}
			})
		})
	}
}
