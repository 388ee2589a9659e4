package telemetry

import (
	"math"
	"time"
)

// EnergyGap is the longest interval between two samples of a series whose
// energy is counted: a longer one (the agent away, the pod gone a while)
// is unmeasured rather than guessed. A period's rollup reads the samples
// from EnergyGap before it, so a sample that arrives late marks the period
// after its own too (its interval to the next sample ends there).
const EnergyGap = 5 * time.Minute

// Energy methods: how a series' joules were found.
const (
	ByCounter = "counter" // the rise of NVML's energy counter between two samples
	ByPower   = "power"   // the mean of two power readings over their interval
)

// IntervalJoules is the energy one series' pod used between two consecutive
// samples, in joules, and how it was found:
//   - the rise of the device's energy counter (mJ) when both samples have it
//     and it did not go back (a driver reload restarts it), times the later
//     sample's share (1 for a device the pod holds alone, its part of a
//     time-sliced one, 0 for a pod whose processes were idle): the counter
//     is the device's;
//   - else the mean of their power readings (W) over the interval: the
//     agent gives each pod of a time-sliced device its share of the power
//     already, and a MIG instance its share of the GPU's (agent.MIGShares);
//   - NaN when neither can say, or the samples are further apart than
//     EnergyGap.
func IntervalJoules(prev, cur Sample) (float64, string) {
	dt := cur.Time.Sub(prev.Time)
	if dt <= 0 || dt > EnergyGap {
		return math.NaN(), ""
	}
	share := cur.Share
	if math.IsNaN(share) || share < 0 || share > 1 {
		share = 1
	}
	e0, e1 := prev.Values[Energy], cur.Values[Energy]
	if !math.IsNaN(e0) && !math.IsNaN(e1) && e1 >= e0 {
		return (e1 - e0) / 1000 * share, ByCounter
	}
	p0, p1 := prev.Values[Power], cur.Values[Power]
	switch {
	case !math.IsNaN(p0) && !math.IsNaN(p1):
		return (p0 + p1) / 2 * dt.Seconds(), ByPower
	case !math.IsNaN(p1):
		return p1 * dt.Seconds(), ByPower
	}
	return math.NaN(), ""
}

// KWh is joules in kilowatt-hours.
func KWh(joules float64) float64 { return joules / 3.6e6 }
