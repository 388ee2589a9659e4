package nodegpu_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/node/nodegpu"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// TestCheck: the preflight check fails a GPU with double-bit errors and a
// failed remapping, and one that raises a critical XID while it watches;
// an application's XID does not fail a GPU, and the watch takes its time
// in one-second waits.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	n := &node{samples: map[string]int{}}
	lib := n.lib(nvml.SUCCESS)
	r, err := nodegpu.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waits := 0
	wait := func(_ context.Context, d time.Duration) error {
		if d != time.Second {
			t.Errorf("waited %s", d)
		}
		waits++
		if waits == 2 {
			// Queued while the check watches.
			n.mu.Lock()
			n.events = append(n.events,
				nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 13, Device: mustDev(lib, 0)}, // an application's fault
				nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79, Device: mustDev(lib, 2)}) // fallen off the bus
			n.mu.Unlock()
		}
		return nil
	}
	rep, err := nodegpu.Check(ctx, r, 3*time.Second, wait)
	if err != nil {
		t.Fatal(err)
	}
	if waits != 3 {
		t.Errorf("waited %d times for a 3s watch", waits)
	}
	if rep.Healthy || len(rep.GPUs) != 3 {
		t.Fatalf("report: %+v", rep)
	}
	want := []struct {
		healthy bool
		why     string
	}{{true, ""}, {false, "row remapping failed: the GPU has run out of spare rows"}, {false, "XID 79 while the check watched"}}
	for i, w := range want {
		if g := rep.GPUs[i]; g.Healthy != w.healthy || g.Why != w.why {
			t.Errorf("GPU %d: %+v, want healthy %v %q", i, g, w.healthy, w.why)
		}
	}
	// A check cut short says so.
	stop := errors.New("stopped")
	if _, err := nodegpu.Check(ctx, r, time.Minute, func(context.Context, time.Duration) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("cut short: %v", err)
	}
}

// TestMIGShares: a MIG GPU's power and energy go to its instances by
// compute slices times activity, and by slices alone when all are idle.
func TestMIGShares(t *testing.T) {
	inst := func(profile string, sm, util float64) agent.DeviceSample {
		v := telemetry.NoValues()
		v[telemetry.SMActive], v[telemetry.GPUUtil] = sm, util
		return agent.DeviceSample{Device: telemetry.Device{GPU: "GPU-m", MIG: &telemetry.MIGInstance{Profile: profile}}, Values: v}
	}
	nan := math.NaN()
	for _, tc := range []struct {
		name  string
		insts []agent.DeviceSample
		want  []float64
	}{
		{"activity times slices", []agent.DeviceSample{inst("1g.10gb", 0.9, nan), inst("3g.40gb", 0.1, nan)}, []float64{0.75, 0.25}},
		{"one idle", []agent.DeviceSample{inst("1g.10gb", 0.5, nan), inst("3g.40gb", 0, nan)}, []float64{1, 0}},
		{"all idle: by slices", []agent.DeviceSample{inst("1g.10gb", 0, nan), inst("3g.40gb", 0, nan), inst("3g.40gb", nan, nan)}, []float64{1.0 / 7, 3.0 / 7, 3.0 / 7}},
		{"no SM activity: GPU utilization", []agent.DeviceSample{inst("2g.20gb", nan, 50), inst("2g.20gb", nan, 100)}, []float64{1.0 / 3, 2.0 / 3}},
		{"a compute instance", []agent.DeviceSample{inst("1c.3g.40gb", 1, nan), inst("2c.3g.40gb", 1, nan)}, []float64{1.0 / 3, 2.0 / 3}},
	} {
		got := agent.MIGShares(tc.insts)
		for i := range tc.want {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%s: shares %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}
