package replay

import (
	"bytes"
	"context"
	"math"
	"os"
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
	for _, tc := range []struct {
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
	} {
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

// TestTraceReplay: a trace pod plays its series: duty cycle as utilization,
// memory as used, each sample held until the next.
func TestTraceReplay(t *testing.T) {
	tr, err := GenAI()
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Pods) < 70 {
		t.Fatalf("%d pods in the embedded trace", len(tr.Pods))
	}
	pod := tr.Pods[3]
	p, err := Lookup("trace:3", "")
	if err != nil || p.Name != "trace:"+pod {
		t.Fatalf("lookup by index: %v %v", p.Name, err)
	}
	if q, err := Lookup("trace:"+pod[:6], ""); err != nil || q.Name != p.Name {
		t.Fatalf("lookup by prefix: %v %v", q.Name, err)
	}
	if a, _ := Lookup("trace", "train-abcde"); a.Name != func() string { b, _ := Lookup("trace", "train-abcde"); return b.Name }() {
		t.Fatal("the trace pod a key gets must not change")
	}
	n := NewNode([]GPU{h100})
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	n.Play("GPU-1", p, start, 1)
	checked := 0
	for _, pt := range tr.Series[pod][:200] {
		if math.IsNaN(pt.Duty) || math.IsNaN(pt.MemBytes) {
			continue
		}
		v := sampleOf(t, n, "GPU-1", start.Add(time.Duration(pt.T)*time.Second))
		if math.Abs(v[telemetry.GPUUtil]-pt.Duty) > 2.5 || math.Abs(v[telemetry.FBUsed]-math.Min(pt.MemBytes/(1<<20), 81559)) > 1 {
			t.Fatalf("t=%d: util %v mem %v; the trace says duty %v mem %v MiB", pt.T, v[telemetry.GPUUtil], v[telemetry.FBUsed], pt.Duty, pt.MemBytes/(1<<20))
		}
		checked++
	}
	if checked < 100 {
		t.Fatalf("only %d samples checked", checked)
	}
	if _, err := Lookup("nope", ""); err == nil || !strings.Contains(err.Error(), "compute-bound") {
		t.Fatalf("an unknown profile: %v", err)
	}
}

// TestEmbeddedTraceMatchesSource: the embedded file is what the converter
// makes of the source data, where the source is at hand.
func TestEmbeddedTraceMatchesSource(t *testing.T) {
	dir := "../../../shared/data/genai-train"
	if _, err := os.Stat(dir); err != nil {
		t.Skip("the source trace is not here (" + dir + "): nothing to compare")
	}
	tr, err := ReadAlibabaDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tr.Compact(&b); err != nil {
		t.Fatal(err)
	}
	want, _ := ReadCompact(&b)
	got, _ := GenAI()
	if len(got.Pods) != len(want.Pods) {
		t.Fatalf("%d pods embedded, %d in the source", len(got.Pods), len(want.Pods))
	}
	for _, pod := range want.Pods {
		a, b := got.Series[pod], want.Series[pod]
		if len(a) != len(b) {
			t.Fatalf("pod %s: %d samples embedded, %d in the source", pod, len(a), len(b))
		}
		for i := range a {
			if a[i].T != b[i].T || !(a[i].Duty == b[i].Duty || math.IsNaN(a[i].Duty) && math.IsNaN(b[i].Duty)) {
				t.Fatalf("pod %s sample %d: %+v vs %+v (run go run ./internal/replay/convert)", pod, i, a[i], b[i])
			}
		}
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
