package advice

import (
	"math"
	"sort"

	"github.com/gantryhq/gantry/internal/replay"
)

// Score measures decisions on a trace, as the Advice issue defines it.
type Score struct {
	// Right-sizing: Saved is 1 − the time-weighted share of the GPU over
	// all pod-time (a pod holds the whole GPU until its first resize, and a
	// resize holds until its next); UnderProvisioned is the share of pods
	// with a memory sample above Fill × the memory of the profile holding
	// then (over every pod of the trace).
	Saved            float64 `json:"gpuShareSaved"`
	UnderProvisioned float64 `json:"underProvisioned"`
	Resized          int     `json:"resizedPods"`
	Pods             int     `json:"pods"`
	// Idle: a stop reclaims the GPU until the pod's next sample with duty
	// above IdleDuty (or its last sample's minute); it is false when that
	// comes within FalseWithin. Reclaimable is every idle stretch of
	// ReclaimableFrom or more.
	Stops          int     `json:"stops"`
	FalseStops     int     `json:"falseStops"`
	ReclaimedH     float64 `json:"reclaimedHours"`
	ReclaimableH   float64 `json:"reclaimableHours"`
	ReclaimedShare float64 `json:"reclaimedShare"`
	// Against the fixed timeouts: their line's false stops at this many
	// reclaimed hours, and FalseStops over it.
	LineFalse  float64 `json:"fixedTimeoutFalseStopsAtSameHours"`
	FalseRatio float64 `json:"falseStopsOverFixedTimeouts"`
}

// Scoring constants (the issue's).
const (
	scoreIdleDuty   = 1.0
	falseWithin     = 15 * 60
	reclaimableFrom = 30 * 60
	sampleSeconds   = 60
	underFill       = 0.98
)

// FixedTimeouts are the baseline idle timeouts, in minutes.
var FixedTimeouts = []int64{5, 10, 15, 30, 45, 60, 90, 120, 180, 240}

// ScoreDecisions scores decisions on the trace (times in its seconds) for
// the given profiles.
func ScoreDecisions(tr *replay.Trace, ds []Decision, profiles []Profile) Score {
	byPod := map[string][]Decision{}
	for _, d := range ds {
		byPod[d.Pod] = append(byPod[d.Pod], d)
	}
	prof := map[string]Profile{}
	for _, p := range profiles {
		prof[p.Name] = p
	}
	var s Score
	var total, used float64
	under := 0
	for _, pod := range tr.Pods {
		pts := tr.Series[pod]
		if !hasDuty(pts) {
			continue // pods without duty cycle are not scored
		}
		s.Pods++
		var resizes, stops []Decision
		for _, d := range byPod[pod] {
			switch d.Action {
			case Resize:
				resizes = append(resizes, d)
			case Stop:
				stops = append(stops, d)
			}
		}
		sort.SliceStable(resizes, func(i, j int) bool { return resizes[i].T < resizes[j].T })
		if len(resizes) > 0 {
			s.Resized++
		}
		// Right-sizing over the memory samples.
		mem := memPoints(pts)
		bad := false
		k := -1
		for i, p := range mem {
			for k+1 < len(resizes) && resizes[k+1].T < p.T {
				k++
			}
			w := float64(sampleSeconds)
			if i+1 < len(mem) {
				w = float64(mem[i+1].T - p.T)
			}
			share := 1.0
			if k >= 0 {
				pr, ok := prof[resizes[k].Profile]
				if ok {
					share = pr.Share
					if p.MemBytes > underFill*pr.MemGiB*(1<<30) {
						bad = true
					}
				}
			}
			total += w
			used += w * share
		}
		if bad {
			under++
		}
		// Idle.
		duty := dutyPoints(pts)
		s.ReclaimableH += float64(reclaimable(duty)) / 3600
		rec, n, f := reclaim(duty, stops)
		s.ReclaimedH += float64(rec) / 3600
		s.Stops += n
		s.FalseStops += f
	}
	if total > 0 {
		s.Saved = 1 - used/total
	}
	if s.Pods > 0 {
		s.UnderProvisioned = float64(under) / float64(s.Pods)
	}
	if s.ReclaimableH > 0 {
		s.ReclaimedShare = s.ReclaimedH / s.ReclaimableH
	}
	s.LineFalse = lineFalse(tr, s.ReclaimedH)
	if s.LineFalse > 0 {
		s.FalseRatio = float64(s.FalseStops) / s.LineFalse
	}
	return s
}

func hasDuty(pts []replay.TracePoint) bool {
	for _, p := range pts {
		if !math.IsNaN(p.Duty) {
			return true
		}
	}
	return false
}

func memPoints(pts []replay.TracePoint) []replay.TracePoint {
	var out []replay.TracePoint
	for _, p := range pts {
		if !math.IsNaN(p.MemBytes) {
			out = append(out, p)
		}
	}
	return out
}

func dutyPoints(pts []replay.TracePoint) []replay.TracePoint {
	var out []replay.TracePoint
	for _, p := range pts {
		if !math.IsNaN(p.Duty) {
			out = append(out, p)
		}
	}
	return out
}

// nextActive is the time of the first sample after t with duty above idle,
// or the pod's last sample's minute's end.
func nextActive(duty []replay.TracePoint, t int64) int64 {
	i := sort.Search(len(duty), func(i int) bool { return duty[i].T > t })
	for ; i < len(duty); i++ {
		if duty[i].Duty > scoreIdleDuty {
			return duty[i].T
		}
	}
	return duty[len(duty)-1].T + sampleSeconds
}

// reclaim scores a pod's stops: seconds reclaimed, stops counted, false
// ones. A stop while the GPU is already reclaimed counts for nothing.
func reclaim(duty []replay.TracePoint, stops []Decision) (rec int64, n, bad int) {
	sort.SliceStable(stops, func(i, j int) bool { return stops[i].T < stops[j].T })
	var until int64 = math.MinInt64
	for _, d := range stops {
		if d.T < until || len(duty) == 0 {
			continue
		}
		end := nextActive(duty, d.T)
		n++
		rec += end - d.T
		if end-d.T <= falseWithin {
			bad++
		}
		until = end
	}
	return rec, n, bad
}

// reclaimable is the length of every idle stretch of reclaimableFrom or
// more: from its first idle sample to the next active one (or the end).
func reclaimable(duty []replay.TracePoint) int64 {
	var total int64
	for i := 0; i < len(duty); {
		if duty[i].Duty > scoreIdleDuty {
			i++
			continue
		}
		j := i
		for j < len(duty) && duty[j].Duty <= scoreIdleDuty {
			j++
		}
		end := duty[j-1].T + sampleSeconds
		if j < len(duty) {
			end = duty[j].T
		}
		if end-duty[i].T >= reclaimableFrom {
			total += end - duty[i].T
		}
		i = j
	}
	return total
}

// FixedTimeout is the baseline idle rule: stop at the first sample of an
// idle stretch that is minutes or more after its start.
func FixedTimeout(tr *replay.Trace, minutes int64) []Decision {
	var out []Decision
	for _, pod := range tr.Pods {
		duty := dutyPoints(tr.Series[pod])
		for i := 0; i < len(duty); {
			if duty[i].Duty > scoreIdleDuty {
				i++
				continue
			}
			j := i
			for j < len(duty) && duty[j].Duty <= scoreIdleDuty {
				j++
			}
			for k := i; k < j; k++ {
				if duty[k].T-duty[i].T >= minutes*60 {
					out = append(out, Decision{Pod: pod, T: duty[k].T, Action: Stop})
					break
				}
			}
			i = j
		}
	}
	return out
}

// LinePoint is one fixed timeout's result.
type LinePoint struct {
	Minutes    int64   `json:"minutes"`
	ReclaimedH float64 `json:"reclaimedHours"`
	Stops      int     `json:"stops"`
	FalseStops int     `json:"falseStops"`
}

// Line runs every fixed timeout through the scorer.
func Line(tr *replay.Trace) []LinePoint {
	var out []LinePoint
	for _, m := range FixedTimeouts {
		s := scoreIdle(tr, FixedTimeout(tr, m))
		out = append(out, LinePoint{Minutes: m, ReclaimedH: s.ReclaimedH, Stops: s.Stops, FalseStops: s.FalseStops})
	}
	return out
}

func scoreIdle(tr *replay.Trace, ds []Decision) Score {
	var s Score
	byPod := map[string][]Decision{}
	for _, d := range ds {
		byPod[d.Pod] = append(byPod[d.Pod], d)
	}
	for _, pod := range tr.Pods {
		duty := dutyPoints(tr.Series[pod])
		if len(duty) == 0 {
			continue
		}
		rec, n, f := reclaim(duty, byPod[pod])
		s.ReclaimedH += float64(rec) / 3600
		s.Stops += n
		s.FalseStops += f
	}
	return s
}

// lineFalse reads the fixed timeouts' line at reclaimed hours h: false stops
// interpolated linearly between its neighbours (0 outside the line).
func lineFalse(tr *replay.Trace, h float64) float64 {
	pts := Line(tr)
	sort.Slice(pts, func(i, j int) bool { return pts[i].ReclaimedH < pts[j].ReclaimedH })
	for i := 0; i+1 < len(pts); i++ {
		a, b := pts[i], pts[i+1]
		if h >= a.ReclaimedH && h <= b.ReclaimedH && b.ReclaimedH > a.ReclaimedH {
			return float64(a.FalseStops) + (float64(b.FalseStops)-float64(a.FalseStops))*(h-a.ReclaimedH)/(b.ReclaimedH-a.ReclaimedH)
		}
	}
	return 0
}
