package advice

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// Input is what the engine judges a workload on: its GPUs' series (from a
// telemetry.Source, one point per Step) and what it was launched with.
type Input struct {
	Workload string
	Class    gpu.Class
	Count    int    // GPUs (or MIG instances) it holds
	Profile  string // its MIG profile; "" for whole GPUs
	// Allowed are the MIG profiles its template allows (a recommendation
	// outside them is said as a request to the platform team).
	Allowed  []string
	Template string
	Spot     bool
	Series   []telemetry.Series
	From, To time.Time
	Step     time.Duration
	// Unhealthy lists why GPUs it runs on are unhealthy (node health).
	Unhealthy []string
}

// Finding is one piece of advice, with the evidence behind it.
type Finding struct {
	Kind       string     `json:"kind"`
	Severity   string     `json:"severity"` // info | warning | critical
	Platform   bool       `json:"platform"` // the platform's to fix, not the user's
	Evidence   []Evidence `json:"evidence"`
	Reason     string     `json:"reason"`
	Confidence float64    `json:"confidence"`
	Action     string     `json:"action"`
	// MonthlyUSD is what the action saves a month at the class's price
	// (negative: what it costs, for a larger profile before an OOM).
	MonthlyUSD float64 `json:"monthlyUSD"`
	// Recommend is the GPU choice the action leads to, when it is one.
	Recommend *Choice `json:"recommend,omitempty"`
	// Series names the metrics and window that prove it.
	Series []string  `json:"series"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
}

// Evidence is one measured value a finding rests on.
type Evidence struct {
	Metric string  `json:"metric"`
	Stat   string  `json:"stat"` // p50, p95, max, mean, share-below-0.05, …
	Value  float64 `json:"value"`
}

// Choice is a GPU choice: a MIG profile, or whole GPUs.
type Choice struct {
	Profile string `json:"profile,omitempty"`
	Count   int    `json:"count"`
}

// Finding kinds.
const (
	KindIdle             = "idle"
	KindOverProvisioned  = "over-provisioned"
	KindFewerGPUs        = "fewer-gpus"
	KindNearOOM          = "near-oom"
	KindMemoryBound      = "memory-bandwidth-bound"
	KindInputStarved     = "input-starved"
	KindInterconnect     = "interconnect-bound"
	KindWellUsed         = "compute-bound-well-used"
	KindTensorUnused     = "tensor-cores-unused"
	KindThrottled        = "throttled"
	KindUnhealthy        = "unhealthy-gpu"
	KindTooLittleSamples = "not-enough-data"
)

// Thresholds, with where each comes from (docs/advice.md says more).
const (
	// NVIDIA's DCGM guidance: SM activity ≥ 0.8 is necessary for effective
	// use; < 0.5 is likely ineffective.
	smEffective   = 0.8
	smIneffective = 0.5
	// DRAM activity tops out near 0.8 in practice.
	dramCeiling = 0.8
	// A GPU at ≤ 1 % utilization (DCGM_FI_DEV_GPU_UTIL) or SM activity ≤
	// 0.01 runs no kernel to speak of: the idle threshold of the scorer.
	idleSM = 0.01
	// Memory near its end: above 95 % of the slice.
	nearOOM = 0.95
	// Right-sizing's headroom over the peak memory seen, from the training
	// trace (docs/advice.md: peaks grow by model swaps).
	headroom = 1.2
	// Links: PCIe Gen5 x16 per direction, NVLink 4 (H100) per direction.
	pcieMax   = 64e9
	nvlinkMax = 450e9
	// How long a workload must be watched before right-sizing it, and the
	// least for any finding.
	minRightsize  = 2 * time.Hour
	minAny        = 10 * time.Minute
	hoursPerMonth = 730
)

// stats over the points of one metric across a workload's devices.
type stats struct {
	vals []float64 // every point's mean
	maxs []float64
}

func (s stats) n() int { return len(s.vals) }

func (s stats) q(p float64) float64 {
	xs := append([]float64(nil), s.vals...)
	sort.Float64s(xs)
	return telemetry.Quantile(xs, p)
}

func (s stats) max() float64 {
	m := math.Inf(-1)
	for _, v := range s.maxs {
		m = math.Max(m, v)
	}
	return m
}

func (s stats) mean() float64 {
	sum := 0.0
	for _, v := range s.vals {
		sum += v
	}
	return sum / float64(len(s.vals))
}

// shareBelow is the share of points below x.
func (s stats) shareBelow(x float64) float64 {
	n := 0
	for _, v := range s.vals {
		if v < x {
			n++
		}
	}
	return float64(n) / float64(len(s.vals))
}

// Advise judges a workload. Every finding says what it measured, the
// threshold it used and where that comes from.
func Advise(in Input) []Finding {
	by := map[telemetry.Metric]stats{}
	smByDevice, utilByDevice := map[string]stats{}, map[string]stats{}
	for _, s := range in.Series {
		st := by[s.Metric]
		for _, p := range s.Points {
			st.vals = append(st.vals, p.Avg)
			st.maxs = append(st.maxs, p.Max)
		}
		by[s.Metric] = st
		for m, per := range map[telemetry.Metric]map[string]stats{telemetry.SMActive: smByDevice, telemetry.GPUUtil: utilByDevice} {
			if s.Metric != m {
				continue
			}
			d := per[s.Device.ID()]
			for _, p := range s.Points {
				v := p.Avg
				if m == telemetry.GPUUtil {
					v /= 100
				}
				d.vals = append(d.vals, v)
			}
			per[s.Device.ID()] = d
		}
	}
	perDevice := smByDevice // activity per device: SM activity where measured
	if len(perDevice) == 0 {
		perDevice = utilByDevice
	}
	// Activity: SM activity where the GPU measures it (Hopper), else the
	// coarse utilization as a ratio.
	act, actName := by[telemetry.SMActive], telemetry.SMActive.String()
	if act.n() == 0 {
		u := by[telemetry.GPUUtil]
		act = stats{vals: scale(u.vals, 0.01), maxs: scale(u.maxs, 0.01)}
		actName = telemetry.GPUUtil.String() + "/100"
	}
	// Observed: from the first point to the last (samples may come less
	// often than the step).
	var first, last time.Time
	for _, s := range in.Series {
		if len(s.Points) == 0 || (s.Metric != telemetry.SMActive && s.Metric != telemetry.GPUUtil) {
			continue
		}
		if first.IsZero() || s.Points[0].T.Before(first) {
			first = s.Points[0].T
		}
		if l := s.Points[len(s.Points)-1].T; l.After(last) {
			last = l
		}
	}
	observed := time.Duration(0)
	if !first.IsZero() {
		observed = last.Sub(first) + in.Step
	}
	window := fmt.Sprintf("over %s", roundDur(observed))
	f := func(kind, sev string, ev []Evidence, reason, action string, conf float64, series ...telemetry.Metric) Finding {
		names := make([]string, len(series))
		for i, m := range series {
			names[i] = m.String()
		}
		return Finding{Kind: kind, Severity: sev, Evidence: ev, Reason: reason, Action: action, Confidence: math.Round(conf*100) / 100,
			Series: names, From: in.From, To: in.To}
	}
	var out []Finding
	for _, why := range in.Unhealthy {
		u := f(KindUnhealthy, "critical", nil, "a GPU this workload runs on is unhealthy: "+why+" (XID critical errors, double-bit ECC errors and failed row remapping are the GPU's, not the workload's)",
			"the platform team drains the node and resets or replaces the GPU; restart the workload to move it", 1)
		u.Platform = true
		out = append(out, u)
	}
	if act.n() == 0 || observed < minAny {
		return append(out, f(KindTooLittleSamples, "info", nil, fmt.Sprintf("%s of GPU samples; advice needs at least %s", roundDur(observed), roundDur(minAny)), "wait for more samples", 0))
	}
	conf := math.Min(1, observed.Hours()/24) // a day shows the daily rhythm
	price := in.Class.Price.OnDemand
	if in.Spot && in.Class.Price.Spot > 0 {
		price = in.Class.Price.Spot
	}
	profiles := Profiles(in.Class)
	curShare := 1.0
	curMem := float64(in.Class.MemoryGiB)
	for _, p := range profiles {
		if p.Name == in.Profile {
			curShare, curMem = p.Share, p.MemGiB
		}
	}
	count := max(1, in.Count)
	monthly := func(shareSaved float64) float64 {
		return math.Round(shareSaved*price*hoursPerMonth*100) / 100
	}
	p50, p95 := act.q(0.5), act.q(0.95)
	// Idle: nothing ran for the last stretch of the window.
	if p95 <= idleSM {
		out = append(out, f(KindIdle, "warning", []Evidence{{actName, "p95", p95}},
			fmt.Sprintf("%s p95 %.3f %s: the GPU is held with no kernel running (≤ %.2f, the idle threshold)", actName, p95, window, idleSM),
			"stop the workload, or set an idle timeout in its template's lifecycle", math.Max(conf, 0.5), telemetry.SMActive, telemetry.GPUUtil))
		out[len(out)-1].MonthlyUSD = monthly(curShare * float64(count))
		return out // nothing else to judge on an idle GPU
	}
	// Memory.
	fb := by[telemetry.FBUsed]
	fbTotal := by[telemetry.FBTotal]
	peakGiB := fb.max() / 1024
	if fb.n() > 0 && fbTotal.n() > 0 {
		total := fbTotal.max()
		if fb.max() > nearOOM*total {
			// The next profile the template allows with more memory; if
			// none, whole GPUs ("" below).
			next := ""
			for _, p := range profiles {
				if p.MemGiB > curMem*1.01 && p.Share < 1 && slices.Contains(in.Allowed, p.Name) {
					next = p.Name
					break
				}
			}
			nf := f(KindNearOOM, "critical", []Evidence{{telemetry.FBUsed.String(), "max", fb.max()}, {telemetry.FBTotal.String(), "max", total}},
				fmt.Sprintf("memory peaked at %.1f of %.1f GiB (%.0f %%) %s: above %.0f %% an allocation can fail at any moment", fb.max()/1024, total/1024, 100*fb.max()/total, window, 100*nearOOM),
				"move to a profile with more memory before it fails", 0.9, telemetry.FBUsed, telemetry.FBTotal)
			switch {
			case next != "":
				nf.Action = "move to " + next + " before it fails"
				nf.Recommend = &Choice{Profile: next, Count: count}
				for _, p := range profiles {
					if p.Name == next {
						nf.MonthlyUSD = -monthly((p.Share - curShare) * float64(count))
					}
				}
			case in.Profile != "":
				nf.Action = "move to whole GPUs before it fails"
				nf.Recommend = &Choice{Count: count}
				nf.MonthlyUSD = -monthly((1 - curShare) * float64(count))
			}
			out = append(out, nf)
		} else if observed >= minRightsize {
			// Over-provisioned: the smallest profile whose memory holds the
			// peak with headroom and whose compute holds the activity.
			need := act.q(0.95) * curShare
			for _, p := range profiles {
				if p.Share >= curShare || peakGiB*headroom > p.MemGiB*0.98 || need > p.Share {
					continue
				}
				allowed := slices.Contains(in.Allowed, p.Name)
				op := f(KindOverProvisioned, "warning", []Evidence{{telemetry.FBUsed.String(), "max", fb.max()}, {actName, "p95", act.q(0.95)}},
					fmt.Sprintf("memory peaked at %.1f GiB and %s p95 is %.2f of the %s %s: %s holds the peak × %.1f (%.1f GiB of %.0f) and the activity (%.2f of the GPU ≤ %.2f)",
						peakGiB, actName, act.q(0.95), orWhole(in.Profile), window, p.Name, headroom, peakGiB*headroom, p.MemGiB, need, p.Share),
					"relaunch on "+p.Name, conf, telemetry.FBUsed, telemetry.SMActive)
				op.Recommend = &Choice{Profile: p.Name, Count: count}
				if !allowed {
					op.Recommend = nil
					op.Action = fmt.Sprintf("template %s allows no %s: ask the platform team to add it to spec.gpu.migProfiles, then relaunch on it", in.Template, p.Name)
				}
				op.MonthlyUSD = monthly((curShare - p.Share) * float64(count))
				out = append(out, op)
				break
			}
		}
	}
	// Multi-GPU jobs that use fewer GPUs than they hold.
	if count > 1 && len(perDevice) > 1 {
		busy := 0
		for _, d := range perDevice {
			if d.q(0.95) > idleSM {
				busy++
			}
		}
		if busy < len(perDevice) && busy > 0 {
			fg := f(KindFewerGPUs, "warning", []Evidence{{"busy devices", "count", float64(busy)}, {"devices", "count", float64(len(perDevice))}},
				fmt.Sprintf("%d of its %d GPUs ran kernels %s; the others stayed idle (p95 activity ≤ %.2f)", busy, len(perDevice), window, idleSM),
				fmt.Sprintf("ask for %d GPUs, or make the code use all of them (DistributedDataParallel)", busy), conf, telemetry.SMActive)
			fg.Recommend = &Choice{Profile: in.Profile, Count: busy}
			fg.MonthlyUSD = monthly(curShare * float64(len(perDevice)-busy))
			out = append(out, fg)
		}
	}
	// Bottlenecks, on the profiling metrics (Hopper and newer).
	dram, tensor := by[telemetry.DRAMActive], by[telemetry.TensorActive]
	starved := act.shareBelow(0.05)
	switch {
	case starved >= 0.1 && starved <= 0.6 && act.q(0.9) >= smIneffective:
		out = append(out, f(KindInputStarved, "warning", []Evidence{{actName, "share below 0.05", starved}, {actName, "p90", act.q(0.9)}},
			fmt.Sprintf("%s drops to near zero %.0f %% of the time %s while its p90 is %.2f: the GPU waits for input between bursts, the pattern of a slow data loader", actName, 100*starved, window, act.q(0.9)),
			"more data loader workers, pinned memory and prefetching, or a local copy of the data", conf, telemetry.SMActive))
	case dram.n() > 0 && dram.q(0.5) >= 0.6 && p50 < smEffective:
		out = append(out, f(KindMemoryBound, "info", []Evidence{{telemetry.DRAMActive.String(), "p50", dram.q(0.5)}, {actName, "p50", p50}},
			fmt.Sprintf("DRAM activity p50 %.2f (the practical ceiling is about %.1f, NVIDIA's DCGM guidance) with %s p50 %.2f %s: memory bandwidth, not compute, bounds it", dram.q(0.5), dramCeiling, actName, p50, window),
			"mixed precision (bf16) to halve the bytes moved, a larger batch, fused kernels (torch.compile)", conf, telemetry.DRAMActive, telemetry.SMActive))
	}
	pcie := sum(by[telemetry.PCIeRX], by[telemetry.PCIeTX])
	nvl := sum(by[telemetry.NVLinkRX], by[telemetry.NVLinkTX])
	if pcie.n() > 0 && pcie.q(0.5) >= 0.6*pcieMax && p50 < smIneffective {
		out = append(out, f(KindInterconnect, "warning", []Evidence{{"pcie_rx+pcie_tx", "p50", pcie.q(0.5)}, {actName, "p50", p50}},
			fmt.Sprintf("PCIe moves %.1f GB/s (p50, %.0f %% of a Gen5 x16 link's %.0f GB/s) while %s p50 is %.2f %s: the GPU waits on host transfers", pcie.q(0.5)/1e9, 100*pcie.q(0.5)/pcieMax, pcieMax/1e9, actName, p50, window),
			"pinned host memory, larger and fewer transfers, keep data on the GPU between steps", conf, telemetry.PCIeRX, telemetry.PCIeTX, telemetry.SMActive))
	} else if nvl.n() > 0 && nvl.q(0.5) >= 0.6*nvlinkMax && p50 < smIneffective {
		out = append(out, f(KindInterconnect, "warning", []Evidence{{"nvlink_rx+nvlink_tx", "p50", nvl.q(0.5)}, {actName, "p50", p50}},
			fmt.Sprintf("NVLink moves %.0f GB/s (p50, %.0f %% of %.0f GB/s) while %s p50 is %.2f %s: communication bounds it", nvl.q(0.5)/1e9, 100*nvl.q(0.5)/nvlinkMax, nvlinkMax/1e9, actName, p50, window),
			"overlap communication with compute, larger buckets, gradient accumulation", conf, telemetry.NVLinkRX, telemetry.NVLinkTX, telemetry.SMActive))
	}
	if p50 >= smEffective {
		out = append(out, f(KindWellUsed, "info", []Evidence{{actName, "p50", p50}},
			fmt.Sprintf("%s p50 %.2f %s: at or above %.1f, NVIDIA's DCGM guidance for effective use", actName, p50, window, smEffective),
			"nothing to change", conf, telemetry.SMActive))
	}
	if tensor.n() > 0 && p50 >= 0.3 && tensor.q(0.95) < 0.02 {
		out = append(out, f(KindTensorUnused, "info", []Evidence{{telemetry.TensorActive.String(), "p95", tensor.q(0.95)}, {actName, "p50", p50}},
			fmt.Sprintf("tensor pipes p95 %.3f while %s p50 is %.2f %s: %s has tensor cores the workload does not use", tensor.q(0.95), actName, p50, window, in.Class.Name),
			"bf16/fp16 autocast or TF32 matmuls (torch.backends.cuda.matmul.allow_tf32)", conf, telemetry.TensorActive, telemetry.SMActive))
	}
	pt, tt := by[telemetry.PowerThrottled], by[telemetry.ThermalThrottled]
	if (pt.n() > 0 && pt.mean() > 0.2) || (tt.n() > 0 && tt.mean() > 0.05) {
		th := f(KindThrottled, "warning", []Evidence{{telemetry.PowerThrottled.String(), "mean", meanOr0(pt)}, {telemetry.ThermalThrottled.String(), "mean", meanOr0(tt)}},
			fmt.Sprintf("the clocks were held down %.0f %% of the time by power caps and %.0f %% by heat %s (NVML's clock event reasons)", 100*meanOr0(pt), 100*meanOr0(tt), window),
			"the platform team checks the node's power limits and cooling", 0.8, telemetry.PowerThrottled, telemetry.ThermalThrottled, telemetry.SMClock)
		th.Platform = true
		out = append(out, th)
	}
	return out
}

func scale(xs []float64, k float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * k
	}
	return out
}

// sum adds two series point by point (where both have points).
func sum(a, b stats) stats {
	n := min(a.n(), b.n())
	out := stats{vals: make([]float64, n), maxs: make([]float64, n)}
	for i := 0; i < n; i++ {
		out.vals[i], out.maxs[i] = a.vals[i]+b.vals[i], a.maxs[i]+b.maxs[i]
	}
	return out
}

func meanOr0(s stats) float64 {
	if s.n() == 0 {
		return 0
	}
	return s.mean()
}

func orWhole(p string) string {
	if p == "" {
		return "whole GPU"
	}
	return p
}

func roundDur(d time.Duration) string {
	d = d.Round(time.Minute)
	h, m := int(d.Hours()), int(d.Minutes())%60
	switch {
	case h == 0:
		return fmt.Sprintf("%d min", m)
	case m == 0:
		return fmt.Sprintf("%d h", h)
	}
	return fmt.Sprintf("%d h %d min", h, m)
}

// Kinds lists every finding kind, for documentation and the API.
func Kinds() []string {
	return []string{KindIdle, KindOverProvisioned, KindFewerGPUs, KindNearOOM, KindMemoryBound, KindInputStarved, KindInterconnect,
		KindWellUsed, KindTensorUnused, KindThrottled, KindUnhealthy, KindTooLittleSamples}
}
