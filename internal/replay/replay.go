// Package replay plays recorded or synthetic GPU series into gantry-agent's
// pipeline in place of NVML: a simulated node's GPUs and MIG instances, each
// running a profile — a pod of Alibaba's GenAI trace (embedded, see
// genai/SOURCE.md) or one of the patterns advice must tell apart
// (compute-bound, memory-bound, input-starved, PCIe-bound, idle, near-OOM).
// It is how tests and gantry dev see live GPU series without a GPU.
package replay

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// GPU is a simulated physical GPU and its MIG instances (none: whole).
type GPU struct {
	UUID      string
	Index     int
	Model     string // as NVML names it, e.g. "NVIDIA H100 80GB HBM3"
	MemoryMiB float64
	MIG       []MIG
}

// MIG is a simulated MIG instance.
type MIG struct {
	UUID         string
	Profile      string // 1g.10gb
	InstanceID   int
	MemoryMiB    float64
	ComputeShare float64 // its slices of 7
}

// Device is what a profile plays on: one GPU or one MIG instance.
type Device struct {
	telemetry.Device
	MemoryMiB    float64
	ComputeShare float64 // 1 for a whole GPU
	// GPM is whether the GPU reports profiling metrics (Hopper and newer);
	// without, they are absent as on a real A100 or L4.
	GPM bool
}

// LinkBytes is the PCIe bandwidth a profile measures against: Gen5 x16, per
// direction (about 64 GB/s).
const LinkBytes = 64e9

// GPM reports whether a GPU model has NVML's GPM profiling metrics.
func GPM(model string) bool {
	for _, m := range []string{"H100", "H200", "H800", "H20", "GH200", "B100", "B200", "GB200"} {
		if strings.Contains(model, m) {
			return true
		}
	}
	return false
}

// Node is a simulated node's GPUs, each device running a profile or idle.
// It implements agent.GPUs.
type Node struct {
	mu     sync.Mutex
	gpus   []GPU
	slots  map[string]*slot // device id → what it runs
	order  []string
	events []telemetry.Event
	health map[string]telemetry.GPUState // injected counters, by GPU UUID
}

type slot struct {
	dev     Device
	profile *Profile // nil: idle
	start   time.Time
	seed    uint64
	energy  energyMemo
}

// energyMemo is the energy a slot's profile used in its first steps
// (energyStep long), so that the next reading adds only the steps since.
type energyMemo struct {
	steps int64
	mJ    float64
}

// energyStep is the step energy is integrated over: power is taken at the
// start of each step.
const energyStep = 10 * time.Second

// NewNode simulates the given GPUs, every device idle.
func NewNode(gpus []GPU) *Node {
	n := &Node{gpus: gpus, slots: map[string]*slot{}, health: map[string]telemetry.GPUState{}}
	for _, g := range gpus {
		base := telemetry.Device{GPU: g.UUID, Index: g.Index, Model: g.Model}
		if len(g.MIG) == 0 {
			n.add(Device{Device: base, MemoryMiB: g.MemoryMiB, ComputeShare: 1, GPM: GPM(g.Model)})
			continue
		}
		for _, m := range g.MIG {
			d := base
			d.MIG = &telemetry.MIGInstance{UUID: m.UUID, Profile: m.Profile, InstanceID: m.InstanceID}
			n.add(Device{Device: d, MemoryMiB: m.MemoryMiB, ComputeShare: m.ComputeShare, GPM: GPM(g.Model)})
		}
	}
	return n
}

func (n *Node) add(d Device) {
	n.slots[d.ID()] = &slot{dev: d}
	n.order = append(n.order, d.ID())
}

// Devices lists the node's devices (GPUs without MIG, MIG instances).
func (n *Node) Devices() []Device {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Device, len(n.order))
	for i, id := range n.order {
		out[i] = n.slots[id].dev
	}
	return out
}

// Play runs profile p on a device from start; seed varies its noise.
func (n *Node) Play(device string, p Profile, start time.Time, seed uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.slots[device]
	if !ok {
		return fmt.Errorf("no device %s on this node", device)
	}
	s.profile, s.start, s.seed, s.energy = &p, start, seed, energyMemo{}
	return nil
}

// Stop leaves a device idle (nothing holds it).
func (n *Node) Stop(device string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.slots[device]; ok {
		s.profile = nil
	}
}

// Fault is a health problem a test injects into a simulated GPU — or a
// benign one a healthy GPU also shows: corrected (single-bit) ECC errors,
// rows remapped after correctable errors, an XID an application caused.
type Fault struct {
	GPU              string // UUID
	XID              uint64 // an XID event (0: none)
	DoubleBitECC     uint64 // volatile double-bit ECC errors
	SingleBitECC     uint64 // volatile single-bit (corrected) ECC errors
	RemapCorrectable uint64 // rows remapped for correctable errors
	RemapFailure     bool
	At               time.Time
}

// Inject makes a GPU report a fault from now on (an XID once).
func (n *Node) Inject(f Fault) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f.XID != 0 {
		n.events = append(n.events, telemetry.Event{Time: f.At, GPU: f.GPU, XID: f.XID, Detail: "injected by a test"})
	}
	h := n.health[f.GPU]
	h.ECC.VolatileDBE += f.DoubleBitECC
	h.ECC.AggregateDBE += f.DoubleBitECC
	h.ECC.VolatileSBE += f.SingleBitECC
	h.ECC.AggregateSBE += f.SingleBitECC
	h.Remap.Correctable += f.RemapCorrectable
	h.Remap.Failure = h.Remap.Failure || f.RemapFailure
	n.health[f.GPU] = h
}

// Inventory implements agent.GPUs.
func (n *Node) Inventory(context.Context) ([]telemetry.GPUState, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]telemetry.GPUState, 0, len(n.gpus))
	for _, g := range n.gpus {
		h := n.health[g.UUID]
		st := telemetry.GPUState{Device: telemetry.Device{GPU: g.UUID, Index: g.Index, Model: g.Model}, MemoryMiB: uint64(g.MemoryMiB),
			MIGEnabled: len(g.MIG) > 0, ECC: h.ECC, Remap: h.Remap}
		for _, m := range g.MIG {
			st.MIG = append(st.MIG, telemetry.MIGInstance{UUID: m.UUID, Profile: m.Profile, InstanceID: m.InstanceID})
		}
		if !GPM(g.Model) {
			st.Unsupported = []string{"GPM profiling metrics (SM activity, occupancy, tensor, DRAM, NVLink): not supported before Hopper"}
		}
		out = append(out, st)
	}
	return out, nil
}

// Sample implements agent.GPUs: each device's profile at now (idle devices
// read zero activity and no memory held).
func (n *Node) Sample(_ context.Context, now time.Time) ([]agent.DeviceSample, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]agent.DeviceSample, 0, len(n.order))
	for _, id := range n.order {
		s := n.slots[id]
		p, elapsed := &unheld, time.Duration(0)
		if s.profile != nil {
			p, elapsed = s.profile, now.Sub(s.start)
		}
		v := p.values(s.dev, elapsed, s.seed)
		if v.Has(telemetry.Energy) {
			v[telemetry.Energy] = math.Round(p.energy(s.dev, elapsed, s.seed, &s.energy))
		}
		out = append(out, agent.DeviceSample{Device: s.dev.Device, Values: v})
	}
	return out, nil
}

// Events implements agent.GPUs.
func (n *Node) Events() []telemetry.Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.events
	n.events = nil
	return e
}

// Shape is what a profile says a device does at one moment, as fractions:
// activity ratios, memory as a share of the device's, PCIe and NVLink as a
// share of the link. Util is DCGM's coarse "a kernel was running" (0..1).
type Shape struct {
	Util, SM, Occupancy, Tensor, DRAM float64
	Mem                               float64
	PCIeRX, PCIeTX, NVLink            float64
	Power                             float64 // share of the power limit
	// PowerCapped and Hot say the clocks are slowed by a power cap or by
	// heat (the SM clock drops with them).
	PowerCapped, Hot bool
}

// Profile is a named pattern of GPU use over time.
type Profile struct {
	Name        string
	Description string
	shape       func(elapsed time.Duration) Shape
	// memMiB, when set, gives memory in MiB directly (the trace), capped
	// at the device's memory.
	memMiB func(elapsed time.Duration) float64
	// recorded: utilization is a recorded value, played as it is (no
	// noise added).
	recorded bool
}

// noise is a deterministic value in [-1, 1] for (seed, second, what).
func noise(seed uint64, sec int64, what int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d", seed, sec, what)
	return float64(h.Sum64()%2001)/1000 - 1
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// values turns the profile's shape into telemetry values for a device.
func (p Profile) values(d Device, elapsed time.Duration, seed uint64) telemetry.Values {
	s := p.shape(elapsed)
	sec := int64(elapsed / time.Second)
	jit := func(v float64, what int) float64 { return clamp(v+0.02*noise(seed, sec, what)*math.Min(1, v*10), 0, 1) }
	v := telemetry.NoValues()
	v[telemetry.GPUUtil] = math.Round(100 * jit(s.Util, 0))
	if p.recorded {
		v[telemetry.GPUUtil] = math.Round(100 * s.Util)
	}
	v[telemetry.MemCopyUtil] = math.Round(100 * jit(s.DRAM*0.9, 1))
	mem := s.Mem * d.MemoryMiB
	if p.memMiB != nil {
		mem = p.memMiB(elapsed)
	}
	v[telemetry.FBUsed] = math.Round(clamp(mem, 0, d.MemoryMiB))
	v[telemetry.FBTotal] = d.MemoryMiB
	v[telemetry.PCIeRX] = math.Round(jit(s.PCIeRX, 2) * LinkBytes * d.ComputeShare)
	v[telemetry.PCIeTX] = math.Round(jit(s.PCIeTX, 3) * LinkBytes * d.ComputeShare)
	v[telemetry.Power] = power(d, s, seed, sec)
	v[telemetry.Temperature] = math.Round(30 + 45*s.Power)
	v[telemetry.SMClock] = 1980
	v[telemetry.PowerThrottled], v[telemetry.ThermalThrottled] = 0, 0
	if s.PowerCapped {
		v[telemetry.PowerThrottled], v[telemetry.SMClock] = 1, 1410
	}
	if s.Hot {
		v[telemetry.ThermalThrottled], v[telemetry.SMClock], v[telemetry.Temperature] = 1, 1200, 88
	}
	// Energy since the profile started: Sample integrates the power (this
	// is only its mark, never NaN for a whole GPU).
	v[telemetry.Energy] = 0
	if d.MIG != nil {
		v[telemetry.Power], v[telemetry.Energy] = math.NaN(), math.NaN() // a GPU's power is not its instances'
	}
	if d.GPM {
		v[telemetry.SMActive] = jit(s.SM, 5)
		v[telemetry.SMOccupancy] = jit(s.Occupancy, 6)
		v[telemetry.TensorActive] = jit(s.Tensor, 7)
		v[telemetry.DRAMActive] = jit(s.DRAM, 8)
		if d.MIG == nil {
			v[telemetry.NVLinkTX] = math.Round(jit(s.NVLink, 9) * 450e9)
			v[telemetry.NVLinkRX] = math.Round(jit(s.NVLink, 10) * 450e9)
		}
	}
	return v
}

// power is a device's power draw in W (700 W for a whole GPU at full
// power, noise included).
func power(d Device, s Shape, seed uint64, sec int64) float64 {
	p := clamp(s.Power+0.02*noise(seed, sec, 4)*math.Min(1, s.Power*10), 0, 1)
	return math.Round(700 * d.ComputeShare * (0.1 + 0.9*p))
}

// energy is what the profile used from its start to elapsed, in mJ: its
// power at the start of each energyStep times the step (the last one in
// part), the same whenever and however often it is read, and never less
// for a later elapsed. memo keeps the sum of whole steps.
func (p Profile) energy(d Device, elapsed time.Duration, seed uint64, memo *energyMemo) float64 {
	if elapsed <= 0 {
		return 0
	}
	at := func(k int64) float64 {
		e := time.Duration(k) * energyStep
		return power(d, p.shape(e), seed, int64(e/time.Second))
	}
	k := int64(elapsed / energyStep)
	if k < memo.steps {
		*memo = energyMemo{}
	}
	for ; memo.steps < k; memo.steps++ {
		memo.mJ += at(memo.steps) * energyStep.Seconds() * 1000
	}
	return memo.mJ + at(k)*(elapsed-time.Duration(k)*energyStep).Seconds()*1000
}

// unheld is a device nothing holds.
var unheld = Profile{Name: "unheld", shape: func(time.Duration) Shape { return Shape{} }}

func steady(s Shape) func(time.Duration) Shape { return func(time.Duration) Shape { return s } }

// Synthetic profiles: the patterns advice must tell apart, with the values
// that characterise each (DCGM's reading: SM activity ≥ 0.8 is effective
// use, < 0.5 likely not; DRAM activity tops out near 0.8).
var synthetic = []Profile{
	{Name: "compute-bound", Description: "SM activity 0.92, tensor 0.75, DRAM 0.45: a large bf16 matmul, well used",
		shape: steady(Shape{Util: 1, SM: 0.92, Occupancy: 0.6, Tensor: 0.75, DRAM: 0.45, Mem: 0.7, PCIeRX: 0.01, PCIeTX: 0.01, Power: 0.95})},
	{Name: "memory-bound", Description: "DRAM activity 0.82 at its practical ceiling, SM activity 0.55, tensor 0.05: a device-to-device copy loop",
		shape: steady(Shape{Util: 1, SM: 0.55, Occupancy: 0.3, Tensor: 0.05, DRAM: 0.82, Mem: 0.6, PCIeRX: 0.01, PCIeTX: 0.01, Power: 0.75})},
	{Name: "input-starved", Description: "SM activity 0.85 for 90 s, then 30 s near 0 every 2 min: a slow data loader",
		shape: func(e time.Duration) Shape {
			if e%(2*time.Minute) >= 90*time.Second {
				return Shape{Util: 0.03, SM: 0.01, Occupancy: 0.01, Tensor: 0, DRAM: 0.01, Mem: 0.5, PCIeRX: 0.05, Power: 0.15}
			}
			return Shape{Util: 1, SM: 0.85, Occupancy: 0.5, Tensor: 0.5, DRAM: 0.4, Mem: 0.5, PCIeRX: 0.1, PCIeTX: 0.01, Power: 0.85}
		}},
	{Name: "pcie-bound", Description: "PCIe receive at 0.8 of the link while SM activity is 0.15: host-to-device copies of pageable memory",
		shape: steady(Shape{Util: 0.6, SM: 0.15, Occupancy: 0.05, Tensor: 0, DRAM: 0.1, Mem: 0.3, PCIeRX: 0.8, PCIeTX: 0.02, Power: 0.3})},
	{Name: "idle", Description: "memory held (30%), no activity: a notebook left open",
		shape: steady(Shape{Mem: 0.3, Power: 0.05})},
	{Name: "power-throttled", Description: "SM activity 0.85 with the clocks held down by a power cap (SM clock 1410 MHz instead of 1980)",
		shape: steady(Shape{Util: 1, SM: 0.85, Occupancy: 0.5, Tensor: 0.6, DRAM: 0.5, Mem: 0.6, PCIeRX: 0.01, PCIeTX: 0.01, Power: 1, PowerCapped: true})},
	{Name: "near-oom", Description: "memory at 97% of the device, SM activity 0.6",
		shape: steady(Shape{Util: 1, SM: 0.6, Occupancy: 0.4, Tensor: 0.3, DRAM: 0.5, Mem: 0.97, PCIeRX: 0.02, PCIeTX: 0.02, Power: 0.7})},
}

// TraceSMFactor is how SM activity is derived from a trace pod's duty
// cycle, which says only that a kernel ran, not how many SMs it kept busy:
// SM activity = duty/100 × the factor, a value in [0.6, 0.85] fixed per
// pod by a hash of its id (an assumption about an inference server's
// kernels, not a measurement; documented in genai/SOURCE.md). Tensor and
// DRAM activity follow SM activity.
func TraceSMFactor(pod string) float64 {
	h := fnv.New32a()
	h.Write([]byte(pod))
	return 0.6 + 0.25*float64(h.Sum32()%1001)/1000
}

// TraceProfile plays one pod of the embedded GenAI trace: its duty cycle
// as GPU utilization (exactly, no noise), its memory as memory used
// (capped at the device's), each minute's sample held until the next, from
// the pod's first sample; the series repeats past its end.
func TraceProfile(tr *Trace, pod string) Profile {
	k := TraceSMFactor(pod)
	return Profile{Name: "trace:" + pod, Description: "pod " + pod + " of Alibaba's GenAI trace", recorded: true,
		shape: func(e time.Duration) Shape {
			duty, _ := tr.At(pod, int64(e/time.Second))
			if math.IsNaN(duty) {
				duty = 0
			}
			f := duty / 100
			sm := f * k
			return Shape{Util: f, SM: sm, Occupancy: sm * 0.55, Tensor: sm * 0.65, DRAM: sm * 0.5, PCIeRX: f * 0.02, PCIeTX: f * 0.01, Power: 0.1 + 0.8*f}
		},
		memMiB: func(e time.Duration) float64 {
			_, mem := tr.At(pod, int64(e/time.Second))
			if math.IsNaN(mem) {
				return 0
			}
			return mem / (1 << 20)
		},
	}
}

// TraceDefaultSpan is the least a trace pod's series must last to be
// picked by the plain "trace" profile (the trace's short-lived pods hold a
// few minutes of data: looped, they would not look like a service).
const TraceDefaultSpan = 6 * time.Hour

// Names lists the profiles Lookup knows.
func Names() []string {
	out := []string{"trace", "trace:<pod id or index>"}
	for _, p := range synthetic {
		out = append(out, p.Name)
	}
	return out
}

// Synthetic lists the synthetic profiles.
func Synthetic() []Profile { return append([]Profile(nil), synthetic...) }

// Lookup finds a profile by name: a synthetic one, "trace:<pod id, id
// prefix or index>", or "trace" (a pod of the trace with at least
// TraceDefaultSpan of data, chosen by a hash of key, so that a workload
// keeps its pod across restarts).
func Lookup(name, key string) (Profile, error) {
	for _, p := range synthetic {
		if p.Name == name {
			return p, nil
		}
	}
	if name == "trace" || strings.HasPrefix(name, "trace:") {
		tr, err := GenAI()
		if err != nil {
			return Profile{}, fmt.Errorf("the embedded trace: %w", err)
		}
		pod, ok := strings.CutPrefix(name, "trace:")
		if !ok {
			var long []string
			for _, p := range tr.Pods {
				if tr.Span(p) >= int64(TraceDefaultSpan/time.Second) {
					long = append(long, p)
				}
			}
			if len(long) == 0 {
				return Profile{}, fmt.Errorf("the embedded trace has no pod with %s of data", TraceDefaultSpan)
			}
			h := fnv.New32a()
			h.Write([]byte(key))
			return TraceProfile(tr, long[int(h.Sum32()%uint32(len(long)))]), nil
		}
		var idx int
		if _, err := fmt.Sscanf(pod, "%d", &idx); err == nil && fmt.Sprint(idx) == pod {
			if idx < 0 || idx >= len(tr.Pods) {
				return Profile{}, fmt.Errorf("trace index %d: the trace has pods 0 to %d", idx, len(tr.Pods)-1)
			}
			return TraceProfile(tr, tr.Pods[idx]), nil
		}
		matches := []string{}
		for _, p := range tr.Pods {
			if strings.HasPrefix(p, pod) {
				matches = append(matches, p)
			}
		}
		if len(matches) == 1 {
			return TraceProfile(tr, matches[0]), nil
		}
		sort.Strings(matches)
		return Profile{}, fmt.Errorf("trace pod %q: %d pods match", pod, len(matches))
	}
	return Profile{}, fmt.Errorf("unknown replay profile %q (known: %s)", name, strings.Join(Names(), ", "))
}
