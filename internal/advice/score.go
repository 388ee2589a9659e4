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
	// Line is every fixed timeout's result.
	Line []LinePoint `json:"fixedTimeouts"`
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
	s := scoreIdle(tr, ds)
	var total, used float64
	under := 0
	for _, pod := range tr.Pods {
		pts := tr.Series[pod]
		if len(points(pts, duty)) == 0 {
			continue // pods without duty cycle are not scored
		}
		s.Pods++
		var resizes []Decision
		for _, d := range byPod[pod] {
			if d.Action == Resize {
				resizes = append(resizes, d)
			}
		}
		sort.SliceStable(resizes, func(i, j int) bool { return resizes[i].T < resizes[j].T })
		if len(resizes) > 0 {
			s.Resized++
		}
		// Right-sizing over the memory samples.
		mem := points(pts, memory)
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
		s.ReclaimableH += float64(reclaimable(points(pts, duty))) / 3600
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
	s.Line = Line(tr)
	s.LineFalse = lineFalse(s.Line, s.ReclaimedH)
	if s.LineFalse > 0 {
		s.FalseRatio = float64(s.FalseStops) / s.LineFalse
	}
	return s
}

// duty and memory read a sample's duty cycle and memory (NaN: none).
func duty(p replay.TracePoint) float64   { return p.Duty }
func memory(p replay.TracePoint) float64 { return p.MemBytes }

// points keeps the samples that have a value of what reads.
func points(pts []replay.TracePoint, value func(replay.TracePoint) float64) []replay.TracePoint {
	var out []replay.TracePoint
	for _, p := range pts {
		if !math.IsNaN(value(p)) {
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

// idleStretches calls fn with each run duty[i:j] of idle samples.
func idleStretches(duty []replay.TracePoint, fn func(i, j int)) {
	for i := 0; i < len(duty); {
		if duty[i].Duty > scoreIdleDuty {
			i++
			continue
		}
		j := i
		for j < len(duty) && duty[j].Duty <= scoreIdleDuty {
			j++
		}
		fn(i, j)
		i = j
	}
}

// reclaimable is the length of every idle stretch of reclaimableFrom or
// more: from its first idle sample to the next active one (or the end).
func reclaimable(duty []replay.TracePoint) int64 {
	var total int64
	idleStretches(duty, func(i, j int) {
		end := duty[j-1].T + sampleSeconds
		if j < len(duty) {
			end = duty[j].T
		}
		if end-duty[i].T >= reclaimableFrom {
			total += end - duty[i].T
		}
	})
	return total
}

// FixedTimeout is the baseline idle rule: stop at the first sample of an
// idle stretch that is minutes or more after its start.
func FixedTimeout(tr *replay.Trace, minutes int64) []Decision {
	var out []Decision
	for _, pod := range tr.Pods {
		d := points(tr.Series[pod], duty)
		idleStretches(d, func(i, j int) {
			for k := i; k < j; k++ {
				if d[k].T-d[i].T >= minutes*60 {
					out = append(out, Decision{Pod: pod, T: d[k].T, Action: Stop})
					return
				}
			}
		})
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

// Line runs every fixed timeout through the idle scorer.
func Line(tr *replay.Trace) []LinePoint {
	var out []LinePoint
	for _, m := range FixedTimeouts {
		s := scoreIdle(tr, FixedTimeout(tr, m))
		out = append(out, LinePoint{Minutes: m, ReclaimedH: s.ReclaimedH, Stops: s.Stops, FalseStops: s.FalseStops})
	}
	return out
}

// scoreIdle scores the stops among decisions.
func scoreIdle(tr *replay.Trace, ds []Decision) Score {
	var s Score
	byPod := map[string][]Decision{}
	for _, d := range ds {
		if d.Action == Stop {
			byPod[d.Pod] = append(byPod[d.Pod], d)
		}
	}
	for _, pod := range tr.Pods {
		d := points(tr.Series[pod], duty)
		if len(d) == 0 {
			continue
		}
		rec, n, f := reclaim(d, byPod[pod])
		s.ReclaimedH += float64(rec) / 3600
		s.Stops += n
		s.FalseStops += f
	}
	return s
}

// lineFalse reads the fixed timeouts' line at reclaimed hours h: false stops
// interpolated linearly between its neighbours (0 outside the line).
func lineFalse(line []LinePoint, h float64) float64 {
	pts := append([]LinePoint(nil), line...)
	sort.Slice(pts, func(i, j int) bool { return pts[i].ReclaimedH < pts[j].ReclaimedH })
	for i := 0; i+1 < len(pts); i++ {
		a, b := pts[i], pts[i+1]
		if h >= a.ReclaimedH && h <= b.ReclaimedH && b.ReclaimedH > a.ReclaimedH {
			return float64(a.FalseStops) + (float64(b.FalseStops)-float64(a.FalseStops))*(h-a.ReclaimedH)/(b.ReclaimedH-a.ReclaimedH)
		}
	}
	return 0
}
