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
	// ProgressAt is when its run's progress reports last went forward
	// (package runs; zero: never): a run that progressed in the window is
	// not idle, whatever its GPU did — it waited on data.
	ProgressAt time.Time
	// Stalled is its run's early-stopping verdict with the advise action
	// (nil: none, or its people keep it going).
	Stalled *Stalled
	// UsedAt is when a person last used it through its UI — a page
	// opened, a change, a message on its sockets, a kernel executing
	// (package workload, as the idle culler reads it; zero: never): a
	// notebook used in the window is not idle, whatever its GPU did.
	UsedAt time.Time
}

// used says whether a person used it within the window.
func (in Input) used() bool { return !in.UsedAt.IsZero() && in.UsedAt.After(in.From) }

// progressed says whether the run made progress within the window.
func (in Input) progressed() bool { return !in.ProgressAt.IsZero() && in.ProgressAt.After(in.From) }

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
	KindStalledRun       = "stalled-run"
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

// facts are what the rules judge a workload on, measured once from its
// Input.
type facts struct {
	in Input
	by map[telemetry.Metric]stats
	// perDevice is activity per device: SM activity where measured, else
	// utilization as a ratio.
	perDevice map[string]stats
	// act is activity: SM activity where the GPU measures it (Hopper), else
	// the coarse utilization as a ratio; actName says which.
	act      stats
	actName  string
	observed time.Duration // from the first point to the last, plus a step
	window   string        // "over 3 h 10 min"
	conf     float64       // a day shows the daily rhythm: observed/24 h, at most 1
	price    float64       // $/GPU-hour it pays
	profiles []Profile
	curShare float64 // the share of a GPU each of its slices is
	curMem   float64 // GiB each of its slices holds
	count    int
	p50, p95 float64 // activity
}

// measure reads an Input into facts.
func measure(in Input) *facts {
	x := &facts{in: in, by: map[telemetry.Metric]stats{}}
	smByDevice, utilByDevice := map[string]stats{}, map[string]stats{}
	for _, s := range in.Series {
		st := x.by[s.Metric]
		for _, p := range s.Points {
			st.vals = append(st.vals, p.Avg)
			st.maxs = append(st.maxs, p.Max)
		}
		x.by[s.Metric] = st
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
	x.perDevice = smByDevice
	if len(x.perDevice) == 0 {
		x.perDevice = utilByDevice
	}
	x.act, x.actName = x.by[telemetry.SMActive], telemetry.SMActive.String()
	if x.act.n() == 0 {
		u := x.by[telemetry.GPUUtil]
		x.act = stats{vals: scale(u.vals, 0.01), maxs: scale(u.maxs, 0.01)}
		x.actName = telemetry.GPUUtil.String() + "/100"
	}
	// Samples may come less often than the step: observed runs from the
	// first point to the last.
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
	if !first.IsZero() {
		x.observed = last.Sub(first) + in.Step
	}
	x.window = fmt.Sprintf("over %s", roundDur(x.observed))
	x.conf = math.Min(1, x.observed.Hours()/24)
	x.price = in.Class.Price.OnDemand
	if in.Spot && in.Class.Price.Spot > 0 {
		x.price = in.Class.Price.Spot
	}
	x.profiles = Profiles(in.Class)
	x.curShare, x.curMem = 1.0, float64(in.Class.MemoryGiB)
	for _, p := range x.profiles {
		if p.Name == in.Profile {
			x.curShare, x.curMem = p.Share, p.MemGiB
		}
	}
	x.count = max(1, in.Count)
	if x.act.n() > 0 {
		x.p50, x.p95 = x.act.q(0.5), x.act.q(0.95)
	}
	return x
}

// finding is a Finding over the input's window.
func (x *facts) finding(kind, sev string, ev []Evidence, reason, action string, conf float64, series ...telemetry.Metric) Finding {
	names := make([]string, len(series))
	for i, m := range series {
		names[i] = m.String()
	}
	return Finding{Kind: kind, Severity: sev, Evidence: ev, Reason: reason, Action: action, Confidence: math.Round(conf*100) / 100,
		Series: names, From: x.in.From, To: x.in.To}
}

// monthly is what a share of a GPU costs a month at the price it pays.
func (x *facts) monthly(shareSaved float64) float64 {
	return math.Round(shareSaved*x.price*hoursPerMonth*100) / 100
}

// A rule judges one thing. It returns its findings, and whether the rules
// after it have nothing to judge (too few samples, an idle GPU).
type rule struct {
	name  string
	judge func(x *facts) (found []Finding, last bool)
}

// rules run in this order; each is a function with its table test
// (rules_test.go).
var rules = []rule{
	{"unhealthy", unhealthyRule},
	{"stalled-run", stalledRule},
	{"enough-data", enoughDataRule},
	{"idle", idleRule},
	{"memory", memoryRule},
	{"fewer-gpus", fewerGPUsRule},
	{"bottleneck", bottleneckRule},
	{"interconnect", interconnectRule},
	{"well-used", wellUsedRule},
	{"tensor-unused", tensorUnusedRule},
	{"throttled", throttledRule},
}

// Advise judges a workload. Every finding says what it measured, the
// threshold it used and where that comes from.
func Advise(in Input) []Finding {
	x := measure(in)
	var out []Finding
	for _, r := range rules {
		found, last := r.judge(x)
		out = append(out, found...)
		if last {
			break
		}
	}
	return out
}

// unhealthyRule: a GPU it runs on is unhealthy (node health), the platform's
// to fix.
func unhealthyRule(x *facts) ([]Finding, bool) {
	var out []Finding
	for _, why := range x.in.Unhealthy {
		u := x.finding(KindUnhealthy, "critical", nil, "a GPU this workload runs on is unhealthy: "+why+" (XID critical errors, double-bit ECC errors and failed row remapping are the GPU's, not the workload's)",
			"the platform team drains the node and resets or replaces the GPU; restart the workload to move it", 1)
		u.Platform = true
		out = append(out, u)
	}
	return out, false
}

// stalledRule: its run's early-stopping rule (action advise) found it
// stalled — it says so whatever the GPU samples.
func stalledRule(x *facts) ([]Finding, bool) {
	f, ok := stalledFinding(x.in.Workload, x.in.Stalled, x.in.To)
	if !ok {
		return nil, false
	}
	return []Finding{f}, false
}

// stalledFinding is the finding of a stalled run's verdict, if any.
func stalledFinding(workload string, s *Stalled, to time.Time) (Finding, bool) {
	if s == nil {
		return Finding{}, false
	}
	return Finding{Kind: KindStalledRun, Severity: "warning", From: s.At, To: to,
		Evidence:   []Evidence{{Metric: "run." + s.Rule, Stat: "fired at (Unix s)", Value: float64(s.At.Unix())}},
		Reason:     "stalled run (" + s.Rule + "): " + s.Reason,
		Action:     "stop it (its checkpoints are kept), or keep it going: POST /api/v1/workloads/" + workload + "/progress/keep silences its rules",
		Confidence: 0.8, Series: []string{}}, true
}

// enoughDataRule: without minAny of activity samples there is nothing to
// judge.
func enoughDataRule(x *facts) ([]Finding, bool) {
	if x.act.n() > 0 && x.observed >= minAny {
		return nil, false
	}
	return []Finding{x.finding(KindTooLittleSamples, "info", nil, fmt.Sprintf("%s of GPU samples; advice needs at least %s", roundDur(x.observed), roundDur(minAny)), "wait for more samples", 0)}, true
}

// idleRule: nothing ran for the window (activity p95 at the idle
// threshold) and the run reported no progress in it; nothing else to judge
// on an idle GPU.
func idleRule(x *facts) ([]Finding, bool) {
	if x.p95 > idleSM || x.in.progressed() || x.in.used() {
		return nil, false
	}
	f := x.finding(KindIdle, "warning", []Evidence{{x.actName, "p95", x.p95}},
		fmt.Sprintf("%s p95 %.3f %s: the GPU is held with no kernel running (≤ %.2f, the idle threshold)", x.actName, x.p95, x.window, idleSM),
		"stop the workload, or set an idle timeout in its template's lifecycle", math.Max(x.conf, 0.5), telemetry.SMActive, telemetry.GPUUtil)
	f.MonthlyUSD = x.monthly(x.curShare * float64(x.count))
	return []Finding{f}, true
}

// memoryRule: memory near its end (move up a profile), or, watched long
// enough, a smaller profile that holds the peak with headroom and the
// activity (over-provisioned).
func memoryRule(x *facts) ([]Finding, bool) {
	fb, fbTotal := x.by[telemetry.FBUsed], x.by[telemetry.FBTotal]
	if fb.n() == 0 || fbTotal.n() == 0 {
		return nil, false
	}
	total := fbTotal.max()
	count := x.count
	if fb.max() > nearOOM*total {
		// The next profile the template allows with more memory; if none,
		// whole GPUs.
		next := ""
		for _, p := range x.profiles {
			if p.MemGiB > x.curMem*1.01 && p.Share < 1 && slices.Contains(x.in.Allowed, p.Name) {
				next = p.Name
				break
			}
		}
		nf := x.finding(KindNearOOM, "critical", []Evidence{{telemetry.FBUsed.String(), "max", fb.max()}, {telemetry.FBTotal.String(), "max", total}},
			fmt.Sprintf("memory peaked at %.1f of %.1f GiB (%.0f %%) %s: above %.0f %% an allocation can fail at any moment", fb.max()/1024, total/1024, 100*fb.max()/total, x.window, 100*nearOOM),
			"move to a profile with more memory before it fails", 0.9, telemetry.FBUsed, telemetry.FBTotal)
		switch {
		case next != "":
			nf.Action = "move to " + next + " before it fails"
			nf.Recommend = &Choice{Profile: next, Count: count}
			for _, p := range x.profiles {
				if p.Name == next {
					nf.MonthlyUSD = -x.monthly((p.Share - x.curShare) * float64(count))
				}
			}
		case x.in.Profile != "":
			nf.Action = "move to whole GPUs before it fails"
			nf.Recommend = &Choice{Count: count}
			nf.MonthlyUSD = -x.monthly((1 - x.curShare) * float64(count))
		}
		return []Finding{nf}, false
	}
	if x.observed < minRightsize {
		return nil, false
	}
	// Over-provisioned: the smallest profile whose memory holds the peak
	// with headroom and whose compute holds the activity.
	peakGiB := fb.max() / 1024
	need := x.p95 * x.curShare
	for _, p := range x.profiles {
		if p.Share >= x.curShare || peakGiB*headroom > p.MemGiB*0.98 || need > p.Share {
			continue
		}
		op := x.finding(KindOverProvisioned, "warning", []Evidence{{telemetry.FBUsed.String(), "max", fb.max()}, {x.actName, "p95", x.p95}},
			fmt.Sprintf("memory peaked at %.1f GiB and %s p95 is %.2f of the %s %s: %s holds the peak × %.1f (%.1f GiB of %.0f) and the activity (%.2f of the GPU ≤ %.2f)",
				peakGiB, x.actName, x.p95, orWhole(x.in.Profile), x.window, p.Name, headroom, peakGiB*headroom, p.MemGiB, need, p.Share),
			"relaunch on "+p.Name, x.conf, telemetry.FBUsed, telemetry.SMActive)
		op.Recommend = &Choice{Profile: p.Name, Count: count}
		if !slices.Contains(x.in.Allowed, p.Name) {
			op.Recommend = nil
			op.Action = fmt.Sprintf("template %s allows no %s: ask the platform team to add it to spec.gpu.migProfiles, then relaunch on it", x.in.Template, p.Name)
		}
		op.MonthlyUSD = x.monthly((x.curShare - p.Share) * float64(count))
		return []Finding{op}, false
	}
	return nil, false
}

// fewerGPUsRule: a multi-GPU job some of whose GPUs stayed idle.
func fewerGPUsRule(x *facts) ([]Finding, bool) {
	if x.count <= 1 || len(x.perDevice) <= 1 {
		return nil, false
	}
	busy := 0
	for _, d := range x.perDevice {
		if d.q(0.95) > idleSM {
			busy++
		}
	}
	if busy == len(x.perDevice) || busy == 0 {
		return nil, false
	}
	fg := x.finding(KindFewerGPUs, "warning", []Evidence{{"busy devices", "count", float64(busy)}, {"devices", "count", float64(len(x.perDevice))}},
		fmt.Sprintf("%d of its %d GPUs ran kernels %s; the others stayed idle (p95 activity ≤ %.2f)", busy, len(x.perDevice), x.window, idleSM),
		fmt.Sprintf("ask for %d GPUs, or make the code use all of them (DistributedDataParallel)", busy), x.conf, telemetry.SMActive)
	fg.Recommend = &Choice{Profile: x.in.Profile, Count: busy}
	fg.MonthlyUSD = x.monthly(x.curShare * float64(len(x.perDevice)-busy))
	return []Finding{fg}, false
}

// bottleneckRule: input-starved (activity drops to zero between bursts) or
// else memory-bandwidth bound, on the profiling metrics (Hopper and newer).
func bottleneckRule(x *facts) ([]Finding, bool) {
	dram := x.by[telemetry.DRAMActive]
	starved := x.act.shareBelow(0.05)
	switch {
	case starved >= 0.1 && starved <= 0.6 && x.act.q(0.9) >= smIneffective:
		return []Finding{x.finding(KindInputStarved, "warning", []Evidence{{x.actName, "share below 0.05", starved}, {x.actName, "p90", x.act.q(0.9)}},
			fmt.Sprintf("%s drops to near zero %.0f %% of the time %s while its p90 is %.2f: the GPU waits for input between bursts, the pattern of a slow data loader", x.actName, 100*starved, x.window, x.act.q(0.9)),
			"more data loader workers, pinned memory and prefetching, or a local copy of the data", x.conf, telemetry.SMActive)}, false
	case dram.n() > 0 && dram.q(0.5) >= 0.6 && x.p50 < smEffective:
		return []Finding{x.finding(KindMemoryBound, "info", []Evidence{{telemetry.DRAMActive.String(), "p50", dram.q(0.5)}, {x.actName, "p50", x.p50}},
			fmt.Sprintf("DRAM activity p50 %.2f (the practical ceiling is about %.1f, NVIDIA's DCGM guidance) with %s p50 %.2f %s: memory bandwidth, not compute, bounds it", dram.q(0.5), dramCeiling, x.actName, x.p50, x.window),
			"mixed precision (bf16) to halve the bytes moved, a larger batch, fused kernels (torch.compile)", x.conf, telemetry.DRAMActive, telemetry.SMActive)}, false
	}
	return nil, false
}

// interconnectRule: PCIe, or else NVLink, busy while the GPU waits.
func interconnectRule(x *facts) ([]Finding, bool) {
	pcie := sum(x.by[telemetry.PCIeRX], x.by[telemetry.PCIeTX])
	nvl := sum(x.by[telemetry.NVLinkRX], x.by[telemetry.NVLinkTX])
	switch {
	case pcie.n() > 0 && pcie.q(0.5) >= 0.6*pcieMax && x.p50 < smIneffective:
		return []Finding{x.finding(KindInterconnect, "warning", []Evidence{{"pcie_rx+pcie_tx", "p50", pcie.q(0.5)}, {x.actName, "p50", x.p50}},
			fmt.Sprintf("PCIe moves %.1f GB/s (p50, %.0f %% of a Gen5 x16 link's %.0f GB/s) while %s p50 is %.2f %s: the GPU waits on host transfers", pcie.q(0.5)/1e9, 100*pcie.q(0.5)/pcieMax, pcieMax/1e9, x.actName, x.p50, x.window),
			"pinned host memory, larger and fewer transfers, keep data on the GPU between steps", x.conf, telemetry.PCIeRX, telemetry.PCIeTX, telemetry.SMActive)}, false
	case nvl.n() > 0 && nvl.q(0.5) >= 0.6*nvlinkMax && x.p50 < smIneffective:
		return []Finding{x.finding(KindInterconnect, "warning", []Evidence{{"nvlink_rx+nvlink_tx", "p50", nvl.q(0.5)}, {x.actName, "p50", x.p50}},
			fmt.Sprintf("NVLink moves %.0f GB/s (p50, %.0f %% of %.0f GB/s) while %s p50 is %.2f %s: communication bounds it", nvl.q(0.5)/1e9, 100*nvl.q(0.5)/nvlinkMax, nvlinkMax/1e9, x.actName, x.p50, x.window),
			"overlap communication with compute, larger buckets, gradient accumulation", x.conf, telemetry.NVLinkRX, telemetry.NVLinkTX, telemetry.SMActive)}, false
	}
	return nil, false
}

// wellUsedRule: activity p50 at NVIDIA's mark for effective use.
func wellUsedRule(x *facts) ([]Finding, bool) {
	if x.p50 < smEffective {
		return nil, false
	}
	return []Finding{x.finding(KindWellUsed, "info", []Evidence{{x.actName, "p50", x.p50}},
		fmt.Sprintf("%s p50 %.2f %s: at or above %.1f, NVIDIA's DCGM guidance for effective use", x.actName, x.p50, x.window, smEffective),
		"nothing to change", x.conf, telemetry.SMActive)}, false
}

// tensorUnusedRule: busy, but not on the tensor cores.
func tensorUnusedRule(x *facts) ([]Finding, bool) {
	tensor := x.by[telemetry.TensorActive]
	if tensor.n() == 0 || x.p50 < 0.3 || tensor.q(0.95) >= 0.02 {
		return nil, false
	}
	return []Finding{x.finding(KindTensorUnused, "info", []Evidence{{telemetry.TensorActive.String(), "p95", tensor.q(0.95)}, {x.actName, "p50", x.p50}},
		fmt.Sprintf("tensor pipes p95 %.3f while %s p50 is %.2f %s: %s has tensor cores the workload does not use", tensor.q(0.95), x.actName, x.p50, x.window, x.in.Class.Name),
		"bf16/fp16 autocast or TF32 matmuls (torch.backends.cuda.matmul.allow_tf32)", x.conf, telemetry.TensorActive, telemetry.SMActive)}, false
}

// throttledRule: clocks held down by power caps or heat, the platform's to
// fix.
func throttledRule(x *facts) ([]Finding, bool) {
	pt, tt := x.by[telemetry.PowerThrottled], x.by[telemetry.ThermalThrottled]
	if !(pt.n() > 0 && pt.mean() > 0.2) && !(tt.n() > 0 && tt.mean() > 0.05) {
		return nil, false
	}
	th := x.finding(KindThrottled, "warning", []Evidence{{telemetry.PowerThrottled.String(), "mean", meanOr0(pt)}, {telemetry.ThermalThrottled.String(), "mean", meanOr0(tt)}},
		fmt.Sprintf("the clocks were held down %.0f %% of the time by power caps and %.0f %% by heat %s (NVML's clock event reasons)", 100*meanOr0(pt), 100*meanOr0(tt), x.window),
		"the platform team checks the node's power limits and cooling", 0.8, telemetry.PowerThrottled, telemetry.ThermalThrottled, telemetry.SMClock)
	th.Platform = true
	return []Finding{th}, false
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
