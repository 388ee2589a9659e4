// Package telemetry owns Gantry's view of what GPU workloads do with their
// GPUs: the metric set (named as dcgm-exporter names them), the batches node
// agents push (readings per GPU and MIG instance, the GPUs' inventory and
// health counters, critical events), their ingestion (the pushing node checked
// against where each pod runs, pods attributed to workloads), the rollups and
// retention of the stored series, node health, and the Source interface that
// answers series queries — from Gantry's own database or from a Prometheus
// that already scrapes dcgm-exporter. It imports no HTTP, SQL or client-go.
package telemetry

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Metric is one time series a reading carries, in the unit of the DCGM field
// it is named after.
type Metric int

// The metrics Gantry stores and serves. The order is the storage order (the
// columns of the samples and rollups tables): append only.
const (
	GPUUtil          Metric = iota // DCGM_FI_DEV_GPU_UTIL, percent: a kernel was running
	MemCopyUtil                    // DCGM_FI_DEV_MEM_COPY_UTIL, percent
	SMActive                       // DCGM_FI_PROF_SM_ACTIVE, ratio 0..1
	SMOccupancy                    // DCGM_FI_PROF_SM_OCCUPANCY, ratio 0..1
	TensorActive                   // DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, ratio 0..1
	DRAMActive                     // DCGM_FI_PROF_DRAM_ACTIVE, ratio 0..1
	FBUsed                         // DCGM_FI_DEV_FB_USED, MiB
	FBTotal                        // DCGM_FI_DEV_FB_TOTAL, MiB
	PCIeTX                         // DCGM_FI_PROF_PCIE_TX_BYTES, bytes/s
	PCIeRX                         // DCGM_FI_PROF_PCIE_RX_BYTES, bytes/s
	NVLinkTX                       // DCGM_FI_PROF_NVLINK_TX_BYTES, bytes/s
	NVLinkRX                       // DCGM_FI_PROF_NVLINK_RX_BYTES, bytes/s
	Power                          // DCGM_FI_DEV_POWER_USAGE, W
	Temperature                    // DCGM_FI_DEV_GPU_TEMP, °C
	SMClock                        // DCGM_FI_DEV_SM_CLOCK, MHz
	Energy                         // DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ since the driver loaded
	PowerThrottled                 // 1 while a power cap slows the clocks (clock event reasons SW/HW power cap, power brake), else 0
	ThermalThrottled               // 1 while heat slows the clocks (SW/HW thermal slowdown), else 0
	NumMetrics
)

// MetricInfo describes a metric: its name in Gantry's API and storage, its
// dcgm-exporter name, unit and the range a sane value lies in.
type MetricInfo struct {
	Name     string // gpu_util, sm_active, …: API series names and column names
	DCGM     string // the dcgm-exporter metric name
	Unit     string
	Help     string
	Min, Max float64 // values outside are refused at ingest
}

var metrics = [NumMetrics]MetricInfo{
	GPUUtil:      {"gpu_util", "DCGM_FI_DEV_GPU_UTIL", "percent", "GPU utilization: share of time a kernel was running (coarse)", 0, 100},
	MemCopyUtil:  {"mem_copy_util", "DCGM_FI_DEV_MEM_COPY_UTIL", "percent", "memory utilization: share of time device memory was read or written", 0, 100},
	SMActive:     {"sm_active", "DCGM_FI_PROF_SM_ACTIVE", "ratio", "ratio of cycles an SM had at least one warp assigned", 0, 1},
	SMOccupancy:  {"sm_occupancy", "DCGM_FI_PROF_SM_OCCUPANCY", "ratio", "ratio of warps resident on an SM to its maximum", 0, 1},
	TensorActive: {"tensor_active", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio", "ratio of cycles the tensor pipes were active", 0, 1},
	DRAMActive:   {"dram_active", "DCGM_FI_PROF_DRAM_ACTIVE", "ratio", "ratio of cycles the device memory interface was active", 0, 1},
	FBUsed:       {"fb_used", "DCGM_FI_DEV_FB_USED", "MiB", "framebuffer memory used", 0, 1 << 24},
	FBTotal:      {"fb_total", "DCGM_FI_DEV_FB_TOTAL", "MiB", "framebuffer memory total", 0, 1 << 24},
	PCIeTX:       {"pcie_tx", "DCGM_FI_PROF_PCIE_TX_BYTES", "bytes/s", "PCIe bytes transmitted per second", 0, 1 << 40},
	PCIeRX:       {"pcie_rx", "DCGM_FI_PROF_PCIE_RX_BYTES", "bytes/s", "PCIe bytes received per second", 0, 1 << 40},
	NVLinkTX:     {"nvlink_tx", "DCGM_FI_PROF_NVLINK_TX_BYTES", "bytes/s", "NVLink bytes transmitted per second", 0, 1 << 42},
	NVLinkRX:     {"nvlink_rx", "DCGM_FI_PROF_NVLINK_RX_BYTES", "bytes/s", "NVLink bytes received per second", 0, 1 << 42},
	Power:        {"power", "DCGM_FI_DEV_POWER_USAGE", "W", "power draw", 0, 1e5},
	Temperature:  {"temperature", "DCGM_FI_DEV_GPU_TEMP", "C", "GPU temperature", -50, 200},
	SMClock:      {"sm_clock", "DCGM_FI_DEV_SM_CLOCK", "MHz", "SM clock", 0, 1e5},
	Energy:       {"energy", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ", "energy consumed since the driver loaded", 0, 1e18},
	// dcgm-exporter exports the clock event reasons as a bitmask
	// (DCGM_FI_DEV_CLOCKS_EVENT_REASONS, also exported by gantry-agent); a
	// mean of a bitmask means nothing, so Gantry keeps each kind of
	// throttling as a 0/1 series whose mean is the share of time throttled.
	PowerThrottled:   {"power_throttled", "gantry_gpu_power_throttled", "ratio", "1 while a power cap slows the SM clock", 0, 1},
	ThermalThrottled: {"thermal_throttled", "gantry_gpu_thermal_throttled", "ratio", "1 while heat slows the SM clock", 0, 1},
}

// Clock event reasons (NVML's bitmask) that count as throttling.
const (
	ClocksEventSwPowerCap        = 0x4
	ClocksEventHwSlowdown        = 0x8
	ClocksEventSwThermalSlowdown = 0x20
	ClocksEventHwThermalSlowdown = 0x40
	ClocksEventHwPowerBrake      = 0x80
	powerReasons                 = ClocksEventSwPowerCap | ClocksEventHwPowerBrake
	thermalReasons               = ClocksEventSwThermalSlowdown | ClocksEventHwThermalSlowdown
)

// Throttling turns NVML's clock event reasons into the two throttle series
// (HW slowdown counts as both: NVML does not say which caused it).
func Throttling(reasons uint64) (power, thermal float64) {
	if reasons&(powerReasons|ClocksEventHwSlowdown) != 0 {
		power = 1
	}
	if reasons&(thermalReasons|ClocksEventHwSlowdown) != 0 {
		thermal = 1
	}
	return power, thermal
}

// Info describes m.
func (m Metric) Info() MetricInfo { return metrics[m] }

// String is m's API name.
func (m Metric) String() string {
	if m < 0 || m >= NumMetrics {
		return fmt.Sprintf("metric(%d)", int(m))
	}
	return metrics[m].Name
}

// ParseMetric finds a metric by its API name or its DCGM name.
func ParseMetric(s string) (Metric, bool) {
	for m := Metric(0); m < NumMetrics; m++ {
		if metrics[m].Name == s || metrics[m].DCGM == s {
			return m, true
		}
	}
	return 0, false
}

// AllMetrics lists every metric in storage order.
func AllMetrics() []Metric {
	out := make([]Metric, NumMetrics)
	for i := range out {
		out[i] = Metric(i)
	}
	return out
}

// Values holds one value per metric; NaN means not measured (the GPU or
// driver does not support it), never zero.
type Values [NumMetrics]float64

// NoValues is a Values with nothing measured.
func NoValues() Values {
	var v Values
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

// Has reports whether m was measured.
func (v *Values) Has(m Metric) bool { return !math.IsNaN(v[m]) }

// MarshalJSON writes the measured values as an object keyed by metric name;
// what was not measured is left out.
func (v Values) MarshalJSON() ([]byte, error) {
	out := make(map[string]float64, NumMetrics)
	for m := Metric(0); m < NumMetrics; m++ {
		if !math.IsNaN(v[m]) && !math.IsInf(v[m], 0) {
			out[metrics[m].Name] = v[m]
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads an object keyed by metric name; an unknown name is an
// error, a missing one is not measured.
func (v *Values) UnmarshalJSON(data []byte) error {
	var in map[string]float64
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*v = NoValues()
	for name, x := range in {
		m, ok := ParseMetric(name)
		if !ok {
			return fmt.Errorf("unknown metric %q", name)
		}
		v[m] = x
	}
	return nil
}

// Device names a GPU or one MIG instance of it.
type Device struct {
	// UUID of the physical GPU (GPU-…).
	GPU string `json:"gpu"`
	// Index of the physical GPU on its node (dcgm-exporter's "gpu" label).
	Index int `json:"index"`
	// Model as NVML names it (modelName), e.g. "NVIDIA H100 80GB HBM3".
	Model string `json:"model,omitempty"`
	// MIG is set for a MIG instance: its UUID (MIG-…), profile (1g.10gb)
	// and GPU instance id.
	MIG *MIGInstance `json:"mig,omitempty"`
}

// MIGInstance is one MIG instance of a GPU.
type MIGInstance struct {
	UUID       string `json:"uuid"`
	Profile    string `json:"profile"`
	InstanceID int    `json:"instanceId"`
}

// ID is the device's own id: the MIG instance's UUID, or the GPU's.
func (d Device) ID() string {
	if d.MIG != nil {
		return d.MIG.UUID
	}
	return d.GPU
}

// PodRef is the container that holds a device, from the kubelet's
// PodResources API ("" when no pod holds it).
type PodRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
}

// Reading is one sample of one device, attributed to the pod that holds it.
type Reading struct {
	Time   time.Time `json:"t"`
	Device Device    `json:"device"`
	Pod    PodRef    `json:"pod"`
	// Share is the fraction of the device's activity attributed to this pod
	// when several pods share the GPU (time-slicing), from per-process
	// utilization; 1 when it holds the device alone. Attribution says how it
	// was decided: "exclusive", "process" (split by per-process
	// utilization), "even" (no per-process data: split evenly, a guess).
	Share       float64 `json:"share"`
	Attribution string  `json:"attribution,omitempty"`
	Values      Values  `json:"values"`
	// Workload is the Gantry workload the pod belongs to; set by Gantry at
	// ingest, never taken from the agent.
	Workload string `json:"-"`
}

// GPUState is a physical GPU's inventory and health counters as the agent
// read them last.
type GPUState struct {
	Device
	MemoryMiB   uint64        `json:"memoryMiB"`
	MIGEnabled  bool          `json:"migEnabled"`
	MIG         []MIGInstance `json:"migInstances,omitempty"`
	ECC         ECC           `json:"ecc"`
	Remap       Remap         `json:"remap"`
	Unsupported []string      `json:"unsupported,omitempty"`
}

// ECC counts memory errors: volatile since the driver loaded, aggregate over
// the GPU's life. Single-bit errors are corrected; double-bit are not.
type ECC struct {
	VolatileSBE  uint64 `json:"volatileSingleBit"`
	VolatileDBE  uint64 `json:"volatileDoubleBit"`
	AggregateSBE uint64 `json:"aggregateSingleBit"`
	AggregateDBE uint64 `json:"aggregateDoubleBit"`
}

// Remap is the GPU's row remapping state (Ampere and newer).
type Remap struct {
	Correctable   uint64 `json:"correctable"`
	Uncorrectable uint64 `json:"uncorrectable"`
	Pending       bool   `json:"pending"`
	Failure       bool   `json:"failure"`
}

// Event is a critical event the agent saw (an XID error).
type Event struct {
	Time   time.Time `json:"t"`
	GPU    string    `json:"gpu"` // UUID of the physical GPU
	XID    uint64    `json:"xid"`
	Detail string    `json:"detail,omitempty"`
}

// Batch is what an agent pushes: its node, the GPUs' state, readings since
// the last push and events. Dropped counts readings the agent dropped
// because Gantry was away longer than its buffer holds.
type Batch struct {
	Node     string     `json:"node"`
	Agent    string     `json:"agent,omitempty"` // the agent's version
	GPUs     []GPUState `json:"gpus,omitempty"`
	Readings []Reading  `json:"readings,omitempty"`
	Events   []Event    `json:"events,omitempty"`
	Dropped  uint64     `json:"dropped,omitempty"`
}
