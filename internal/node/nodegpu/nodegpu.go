// Package nodegpu owns reading a node's GPUs through NVML (go-nvml): driver and
// CUDA versions, each GPU's name, UUID, memory, utilization, temperature, power
// and MIG mode, and its MIG devices. Every NVML call is gated behind a successful
// Init (a call after a failed Init kills the process); metrics a device does not
// support are listed, not fatal. It feeds tuning advice on the node agent.
package nodegpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Library is the part of NVML the reader uses; nvml.New() provides it.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetNVMLVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
}

// ErrNoDriver means the NVML library could not be loaded: no NVIDIA driver here.
var ErrNoDriver = errors.New("NVML library not found: no NVIDIA driver on this node")

// Snapshot is one reading of the node's GPUs.
type Snapshot struct {
	DriverVersion     string   `json:"driverVersion"`
	NVMLVersion       string   `json:"nvmlVersion"`
	CUDADriverVersion string   `json:"cudaDriverVersion"`
	Devices           []Device `json:"devices"`
}

// Device is one physical GPU.
type Device struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Product is the name as GPU Feature Discovery writes it to the node label
	// nvidia.com/gpu.product (spaces become dashes).
	Product          string      `json:"product"`
	UUID             string      `json:"uuid"`
	MemoryTotalMiB   uint64      `json:"memoryTotalMiB"`
	MemoryUsedMiB    uint64      `json:"memoryUsedMiB"`
	UtilizationGPU   uint32      `json:"utilizationGPUPercent"`
	UtilizationMem   uint32      `json:"utilizationMemoryPercent"`
	TemperatureC     uint32      `json:"temperatureC"`
	PowerWatts       float64     `json:"powerWatts"`
	PowerLimitWatts  float64     `json:"powerLimitWatts"`
	MIGEnabled       bool        `json:"migEnabled"`
	MIGPendingEnable bool        `json:"migPendingEnabled"`
	MIGDevices       []MIGDevice `json:"migDevices,omitempty"`
	// Unsupported lists the readings the device or driver did not provide.
	Unsupported []string `json:"unsupported,omitempty"`
}

// MIGDevice is one MIG slice of a GPU.
type MIGDevice struct {
	Index          int    `json:"index"`
	Name           string `json:"name"`
	UUID           string `json:"uuid"`
	MemoryTotalMiB uint64 `json:"memoryTotalMiB"`
	GPUInstanceID  int    `json:"gpuInstanceId"`
}

// Read initialises NVML, reads every GPU and shuts NVML down again.
func Read(lib Library) (Snapshot, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return Snapshot{}, ErrNoDriver
		}
		return Snapshot{}, fmt.Errorf("NVML init: %s", errorString(ret))
	}
	defer lib.Shutdown()

	var s Snapshot
	var ret nvml.Return
	if s.DriverVersion, ret = lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return s, fmt.Errorf("driver version: %s", errorString(ret))
	}
	s.NVMLVersion, _ = lib.SystemGetNVMLVersion()
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		s.CUDADriverVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return s, fmt.Errorf("device count: %s", errorString(ret))
	}
	for i := 0; i < n; i++ {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return s, fmt.Errorf("device %d: %s", i, errorString(ret))
		}
		d, err := readDevice(i, h)
		if err != nil {
			return s, err
		}
		s.Devices = append(s.Devices, d)
	}
	return s, nil
}

func readDevice(i int, h nvml.Device) (Device, error) {
	d := Device{Index: i}
	var ret nvml.Return
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("device %d name: %s", i, errorString(ret))
	}
	d.Product = strings.ReplaceAll(strings.TrimSpace(d.Name), " ", "-")
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("device %d UUID: %s", i, errorString(ret))
	}
	missing := func(what string, ret nvml.Return) bool {
		if ret == nvml.SUCCESS {
			return false
		}
		d.Unsupported = append(d.Unsupported, what+": "+errorString(ret))
		return true
	}
	if m, ret := h.GetMemoryInfo(); !missing("memory", ret) {
		d.MemoryTotalMiB, d.MemoryUsedMiB = m.Total>>20, m.Used>>20
	}
	if u, ret := h.GetUtilizationRates(); !missing("utilization", ret) {
		d.UtilizationGPU, d.UtilizationMem = u.Gpu, u.Memory
	}
	if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); !missing("temperature", ret) {
		d.TemperatureC = t
	}
	if p, ret := h.GetPowerUsage(); !missing("power", ret) {
		d.PowerWatts = float64(p) / 1000
	}
	if p, ret := h.GetEnforcedPowerLimit(); !missing("power limit", ret) {
		d.PowerLimitWatts = float64(p) / 1000
	}
	cur, pending, ret := h.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return d, nil // no MIG on this GPU
	}
	if missing("MIG mode", ret) {
		return d, nil
	}
	d.MIGEnabled, d.MIGPendingEnable = cur == nvml.DEVICE_MIG_ENABLE, pending == nvml.DEVICE_MIG_ENABLE
	if !d.MIGEnabled {
		return d, nil
	}
	max, ret := h.GetMaxMigDeviceCount()
	if missing("MIG devices", ret) {
		return d, nil
	}
	for j := 0; j < max; j++ {
		m, ret := h.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // slot not populated
		}
		if missing(fmt.Sprintf("MIG device %d", j), ret) {
			continue
		}
		md := MIGDevice{Index: j}
		md.Name, _ = m.GetName()
		md.UUID, _ = m.GetUUID()
		if mem, ret := m.GetMemoryInfo(); ret == nvml.SUCCESS {
			md.MemoryTotalMiB = mem.Total >> 20
		}
		md.GPUInstanceID, _ = m.GetGpuInstanceId()
		d.MIGDevices = append(d.MIGDevices, md)
	}
	return d, nil
}

// errorString names an NVML return code without calling into NVML, which may
// not be loaded.
func errorString(r nvml.Return) string {
	switch r {
	case nvml.ERROR_UNINITIALIZED:
		return "not initialised"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "invalid argument"
	case nvml.ERROR_NOT_SUPPORTED:
		return "not supported"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission"
	case nvml.ERROR_NOT_FOUND:
		return "not found"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "driver not loaded"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "NVML library not found"
	case nvml.ERROR_GPU_IS_LOST:
		return "GPU is lost"
	}
	return fmt.Sprintf("NVML error %d", int(r))
}
