package agent

import (
	"math"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// migSlices is how many of a GPU's compute slices a MIG profile holds
// (3g.40gb: 3; 1c.3g.40gb, a compute instance: 1).
func migSlices(profile string) float64 {
	head, _, _ := strings.Cut(profile, ".")
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSuffix(head, "g"), "c"))
	if err != nil || n <= 0 {
		return 1
	}
	return float64(n)
}

// MIGShares is how a MIG GPU's power and energy are split among its
// instances: as they use it — each instance's compute slices times its SM
// activity (its GPU utilization where NVML gives no SM activity) — and, on
// a GPU none of whose instances is active, by their slices.
func MIGShares(insts []DeviceSample) []float64 {
	w := make([]float64, len(insts))
	total, slices := 0.0, 0.0
	for i, s := range insts {
		n := 1.0
		if s.Device.MIG != nil {
			n = migSlices(s.Device.MIG.Profile)
		}
		slices += n
		act := s.Values[telemetry.SMActive]
		if math.IsNaN(act) {
			act = s.Values[telemetry.GPUUtil] / 100
		}
		if math.IsNaN(act) || act < 0 {
			act = 0
		}
		w[i] = n * math.Min(act, 1)
		total += w[i]
	}
	for i, s := range insts {
		switch {
		case total > 0:
			w[i] /= total
		case slices > 0:
			n := 1.0
			if s.Device.MIG != nil {
				n = migSlices(s.Device.MIG.Profile)
			}
			w[i] = n / slices
		}
	}
	return w
}
