package nodegpu

import (
	"testing"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// TestSplitMIGCounters: each instance's energy counter adds its share of
// what the GPU's counter rose by each pass; the first pass and a counter
// that went back (a driver reload) add nothing; the counters only rise.
func TestSplitMIGCounters(t *testing.T) {
	r := &Reader{gpuEnergy: map[string]float64{}, migEnergy: map[string]float64{}}
	pass := func(gpuMJ, smA, smB float64) (float64, float64) {
		parent := telemetry.NoValues()
		parent[telemetry.Energy], parent[telemetry.Power] = gpuMJ, 400
		insts := []agent.DeviceSample{
			{Device: telemetry.Device{GPU: "GPU-m", MIG: &telemetry.MIGInstance{UUID: "MIG-a", Profile: "1g.10gb"}}, Values: telemetry.NoValues()},
			{Device: telemetry.Device{GPU: "GPU-m", MIG: &telemetry.MIGInstance{UUID: "MIG-b", Profile: "1g.10gb"}}, Values: telemetry.NoValues()},
		}
		insts[0].Values[telemetry.SMActive], insts[1].Values[telemetry.SMActive] = smA, smB
		r.splitMIG("GPU-m", parent, insts)
		return insts[0].Values[telemetry.Energy], insts[1].Values[telemetry.Energy]
	}
	steps := []struct {
		gpuMJ, smA, smB float64
		a, b            float64
	}{
		{1000, 1, 0, 0, 0},           // the first pass: counters start
		{5000, 1, 0, 4000, 0},        // 4 J, all to a
		{9000, 0.5, 0.5, 6000, 2000}, // 4 J, halved
		{100, 0.5, 0.5, 6000, 2000},  // the driver reloaded: nothing added
		{1100, 0, 0, 6500, 2500},     // 1 J while both idle: by slices
	}
	for i, s := range steps {
		a, b := pass(s.gpuMJ, s.smA, s.smB)
		if a != s.a || b != s.b {
			t.Errorf("pass %d: counters %v and %v, want %v and %v", i, a, b, s.a, s.b)
		}
	}
}
