package nodegpu_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/node/nodegpu"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// gpmSample is a GPM sample the fake GPU fills with its counter at the time.
type gpmSample struct {
	*mock.GpmSample
	device string
	count  int
}

// node is an NVML stand-in with one H100 (GPM, whole), one H100 with two
// MIG instances, one L4 (no GPM), XID events queued and counts of calls.
type node struct {
	mu        sync.Mutex
	samples   map[string]int // device → GPM samples taken
	migCalls  []int          // GPU instance ids sampled
	freed     int
	allocated int
	events    []nvml.EventData
}

func (n *node) lib(initRet nvml.Return) *mock.Interface {
	take := func(device string) func(nvml.GpmSample) nvml.Return {
		return func(s nvml.GpmSample) nvml.Return {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.samples[device]++
			gs := s.(*gpmSample)
			gs.device, gs.count = device, n.samples[device]
			return nvml.SUCCESS
		}
	}
	migDev := func(uuid, profile string, gi int) *mock.Device {
		return &mock.Device{
			GetUUIDFunc:             func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetNameFunc:             func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3 MIG " + profile, nvml.SUCCESS },
			GetGpuInstanceIdFunc:    func() (int, nvml.Return) { return gi, nvml.SUCCESS },
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED },
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
				return nvml.Memory_v2{Total: 10 << 30, Used: 9 << 30}, nvml.SUCCESS
			},
			GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
				return nil, nvml.ERROR_NOT_SUPPORTED
			},
		}
	}
	common := func(d *mock.Device, uuid, name string, gpm bool) *mock.Device {
		d.GetUUIDFunc = func() (string, nvml.Return) { return uuid, nvml.SUCCESS }
		d.GetNameFunc = func() (string, nvml.Return) { return name, nvml.SUCCESS }
		d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			// v2: reserved memory is not counted as used.
			return nvml.Memory_v2{Total: 80 << 30, Reserved: 615 << 20, Used: 20 << 30}, nvml.SUCCESS
		}
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 97, Memory: 40}, nvml.SUCCESS }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 612000, nvml.SUCCESS }
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 63, nvml.SUCCESS }
		d.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS }
		d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 123456789, nvml.SUCCESS }
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0x1 | 0x4, nvml.SUCCESS } // idle, SW power cap
		d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
			if t == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && c == nvml.VOLATILE_ECC && uuid == "GPU-mig" {
				return 2, nvml.SUCCESS
			}
			return 0, nvml.SUCCESS
		}
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 1, 0, false, uuid == "GPU-mig", nvml.SUCCESS }
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
			if c == nvml.PCIE_UTIL_RX_BYTES {
				return 2_000_000, nvml.SUCCESS // KB/s
			}
			return 1000, nvml.SUCCESS
		}
		d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return []nvml.ProcessUtilizationSample{{Pid: 4242, SmUtil: 55, TimeStamp: 7}}, nvml.SUCCESS
		}
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 3 << 30}}, nvml.SUCCESS
		}
		if gpm {
			d.GpmSampleGetFunc = take(uuid)
		} else {
			d.GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
		}
		return d
	}
	h100 := common(&mock.Device{GetMigModeFunc: func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS }},
		"GPU-h100", "NVIDIA H100 80GB HBM3", true)
	migs := []*mock.Device{migDev("MIG-a", "1g.10gb", 9), migDev("MIG-b", "3g.40gb", 2)}
	h100mig := common(&mock.Device{
		GetMigModeFunc:           func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS },
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return 7, nvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < len(migs) {
				return migs[i], nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
		GpmMigSampleGetFunc: func(gi int, s nvml.GpmSample) nvml.Return {
			n.mu.Lock()
			n.migCalls = append(n.migCalls, gi)
			n.mu.Unlock()
			uuid := map[int]string{9: "MIG-a", 2: "MIG-b"}[gi]
			return take(uuid)(s)
		},
	}, "GPU-mig", "NVIDIA H100 80GB HBM3", true)
	l4 := common(&mock.Device{GetMigModeFunc: func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }}, "GPU-l4", "NVIDIA L4", false)
	devs := []nvml.Device{h100, h100mig, l4}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return initRet },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
		GpmSampleAllocFunc: func() (nvml.GpmSample, nvml.Return) {
			n.mu.Lock()
			n.allocated++
			n.mu.Unlock()
			s := &gpmSample{}
			s.GpmSample = &mock.GpmSample{FreeFunc: func() nvml.Return { n.mu.Lock(); n.freed++; n.mu.Unlock(); return nvml.SUCCESS }}
			return s, nvml.SUCCESS
		},
		GpmMetricsGetFunc: func(m *nvml.GpmMetricsGetType) nvml.Return {
			a, b := m.Sample1.(*gpmSample), m.Sample2.(*gpmSample)
			if a.device != b.device || b.count != a.count+1 {
				return nvml.ERROR_INVALID_ARGUMENT // not two consecutive samples of one device
			}
			for i := 0; i < int(m.NumMetrics); i++ {
				switch nvml.GpmMetricId(m.Metrics[i].MetricId) {
				case nvml.GPM_METRIC_SM_UTIL:
					m.Metrics[i].Value = 45
				case nvml.GPM_METRIC_DRAM_BW_UTIL:
					m.Metrics[i].Value = 80
				case nvml.GPM_METRIC_SM_OCCUPANCY:
					m.Metrics[i].Value = 100.4 // GPM rounds past 100 %
				case nvml.GPM_METRIC_PCIE_RX_PER_SEC:
					m.Metrics[i].Value = 100 // MiB/s
				case nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC:
					m.Metrics[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				default:
					m.Metrics[i].Value = 10
				}
			}
			return nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
				WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
					n.mu.Lock()
					defer n.mu.Unlock()
					if len(n.events) == 0 {
						return nvml.EventData{}, nvml.ERROR_TIMEOUT
					}
					e := n.events[0]
					n.events = n.events[1:]
					return e, nvml.SUCCESS
				},
			}, nvml.SUCCESS
		},
	}
}

var _ agent.GPUs = (*nodegpu.Reader)(nil)

func TestReaderSamples(t *testing.T) {
	n := &node{samples: map[string]int{}}
	lib := n.lib(nvml.SUCCESS)
	r, err := nodegpu.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var got map[string]agent.DeviceSample
	pass := func() {
		t.Helper()
		ss, err := r.Sample(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]agent.DeviceSample{}
		for _, s := range ss {
			got[s.Device.ID()] = s
		}
	}
	pass()
	if len(got) != 4 { // H100, two MIG instances, L4
		t.Fatalf("devices: %v", got)
	}
	// GPM on the first pass, from two samples 100 ms apart.
	h := got["GPU-h100"].Values
	for m, want := range map[telemetry.Metric]float64{telemetry.SMActive: 0.45, telemetry.DRAMActive: 0.8, telemetry.SMOccupancy: 1, telemetry.PCIeRX: 100 << 20,
		telemetry.GPUUtil: 97, telemetry.FBUsed: 20 << 10, telemetry.FBTotal: 80 << 10, telemetry.Power: 612, telemetry.Temperature: 63, telemetry.SMClock: 1980,
		telemetry.Energy: 123456789, telemetry.PowerThrottled: 1, telemetry.ThermalThrottled: 0} {
		if math.Abs(h[m]-want) > 1e-9 {
			t.Errorf("H100 %s = %v, want %v", m, h[m], want)
		}
	}
	if !math.IsNaN(h[telemetry.NVLinkTX]) {
		t.Errorf("a GPM metric NVML did not give must be absent, not %v", h[telemetry.NVLinkTX])
	}
	if p := got["GPU-h100"].Processes; len(p) != 1 || p[0].PID != 4242 || p[0].SMUtil != 55 || p[0].MemMiB != 3<<10 {
		t.Errorf("processes: %+v", p)
	}
	// MIG instances: their own memory and GPM (by GPU instance id), the
	// GPU's temperature, and its power split as they use it (both at SM
	// activity 0.45: 1 slice of 4 — 1g.10gb beside 3g.40gb — is a quarter
	// of 612 W); their energy counters start at the agent's first pass.
	// The parent is not a sample.
	a := got["MIG-a"]
	if a.Device.MIG == nil || a.Device.MIG.Profile != "1g.10gb" || a.Device.MIG.InstanceID != 9 || a.Device.GPU != "GPU-mig" ||
		a.Values[telemetry.SMActive] != 0.45 || a.Values[telemetry.FBUsed] != 9<<10 || a.Values[telemetry.Temperature] != 63 ||
		a.Values[telemetry.Power] != 153 || a.Values[telemetry.Energy] != 0 || !math.IsNaN(a.Values[telemetry.GPUUtil]) {
		t.Errorf("MIG-a: %+v %v", a.Device, a.Values)
	}
	if b := got["MIG-b"].Values; b[telemetry.Power] != 459 {
		t.Errorf("MIG-b's power %v, want 459 (three quarters of 612 W)", b[telemetry.Power])
	}
	if _, ok := got["GPU-mig"]; ok {
		t.Error("a GPU with MIG on is sampled by its instances, not itself")
	}
	// The L4: no GPM, so profiling metrics absent and PCIe from the older counters.
	l := got["GPU-l4"].Values
	if !math.IsNaN(l[telemetry.SMActive]) || !math.IsNaN(l[telemetry.DRAMActive]) || l[telemetry.PCIeRX] != 2_000_000*1024 || l[telemetry.GPUUtil] != 97 {
		t.Errorf("L4: %v", l)
	}
	// Later passes use the previous pass's sample: one new sample each.
	before := n.samples["GPU-h100"]
	pass()
	if n.samples["GPU-h100"] != before+1 || got["GPU-h100"].Values[telemetry.SMActive] != 0.45 {
		t.Errorf("second pass: %d samples (was %d)", n.samples["GPU-h100"], before)
	}
	inv, err := r.Inventory(ctx)
	if err != nil || len(inv) != 3 {
		t.Fatal(inv, err)
	}
	if g := inv[1]; !g.MIGEnabled || len(g.MIG) != 2 || g.ECC.VolatileDBE != 2 || !g.Remap.Failure || g.Remap.Correctable != 1 || g.MemoryMiB != 80<<10 {
		t.Errorf("inventory of the MIG GPU: %+v", g)
	}
	if u := strings.Join(inv[2].Unsupported, "; "); !strings.Contains(u, "GPM") {
		t.Errorf("the L4 must say GPM is not supported: %q", u)
	}
	// A GPM metric NVML did not give, and per-process utilization on MIG,
	// are listed too.
	if u := strings.Join(inv[0].Unsupported, "; "); !strings.Contains(u, "nvlink_tx: GPM: not supported") || strings.Contains(u, "sm_active") {
		t.Errorf("the H100 must list NVLink TX alone: %q", u)
	}
	if u := strings.Join(inv[1].Unsupported, "; "); !strings.Contains(u, "MIG process utilization: not supported") {
		t.Errorf("the MIG GPU must say per-process utilization is not there: %q", u)
	}
	n.mu.Lock()
	n.events = []nvml.EventData{{Device: mustDev(lib, 1)}, {EventType: nvml.EventTypeXidCriticalError, EventData: 79, Device: mustDev(lib, 1)}}
	n.events[0].EventType = nvml.EventTypeDoubleBitEccError
	n.mu.Unlock()
	ev := r.Events()
	if len(ev) != 2 || ev[0].XID != 48 || ev[1].XID != 79 || ev[1].GPU != "GPU-mig" || len(r.Events()) != 0 {
		t.Errorf("events: %+v", ev)
	}
	r.Close()
	if n.freed != n.allocated {
		t.Errorf("GPM samples: %d allocated, %d freed", n.allocated, n.freed)
	}
}

func mustDev(lib *mock.Interface, i int) nvml.Device {
	d, _ := lib.DeviceGetHandleByIndex(i)
	return d
}

// TestReaderWithoutDriver: no driver, no NVML call after Init (one would
// kill the process; the mock's unset functions would panic).
func TestReaderWithoutDriver(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if _, err := nodegpu.Open(lib); !errors.Is(err, nodegpu.ErrNoDriver) {
		t.Fatalf("%v, want ErrNoDriver", err)
	}
}
