package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
)

var h100 = GPU{UUID: "GPU-1", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}

func sampleOf(t *testing.T, n *Node, id string, at time.Time) telemetry.Values {
	t.Helper()
	ss, err := n.Sample(context.Background(), at)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.Device.ID() == id {
			return s.Values
		}
	}
	t.Fatalf("no device %s", id)
	return telemetry.Values{}
}

// TestSyntheticProfiles: each pattern shows the values that characterise it.
func TestSyntheticProfiles(t *testing.T) {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	near := func(got, want float64) bool { return math.Abs(got-want) <= 0.03 }
	cases := []struct {
		name  string
		at    time.Duration
		check func(v telemetry.Values) bool
	}{
		{"compute-bound", time.Minute, func(v telemetry.Values) bool {
			return v[telemetry.SMActive] >= 0.88 && v[telemetry.TensorActive] > 0.7 && v[telemetry.DRAMActive] < 0.5
		}},
		{"memory-bound", time.Minute, func(v telemetry.Values) bool {
			return near(v[telemetry.DRAMActive], 0.82) && v[telemetry.SMActive] > 0.5 && v[telemetry.SMActive] < 0.6 && v[telemetry.TensorActive] < 0.1
		}},
		{"input-starved", 30 * time.Second, func(v telemetry.Values) bool { return v[telemetry.SMActive] > 0.8 }},
		{"input-starved", 100 * time.Second, func(v telemetry.Values) bool { return v[telemetry.SMActive] < 0.05 && v[telemetry.FBUsed] > 30000 }},
		{"pcie-bound", time.Minute, func(v telemetry.Values) bool {
			return v[telemetry.PCIeRX] > 0.75*LinkBytes && v[telemetry.SMActive] < 0.2
		}},
		{"idle", time.Minute, func(v telemetry.Values) bool {
			return v[telemetry.SMActive] == 0 && v[telemetry.GPUUtil] == 0 && near(v[telemetry.FBUsed]/81559, 0.3)
		}},
		{"near-oom", time.Minute, func(v telemetry.Values) bool { return v[telemetry.FBUsed]/v[telemetry.FBTotal] > 0.95 }},
		{"power-throttled", time.Minute, func(v telemetry.Values) bool {
			return v[telemetry.PowerThrottled] == 1 && v[telemetry.ThermalThrottled] == 0 && v[telemetry.SMClock] < 1500 && v[telemetry.Energy] > 0
		}},
		{"compute-bound", 2 * time.Minute, func(v telemetry.Values) bool {
			return v[telemetry.PowerThrottled] == 0 && v[telemetry.Energy] > 60*600*1000
		}},
	}
	tested := map[string]bool{}
	for _, tc := range cases {
		tested[tc.name] = true
	}
	for _, p := range Synthetic() {
		if !tested[p.Name] {
			t.Errorf("synthetic profile %s has no characteristic values tested", p.Name)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Lookup(tc.name, "")
			if err != nil {
				t.Fatal(err)
			}
			n := NewNode([]GPU{h100})
			n.Play("GPU-1", p, start, 1)
			if v := sampleOf(t, n, "GPU-1", start.Add(tc.at)); !tc.check(v) {
				t.Fatalf("at %s: %v", tc.at, v)
			}
			// Deterministic: the same moment reads the same.
			if a, b := sampleOf(t, n, "GPU-1", start.Add(tc.at)), sampleOf(t, n, "GPU-1", start.Add(tc.at)); a != b {
				t.Fatalf("not deterministic: %v %v", a, b)
			}
		})
	}
}

func TestMIGAndGPM(t *testing.T) {
	g := h100
	g.MIG = []MIG{{UUID: "MIG-a", Profile: "1g.10gb", InstanceID: 9, MemoryMiB: 9856, ComputeShare: 1.0 / 7}, {UUID: "MIG-b", Profile: "3g.40gb", InstanceID: 2, MemoryMiB: 40192, ComputeShare: 3.0 / 7}}
	l4 := GPU{UUID: "GPU-2", Index: 1, Model: "NVIDIA L4", MemoryMiB: 23034}
	n := NewNode([]GPU{g, l4})
	if ds := n.Devices(); len(ds) != 3 || ds[0].ID() != "MIG-a" || ds[2].ID() != "GPU-2" {
		t.Fatalf("devices: %+v", ds)
	}
	p, _ := Lookup("near-oom", "")
	now := time.Now()
	n.Play("MIG-a", p, now, 1)
	n.Play("GPU-2", p, now, 1)
	v := sampleOf(t, n, "MIG-a", now.Add(time.Minute))
	if v[telemetry.FBTotal] != 9856 || v[telemetry.FBUsed] > 9856 || v[telemetry.FBUsed] < 0.95*9856 {
		t.Fatalf("a MIG instance's memory is its own: %v", v)
	}
	if v := sampleOf(t, n, "MIG-b", now); v[telemetry.FBUsed] != 0 || v[telemetry.SMActive] != 0 {
		t.Fatalf("an instance nothing holds: %v", v)
	}
	if v := sampleOf(t, n, "GPU-2", now.Add(time.Minute)); !math.IsNaN(v[telemetry.SMActive]) || math.IsNaN(v[telemetry.GPUUtil]) {
		t.Fatalf("an L4 has no GPM: profiling metrics absent, utilization present: %v", v)
	}
	inv, _ := n.Inventory(context.Background())
	if len(inv) != 2 || !inv[0].MIGEnabled || len(inv[0].MIG) != 2 || len(inv[1].Unsupported) != 1 {
		t.Fatalf("inventory: %+v", inv)
	}
	n.Inject(Fault{GPU: "GPU-1", XID: 79, DoubleBitECC: 1, At: now})
	inv, _ = n.Inventory(context.Background())
	if ev := n.Events(); len(ev) != 1 || ev[0].XID != 79 || inv[0].ECC.VolatileDBE != 1 || len(n.Events()) != 0 {
		t.Fatalf("injected: events %v, inventory %+v", ev, inv[0].ECC)
	}
}

// TestTraceReplay: a trace pod plays its embedded series from the pod's
// first minute: at each minute boundary, utilization is its duty cycle and
// memory used its memory (capped at the device's); between minutes a
// sample holds; past the end the series repeats.
func TestTraceReplay(t *testing.T) {
	tr, err := GenAI()
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Pods) != 76 {
		t.Fatalf("%d pods in the embedded trace, want 76", len(tr.Pods))
	}
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	small := GPU{UUID: "GPU-small", Index: 1, Model: "NVIDIA L4", MemoryMiB: 23034}
	for _, tc := range []struct {
		name string
		gpu  GPU
	}{{"trace:3", h100}, {"trace:0", h100}, {"trace:75", small}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Lookup(tc.name, "")
			if err != nil {
				t.Fatal(err)
			}
			pod := strings.TrimPrefix(p.Name, "trace:")
			series := tr.Series[pod]
			n := NewNode([]GPU{tc.gpu})
			n.Play(tc.gpu.UUID, p, start, 1)
			capped := 0
			for _, pt := range series {
				if math.IsNaN(pt.Duty) || math.IsNaN(pt.MemBytes) {
					continue
				}
				at := time.Duration(pt.T-series[0].T) * time.Second
				mem := math.Min(pt.MemBytes/(1<<20), tc.gpu.MemoryMiB)
				if mem == tc.gpu.MemoryMiB {
					capped++
				}
				for _, off := range []time.Duration{0, 59 * time.Second} {
					v := sampleOf(t, n, tc.gpu.UUID, start.Add(at+off))
					if v[telemetry.GPUUtil] != pt.Duty || v[telemetry.FBUsed] != mem || v[telemetry.FBTotal] != tc.gpu.MemoryMiB {
						t.Fatalf("minute %d +%s: util %v, memory %v of %v MiB; the trace says duty %v, memory %v MiB",
							pt.T/60, off, v[telemetry.GPUUtil], v[telemetry.FBUsed], v[telemetry.FBTotal], pt.Duty, pt.MemBytes/(1<<20))
					}
					// SM activity is duty × the pod's factor (0.6 to 0.85), ± 0.02 of noise;
					// an L4 has none (no GPM).
					if sm := v[telemetry.SMActive]; GPM(tc.gpu.Model) && (pt.Duty == 0 && sm != 0 || sm < 0.6*pt.Duty/100-0.021 || sm > 0.85*pt.Duty/100+0.021) {
						t.Fatalf("minute %d: SM activity %v for duty %v", pt.T/60, v[telemetry.SMActive], pt.Duty)
					}
				}
			}
			if tc.gpu.MemoryMiB < 30000 && capped == 0 {
				t.Fatalf("no sample of %s above an L4's memory: the cap is not tested", pod)
			}
			// Past its end the series starts again.
			span := time.Duration(tr.Span(pod)) * time.Second
			for _, m := range []time.Duration{0, 7 * time.Minute} {
				if a, b := sampleOf(t, n, tc.gpu.UUID, start.Add(m)), sampleOf(t, n, tc.gpu.UUID, start.Add(span+m)); a[telemetry.GPUUtil] != b[telemetry.GPUUtil] || a[telemetry.FBUsed] != b[telemetry.FBUsed] {
					t.Fatalf("minute %s and a span later differ: %v, %v", m, a, b)
				}
			}
		})
	}
}

func TestLookup(t *testing.T) {
	tr, err := GenAI()
	if err != nil {
		t.Fatal(err)
	}
	pod3 := "trace:" + tr.Pods[3]
	for _, tc := range []struct {
		name, key string
		want      string // the profile's name; "" for an error
		err       string
	}{
		{"trace:3", "", pod3, ""},
		{"trace:" + tr.Pods[3][:6], "", pod3, ""},
		{pod3, "", pod3, ""},
		{"trace:76", "", "", "pods 0 to 75"},
		{"trace:-1", "", "", "pods 0 to 75"},
		{"trace:zz", "", "", "0 pods match"},
		{"compute-bound", "", "compute-bound", ""},
		{"near-oom", "any", "near-oom", ""},
		{"nope", "", "", "unknown replay profile \"nope\" (known: trace, trace:<pod id or index>, compute-bound, memory-bound, input-starved, pcie-bound, idle"},
		{"", "", "", "unknown replay profile"},
	} {
		p, err := Lookup(tc.name, tc.key)
		if tc.want == "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Lookup(%q): %v, %v; want an error with %q", tc.name, p.Name, err, tc.err)
			}
			continue
		}
		if err != nil || p.Name != tc.want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", tc.name, p.Name, err, tc.want)
		}
	}
	// The plain "trace" picks by key, the same pod for the same key, only
	// pods with enough data, and not all keys the same pod.
	picked := map[string]bool{}
	for i := 0; i < 50; i++ {
		key := fmt.Sprintf("train-%d", i)
		a, err := Lookup("trace", key)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Lookup("trace", key)
		pod := strings.TrimPrefix(a.Name, "trace:")
		if a.Name != b.Name || tr.Span(pod) < int64(TraceDefaultSpan/time.Second) {
			t.Fatalf("key %s: %s then %s (span %d s)", key, a.Name, b.Name, tr.Span(pod))
		}
		picked[pod] = true
	}
	if len(picked) < 20 {
		t.Fatalf("50 keys picked only %d pods", len(picked))
	}
}

// TestDeterministic: two nodes playing the same profiles from the same
// start read the same, whatever else happened in between; another seed
// gives other noise.
func TestDeterministic(t *testing.T) {
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"compute-bound", "input-starved", "trace:10"} {
		p, err := Lookup(name, "")
		if err != nil {
			t.Fatal(err)
		}
		a, b, c := NewNode([]GPU{h100}), NewNode([]GPU{h100}), NewNode([]GPU{h100})
		a.Play("GPU-1", p, start, 7)
		b.Play("GPU-1", p, start, 7)
		c.Play("GPU-1", p, start, 8)
		sampleOf(t, b, "GPU-1", start.Add(time.Hour)) // b is read once more, out of order
		differ := 0
		for s := 0; s < 600; s += 13 {
			at := start.Add(time.Duration(s) * time.Second)
			va, vb, vc := sampleOf(t, a, "GPU-1", at), sampleOf(t, b, "GPU-1", at), sampleOf(t, c, "GPU-1", at)
			if va != vb {
				t.Fatalf("%s at %d s: %v and %v", name, s, va, vb)
			}
			if va != vc {
				differ++
			}
		}
		if differ == 0 && name == "compute-bound" {
			t.Fatalf("%s: the seed changes nothing", name)
		}
	}
}

// TestEmbeddedTraceMatchesSource: the embedded file is what the converter
// makes of the source data, where the source is at hand (it is not in CI).
func TestEmbeddedTraceMatchesSource(t *testing.T) {
	dir := "../../../shared/data/genai-train"
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("the source trace is not here (%s): nothing to compare", dir)
	}
	tr, err := ReadAlibabaDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tr.Compact(&b); err != nil {
		t.Fatal(err)
	}
	// The same text (gzip's bytes may differ between Go releases).
	gunzip := func(b []byte) []byte {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if !bytes.Equal(gunzip(b.Bytes()), gunzip(genaiData)) {
		t.Error("genai/trace.csv.gz is not what the converter makes of the source: run go run ./internal/replay/convert")
	}
	want, err := ReadCompact(&b)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := GenAI()
	if !slices.Equal(got.Pods, want.Pods) {
		t.Fatalf("pods embedded %v, from the source %v", got.Pods, want.Pods)
	}
	same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
	for _, pod := range want.Pods {
		a, b := got.Series[pod], want.Series[pod]
		if len(a) != len(b) {
			t.Fatalf("pod %s: %d samples embedded, %d from the source", pod, len(a), len(b))
		}
		for i := range a {
			if a[i].T != b[i].T || !same(a[i].Duty, b[i].Duty) || !same(a[i].MemBytes, b[i].MemBytes) {
				t.Fatalf("pod %s sample %d: %+v embedded, %+v from the source", pod, i, a[i], b[i])
			}
		}
	}
	// And the source, unrounded, agrees with what is embedded to the
	// rounding: a minute per sample, a percent, a MiB.
	for _, pod := range tr.Pods {
		short := pod[:idLen]
		s, ok := got.Series[short]
		if !ok {
			continue // no duty cycle in the source: left out
		}
		byT := map[int64]TracePoint{}
		for _, p := range s {
			byT[p.T] = p
		}
		for _, p := range tr.Series[pod] {
			e := byT[p.T]
			if !math.IsNaN(p.Duty) && math.Abs(e.Duty-p.Duty) > 0.5 || !math.IsNaN(p.MemBytes) && math.Abs(e.MemBytes-p.MemBytes) > 1<<19 {
				t.Fatalf("pod %s at %d s: source %+v, embedded %+v", pod, p.T, p, e)
			}
		}
	}
}

// TestCompactRoundTrip: the compact form keeps minutes, gaps and values.
func TestCompactRoundTrip(t *testing.T) {
	duty := "value,timestamp_anon,container_ip\n12.4,1000,aaaaaaaaaaaaXX\n99.6,1114,aaaaaaaaaaaaXX\n50,1057,bbbbbbbbbbbbYY\n"
	mem := "timestamp_anon,value,container_ip\n1000,1048576,aaaaaaaaaaaaXX\n1057,2097152,aaaaaaaaaaaaXX\n1000,5,cccccccccccc\n"
	tr, err := ReadAlibaba(strings.NewReader(duty), "duty.csv", strings.NewReader(mem), "mem.csv")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tr.Compact(&b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCompact(&b)
	if err != nil {
		t.Fatal(err)
	}
	nan := math.NaN()
	want := map[string][]TracePoint{
		"aaaaaaaaaaaa": {{0, 12, 1 << 20}, {60, nan, 2 << 20}, {120, 100, nan}},
		"bbbbbbbbbbbb": {{60, 50, nan}},
	}
	if fmt.Sprint(got.Series) != fmt.Sprint(want) || len(got.Pods) != 2 {
		t.Fatalf("%v, want %v (a pod without duty cycle left out)", got.Series, want)
	}
	if d, m := got.At("aaaaaaaaaaaa", 90); d != 12 || m != 2<<20 {
		t.Fatalf("at 90 s: %v %v; want the duty held from minute 0 and the memory of minute 1", d, m)
	}
	if d, m := got.At("bbbbbbbbbbbb", 0); d != 50 || !math.IsNaN(m) {
		t.Fatalf("a pod starting late plays from its first sample: %v %v", d, m)
	}
}

func TestReadAlibabaErrors(t *testing.T) {
	for _, tc := range []struct{ duty, mem, want string }{
		{"value,timestamp_anon\n", "timestamp_anon,value,container_ip\n", `duty.csv:1: no "container_ip" column`},
		{"value,timestamp_anon,container_ip\n1,2,a\nx,3,a\n", "timestamp_anon,value,container_ip\n", "duty.csv:3: value \"x\""},
		{"value,timestamp_anon,container_ip\n1,2,a\n", "timestamp_anon,value,container_ip\n5,-1,a\n", "mem.csv:2: value \"-1\""},
	} {
		_, err := ReadAlibaba(strings.NewReader(tc.duty), "duty.csv", strings.NewReader(tc.mem), "mem.csv")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}

// TestEnergy: the energy counter integrates power since the profile
// started: it never falls while power does (input-starved, a trace pod),
// it is the same whatever was read before, it grows by about power × time,
// and a MIG instance has none (a GPU's power is not its instances').
func TestEnergy(t *testing.T) {
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"input-starved", "trace:0", "compute-bound"} {
		p, err := Lookup(name, "")
		if err != nil {
			t.Fatal(err)
		}
		n, fresh := NewNode([]GPU{h100}), NewNode([]GPU{h100})
		n.Play("GPU-1", p, start, 3)
		prev := -1.0
		for s := 0; s <= 1800; s += 7 {
			at := start.Add(time.Duration(s) * time.Second)
			v := sampleOf(t, n, "GPU-1", at)
			e := v[telemetry.Energy]
			if e < prev {
				t.Fatalf("%s at %d s: energy %v after %v", name, s, e, prev)
			}
			if prev >= 0 && s > 20 && (e-prev > 7*700*1000*1.01) {
				t.Fatalf("%s at %d s: %v mJ in 7 s at most 700 W", name, s, e-prev)
			}
			if s%301 == 0 {
				fresh.Play("GPU-1", p, start, 3)
				if f := sampleOf(t, fresh, "GPU-1", at); f[telemetry.Energy] != e {
					t.Fatalf("%s at %d s: %v read in order, %v read at once", name, s, e, f[telemetry.Energy])
				}
			}
			prev = e
		}
		if name == "compute-bound" {
			// 0.95 of the power scale: 700 × (0.1 + 0.9 × 0.95) ≈ 668 W for 1800 s.
			if math.Abs(prev-668.5*1800*1000) > 0.03*668.5*1800*1000 {
				t.Fatalf("compute-bound: %v mJ in 30 min", prev)
			}
		}
	}
	g := h100
	g.MIG = []MIG{{UUID: "MIG-a", Profile: "1g.10gb", InstanceID: 1, MemoryMiB: 10194, ComputeShare: 1.0 / 7}}
	n := NewNode([]GPU{g})
	p, _ := Lookup("compute-bound", "")
	n.Play("MIG-a", p, start, 1)
	if v := sampleOf(t, n, "MIG-a", start.Add(time.Minute)); v.Has(telemetry.Energy) || v.Has(telemetry.Power) {
		t.Fatalf("a MIG instance's energy: %v", v)
	}
}
