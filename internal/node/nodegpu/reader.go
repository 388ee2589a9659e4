package nodegpu

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// Metrics is the part of NVML the sampling reader uses beyond Library: GPM
// samples and metrics, and the event set for XIDs. nvml.New() provides it.
type Metrics interface {
	Library
	GpmSampleAlloc() (nvml.GpmSample, nvml.Return)
	GpmMetricsGet(*nvml.GpmMetricsGetType) nvml.Return
	EventSetCreate() (nvml.EventSet, nvml.Return)
}

// Reader samples a node's GPUs through NVML for gantry-agent: it implements
// agent.GPUs. Open initialises NVML once; Close shuts it down.
type Reader struct {
	lib    Metrics
	events nvml.EventSet // nil where events are not supported

	mu      sync.Mutex
	gpm     map[string]nvml.GpmSample // device id → its previous GPM sample
	lastPID map[string]uint64         // device id → timestamp of the last process sample
	noGPM   map[string]string         // GPU UUID → why GPM is not there
	// missing is what the last pass could not read of each GPU (its
	// devices'), by GPU UUID: reading → why. Inventory lists it.
	missing map[string]map[missKey]missed
	pass    uint64 // Sample calls so far; missed entries of older passes are stale
	// metricsGet is reused for every GPM read (NVML's struct holds room
	// for 477 metrics: allocating one per device and pass would dominate).
	metricsGet nvml.GpmMetricsGetType
	// walked is the last walk of the devices and when: the agent asks for
	// the inventory and then the samples of one pass, one walk serves both.
	walked   []gpu
	walkedAt time.Time
	// gpuEnergy is each MIG GPU's energy counter at the last pass (mJ);
	// migEnergy each of its instances' share of what it used since the
	// agent started (mJ): the instances' energy counters (SplitMIG).
	gpuEnergy map[string]float64
	migEnergy map[string]float64
}

// walkReuse is how long a walk serves later calls of the same pass.
const walkReuse = time.Second

// gpmInterval is the least time between the two GPM samples NVML needs
// (MIG samples must be at least 100 ms apart).
const gpmInterval = 100 * time.Millisecond

// gpmMetrics are the GPM metrics read, and where each goes. GPM gives
// utilizations in percent (Gantry's ratios are DCGM's 0..1) and traffic in
// MiB/s (Gantry's is bytes/s).
var gpmMetrics = []struct {
	id    nvml.GpmMetricId
	m     telemetry.Metric
	scale float64
}{
	{nvml.GPM_METRIC_SM_UTIL, telemetry.SMActive, 0.01},
	{nvml.GPM_METRIC_SM_OCCUPANCY, telemetry.SMOccupancy, 0.01},
	{nvml.GPM_METRIC_ANY_TENSOR_UTIL, telemetry.TensorActive, 0.01},
	{nvml.GPM_METRIC_DRAM_BW_UTIL, telemetry.DRAMActive, 0.01},
	{nvml.GPM_METRIC_PCIE_TX_PER_SEC, telemetry.PCIeTX, 1 << 20},
	{nvml.GPM_METRIC_PCIE_RX_PER_SEC, telemetry.PCIeRX, 1 << 20},
	{nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, telemetry.NVLinkTX, 1 << 20},
	{nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, telemetry.NVLinkRX, 1 << 20},
}

// Open initialises NVML and registers for critical events; ErrNoDriver
// without a driver (and no other NVML call is made).
func Open(lib Metrics) (*Reader, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, ErrNoDriver
		}
		return nil, fmt.Errorf("NVML init: %s", errorString(ret))
	}
	r := &Reader{lib: lib, gpm: map[string]nvml.GpmSample{}, lastPID: map[string]uint64{}, noGPM: map[string]string{}, missing: map[string]map[missKey]missed{},
		gpuEnergy: map[string]float64{}, migEnergy: map[string]float64{}}
	if set, ret := lib.EventSetCreate(); ret == nvml.SUCCESS {
		n, _ := lib.DeviceGetCount()
		registered := 0
		for i := 0; i < n; i++ {
			h, ret := lib.DeviceGetHandleByIndex(i)
			if ret != nvml.SUCCESS {
				continue
			}
			if h.RegisterEvents(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError, set) == nvml.SUCCESS {
				registered++
			}
		}
		if registered > 0 {
			r.events = set
		} else {
			set.Free()
		}
	}
	return r, nil
}

// Close frees what NVML allocated and shuts it down.
func (r *Reader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.gpm {
		s.Free()
	}
	if r.events != nil {
		r.events.Free()
	}
	r.lib.Shutdown()
}

// gpu is one physical GPU as this pass found it.
type gpu struct {
	h     nvml.Device
	state telemetry.GPUState
	migs  []migDevice
}

type migDevice struct {
	h      nvml.Device
	dev    telemetry.Device
	parent nvml.Device
}

// walk finds the GPUs and their MIG instances.
func (r *Reader) walk() ([]gpu, error) {
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("device count: %s", errorString(ret))
	}
	out := make([]gpu, 0, n)
	for i := 0; i < n; i++ {
		h, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: %s", i, errorString(ret))
		}
		g := gpu{h: h}
		st := &g.state
		st.Index = i
		if st.GPU, ret = h.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d UUID: %s", i, errorString(ret))
		}
		st.Model, _ = h.GetName()
		missing := func(what string, ret nvml.Return) bool {
			if ret == nvml.SUCCESS {
				return false
			}
			st.Unsupported = append(st.Unsupported, what+": "+errorString(ret))
			return true
		}
		if m, ret := h.GetMemoryInfo_v2(); !missing("memory", ret) {
			st.MemoryMiB = m.Total >> 20
		}
		if v, ret := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); !missing("ECC", ret) {
			st.ECC.VolatileSBE = v
			st.ECC.VolatileDBE, _ = h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
			st.ECC.AggregateSBE, _ = h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC)
			st.ECC.AggregateDBE, _ = h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
		}
		if corr, unc, pending, failed, ret := h.GetRemappedRows(); !missing("row remapping", ret) {
			st.Remap = telemetry.Remap{Correctable: uint64(corr), Uncorrectable: uint64(unc), Pending: pending, Failure: failed}
		}
		r.mu.Lock()
		if why, ok := r.noGPM[st.GPU]; ok {
			st.Unsupported = append(st.Unsupported, why)
		}
		if m := r.missing[st.GPU]; len(m) > 0 {
			miss := make([]string, 0, len(m))
			for _, x := range m {
				if x.pass == r.pass {
					miss = append(miss, x.line)
				}
			}
			slices.Sort(miss)
			st.Unsupported = append(st.Unsupported, miss...)
		}
		r.mu.Unlock()
		if cur, _, ret := h.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
			st.MIGEnabled = true
			max, ret := h.GetMaxMigDeviceCount()
			if missing("MIG devices", ret) {
				max = 0
			}
			for j := 0; j < max; j++ {
				m, ret := h.GetMigDeviceHandleByIndex(j)
				if ret != nvml.SUCCESS {
					continue // slot not populated
				}
				uuid, ret := m.GetUUID()
				if ret != nvml.SUCCESS {
					continue
				}
				gi, _ := m.GetGpuInstanceId()
				name, _ := m.GetName()
				inst := telemetry.MIGInstance{UUID: uuid, Profile: migProfile(name), InstanceID: gi}
				st.MIG = append(st.MIG, inst)
				g.migs = append(g.migs, migDevice{h: m, parent: h, dev: telemetry.Device{GPU: st.GPU, Index: i, Model: st.Model, MIG: &inst}})
			}
		}
		out = append(out, g)
	}
	return out, nil
}

// migProfile is the profile in a MIG device's name ("NVIDIA H100 80GB HBM3
// MIG 1g.10gb" → "1g.10gb").
func migProfile(name string) string {
	if i := strings.LastIndex(name, "MIG "); i >= 0 {
		return strings.TrimSpace(name[i+4:])
	}
	return name
}

// Inventory implements agent.GPUs.
func (r *Reader) Inventory(context.Context) ([]telemetry.GPUState, error) {
	gs, err := r.walk()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.walked, r.walkedAt = gs, time.Now() //clock:allow the node agent stamps by its node's clock
	r.mu.Unlock()
	out := make([]telemetry.GPUState, len(gs))
	for i, g := range gs {
		out[i] = g.state
	}
	return out, nil
}

// Sample implements agent.GPUs: every GPU without MIG, and every MIG
// instance of a GPU with MIG on. GPM needs two samples: the previous pass's
// is the first (on the first pass, one taken 100 ms before).
func (r *Reader) Sample(ctx context.Context, now time.Time) ([]agent.DeviceSample, error) {
	r.mu.Lock()
	gs, fresh := r.walked, time.Since(r.walkedAt) < walkReuse
	r.walked = nil // a walk serves one pass
	r.mu.Unlock()
	if !fresh || gs == nil {
		var err error
		if gs, err = r.walk(); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The first GPM sample of devices seen for the first time.
	first := false
	for _, g := range gs {
		for _, d := range devicesOf(g) {
			if _, ok := r.gpm[d.dev.ID()]; !ok && r.noGPM[g.state.GPU] == "" {
				if s := r.gpmSample(g, d); s != nil {
					r.gpm[d.dev.ID()] = s
					first = true
				}
			}
		}
	}
	if first {
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			r.mu.Lock()
			return nil, ctx.Err()
		case <-time.After(gpmInterval):
		}
		r.mu.Lock()
	}
	r.pass++
	var out []agent.DeviceSample
	for _, g := range gs {
		parent := r.readDevice(g.h, g.state.GPU, telemetry.Device{GPU: g.state.GPU, Index: g.state.Index, Model: g.state.Model}, nil, g)
		if !g.state.MIGEnabled {
			out = append(out, parent)
			continue
		}
		var insts []agent.DeviceSample
		for _, m := range g.migs {
			s := r.readDevice(m.h, m.dev.ID(), m.dev, &m, g)
			// Device-wide readings: the GPU's temperature and clock hold
			// for its instances.
			for _, m := range []telemetry.Metric{telemetry.Temperature, telemetry.SMClock, telemetry.PowerThrottled, telemetry.ThermalThrottled} {
				s.Values[m] = parent.Values[m]
			}
			insts = append(insts, s)
		}
		// Its power and energy, split among its instances as they use it.
		r.splitMIG(g.state.GPU, parent.Values, insts)
		out = append(out, insts...)
	}
	return out, nil
}

// dev is a device to sample: the GPU itself, or one MIG instance.
type dev struct {
	dev telemetry.Device
	mig *migDevice
}

func devicesOf(g gpu) []dev {
	if !g.state.MIGEnabled {
		return []dev{{dev: telemetry.Device{GPU: g.state.GPU}}}
	}
	out := make([]dev, len(g.migs))
	for i := range g.migs {
		out[i] = dev{dev: g.migs[i].dev, mig: &g.migs[i]}
	}
	return out
}

// gpmSample takes a GPM sample of a device; nil where GPM is not
// supported (remembered per GPU, and said in its inventory).
func (r *Reader) gpmSample(g gpu, d dev) nvml.GpmSample {
	s, ret := r.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		r.noGPM[g.state.GPU] = "GPM profiling metrics: " + errorString(ret)
		return nil
	}
	if d.mig != nil {
		ret = d.mig.parent.GpmMigSampleGet(d.mig.dev.MIG.InstanceID, s)
	} else {
		ret = g.h.GpmSampleGet(s)
	}
	if ret != nvml.SUCCESS {
		s.Free()
		r.noGPM[g.state.GPU] = "GPM profiling metrics (SM activity, occupancy, tensor, DRAM, NVLink): " + errorString(ret)
		return nil
	}
	return s
}

// readDevice reads one device; what it does not support stays NaN.
func (r *Reader) readDevice(h nvml.Device, id string, d telemetry.Device, mig *migDevice, g gpu) agent.DeviceSample {
	v := telemetry.NoValues()
	if u, ret := h.GetUtilizationRates(); ret == nvml.SUCCESS {
		v[telemetry.GPUUtil], v[telemetry.MemCopyUtil] = float64(u.Gpu), float64(u.Memory)
	}
	if m, ret := h.GetMemoryInfo_v2(); ret == nvml.SUCCESS {
		v[telemetry.FBUsed], v[telemetry.FBTotal] = float64(m.Used>>20), float64(m.Total>>20)
	}
	if mig == nil {
		if p, ret := h.GetPowerUsage(); ret == nvml.SUCCESS {
			v[telemetry.Power] = float64(p) / 1000
		}
		if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			v[telemetry.Temperature] = float64(t)
		}
		if c, ret := h.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
			v[telemetry.SMClock] = float64(c)
		}
		if e, ret := h.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			v[telemetry.Energy] = float64(e)
		}
		if reasons, ret := h.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
			v[telemetry.PowerThrottled], v[telemetry.ThermalThrottled] = telemetry.Throttling(reasons)
		}
	}
	// GPM: from the previous sample to this one.
	if prev, ok := r.gpm[id]; ok {
		dd := dev{dev: d, mig: mig}
		if cur := r.gpmSample(g, dd); cur != nil {
			mg := &r.metricsGet
			mg.NumMetrics, mg.Sample1, mg.Sample2 = uint32(len(gpmMetrics)), prev, cur
			for i, m := range gpmMetrics {
				mg.Metrics[i] = nvml.GpmMetric{MetricId: uint32(m.id)}
			}
			if ret := r.lib.GpmMetricsGet(mg); ret == nvml.SUCCESS {
				for i, m := range gpmMetrics {
					x := mg.Metrics[i]
					if nvml.Return(x.NvmlReturn) != nvml.SUCCESS || math.IsNaN(x.Value) {
						// e.g. NVLink on a PCIe card, PCIe on a MIG instance
						r.miss(g, mig, m.m.String(), "GPM: "+errorString(nvml.Return(x.NvmlReturn)))
						continue
					}
					v[m.m] = x.Value * m.scale
					if m.m.Info().Unit == "ratio" {
						v[m.m] = min(max(v[m.m], 0), 1) // GPM's percentages may round past 100
					}
				}
			} else {
				r.miss(g, mig, "GPM metrics", errorString(ret))
			}
			prev.Free()
			r.gpm[id] = cur
		}
	} else if mig == nil {
		// No GPM (before Hopper): PCIe from the older counters (KB/s).
		if tx, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); ret == nvml.SUCCESS {
			v[telemetry.PCIeTX] = float64(tx) * 1024
		}
		if rx, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); ret == nvml.SUCCESS {
			v[telemetry.PCIeRX] = float64(rx) * 1024
		}
	}
	s := agent.DeviceSample{Device: d, Values: v}
	// Per-process utilization, for splitting a time-sliced GPU. NOT_FOUND
	// (and go-nvml's INSUFFICIENT_SIZE with no samples): no process was busy.
	ps, ret := h.GetProcessUtilization(r.lastPID[id])
	switch ret {
	case nvml.SUCCESS, nvml.ERROR_NOT_FOUND, nvml.ERROR_INSUFFICIENT_SIZE:
	default:
		r.miss(g, mig, "process utilization", errorString(ret))
	}
	if ret == nvml.SUCCESS {
		mem := map[uint32]uint64{}
		if procs, ret := h.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
			for _, p := range procs {
				mem[p.Pid] = p.UsedGpuMemory >> 20
			}
		}
		for _, p := range ps {
			s.Processes = append(s.Processes, agent.ProcessUse{PID: p.Pid, SMUtil: float64(p.SmUtil), MemMiB: mem[p.Pid]})
			r.lastPID[id] = max(r.lastPID[id], p.TimeStamp)
		}
	}
	return s
}

// missKey is a reading a GPU, or its MIG instances, did not give.
type missKey struct {
	mig  bool
	what string
}

func (k missKey) String() string {
	if k.mig {
		return "MIG " + k.what
	}
	return k.what
}

// missed is why, the line the inventory lists and the last pass that
// missed it.
type missed struct {
	why, line string
	pass      uint64
}

// miss notes a reading a device of g did not give (r.mu held). It runs
// every pass: the line is formatted only when the reason is new.
func (r *Reader) miss(g gpu, mig *migDevice, what, why string) {
	m := r.missing[g.state.GPU]
	if m == nil {
		m = map[missKey]missed{}
		r.missing[g.state.GPU] = m
	}
	k := missKey{mig != nil, what}
	x, ok := m[k]
	if !ok || x.why != why {
		x = missed{why: why, line: k.String() + ": " + why}
	}
	x.pass = r.pass
	m[k] = x
}

// Events implements agent.GPUs: the critical events NVML queued since the
// last call, without waiting.
func (r *Reader) Events() []telemetry.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.events == nil {
		return nil
	}
	var out []telemetry.Event
	for i := 0; i < 1000; i++ {
		e, ret := r.events.Wait(0)
		if ret != nvml.SUCCESS {
			break // ERROR_TIMEOUT: nothing more queued
		}
		uuid := ""
		if e.Device != nil {
			uuid, _ = e.Device.GetUUID()
		}
		ev := telemetry.Event{Time: time.Now().UTC(), GPU: uuid} //clock:allow the node agent stamps by its node's clock
		switch e.EventType {
		case nvml.EventTypeXidCriticalError:
			ev.XID, ev.Detail = e.EventData, fmt.Sprintf("XID %d", e.EventData)
		case nvml.EventTypeDoubleBitEccError:
			ev.XID, ev.Detail = 48, "double-bit ECC error"
		default:
			continue
		}
		out = append(out, ev)
	}
	return out
}
