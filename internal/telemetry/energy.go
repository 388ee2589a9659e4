package telemetry

import (
	"context"
	"fmt"
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

// How a device's energy was split to the pod, for DeviceEnergy.How.
const (
	SplitWholeGPU  = "whole-gpu"        // the pod held the GPU alone: all of it
	SplitMIG       = "mig-instance"     // the GPU's, by its instances' compute slices × activity (agent.MIGShares)
	SplitByProcess = "time-sliced"      // a shared GPU's, by the pods' processes' utilization
	SplitEvenly    = "time-sliced-even" // a shared GPU's, evenly: no per-process data (a guess)
)

// DeviceEnergy is the energy one pod of a workload used on one device (a
// GPU or a MIG instance) over a window, from the one-minute rollups.
type DeviceEnergy struct {
	Node   string
	Device Device
	Pod    PodRef
	// How says how the device's energy was split to the pod (Split*), as
	// the agent last reported it: a pod that shared its GPU earlier and
	// holds it alone now says whole-gpu for the earlier window too.
	How string
	// KWh is the energy of the minutes measured; Minutes how many
	// one-minute rollups had energy, Unmeasured how many had samples but
	// no energy (no counter and no power reading, or the samples over
	// EnergyGap apart). A minute without samples is in neither.
	KWh                 float64
	Minutes, Unmeasured int
}

// split names how a series' device energy was attributed to its pod.
func split(d Device, attribution string) string {
	switch {
	case d.MIG != nil:
		return SplitMIG
	case attribution == "process":
		return SplitByProcess
	case attribution == "even":
		return SplitEvenly
	}
	return SplitWholeGPU
}

// Energy is workload id's energy per device and pod over [from, to): the
// joules of its series' one-minute rollups whose minute starts in the
// window (a minute not rolled up yet — the last one or two — is not in
// it), summed in the store, one row a series. Gantry's own store answers
// whatever source serves the series.
func (s *Service) Energy(ctx context.Context, id string, from, to time.Time) ([]DeviceEnergy, error) {
	recs, err := s.o.Store.WorkloadSeries(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("energy of workload %s: %w", id, err)
	}
	out := []DeviceEnergy{}
	if len(recs) == 0 {
		return out, nil
	}
	ids := make([]int64, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	sums, err := s.o.Store.SeriesEnergy(ctx, ids, from, to)
	if err != nil {
		return nil, fmt.Errorf("energy of workload %s: %w", id, err)
	}
	for _, r := range recs {
		e, ok := sums[r.ID]
		if !ok || e.Minutes+e.Unmeasured == 0 {
			continue // no minute of it in the window
		}
		kwh := KWh(e.Joules)
		if math.IsNaN(kwh) || math.IsInf(kwh, 0) {
			kwh = 0
		}
		out = append(out, DeviceEnergy{Node: r.Key.Node, Device: r.Key.Device, Pod: r.Key.Pod, How: split(r.Key.Device, r.Attribution),
			KWh: kwh, Minutes: e.Minutes, Unmeasured: e.Unmeasured})
	}
	return out, nil
}
