package nodegpu_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gantryhq/gantry/internal/node/nodegpu"
)

// fakeNode is an NVML stand-in (no driver runs here): one H100 with MIG on and
// two slices, one L4 without MIG whose power reading is not supported.
func fakeNode(initRet nvml.Return) *mock.Interface {
	slice := func(i int) *mock.Device {
		return &mock.Device{
			GetNameFunc:          func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3 MIG 3g.40gb", nvml.SUCCESS },
			GetUUIDFunc:          func() (string, nvml.Return) { return "MIG-" + string(rune('a'+i)), nvml.SUCCESS },
			GetMemoryInfoFunc:    func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 40 << 30}, nvml.SUCCESS },
			GetGpuInstanceIdFunc: func() (int, nvml.Return) { return 1 + i, nvml.SUCCESS },
		}
	}
	h100 := &mock.Device{
		GetNameFunc:             func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetUUIDFunc:             func() (string, nvml.Return) { return "GPU-h100", nvml.SUCCESS },
		GetMemoryInfoFunc:       func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 80 << 30, Used: 8 << 30}, nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 9, Memory: 4}, nvml.SUCCESS },
		GetTemperatureFunc:      func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 41, nvml.SUCCESS },
		GetPowerUsageFunc:       func() (uint32, nvml.Return) { return 123456, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) {
			return 700000, nvml.SUCCESS
		},
		GetMigModeFunc:           func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS },
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return 7, nvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 2 {
				return slice(i), nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
	l4 := &mock.Device{
		GetNameFunc:               func() (string, nvml.Return) { return "NVIDIA L4", nvml.SUCCESS },
		GetUUIDFunc:               func() (string, nvml.Return) { return "GPU-l4", nvml.SUCCESS },
		GetMemoryInfoFunc:         func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 24 << 30}, nvml.SUCCESS },
		GetUtilizationRatesFunc:   func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 87}, nvml.SUCCESS },
		GetTemperatureFunc:        func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 60, nvml.SUCCESS },
		GetPowerUsageFunc:         func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) { return 72000, nvml.SUCCESS },
		GetMigModeFunc:            func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED },
	}
	devs := []nvml.Device{h100, l4}
	return &mock.Interface{
		InitFunc:                       func() nvml.Return { return initRet },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "580.159.04", nvml.SUCCESS },
		SystemGetNVMLVersionFunc:       func() (string, nvml.Return) { return "13.580.159.04", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 13000, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
	}
}

func TestRead(t *testing.T) {
	lib := fakeNode(nvml.SUCCESS)
	s, err := nodegpu.Read(lib)
	if err != nil {
		t.Fatal(err)
	}
	if s.DriverVersion != "580.159.04" || s.CUDADriverVersion != "13.0" || len(s.Devices) != 2 {
		t.Fatalf("%+v", s)
	}
	h := s.Devices[0]
	if h.Product != "NVIDIA-H100-80GB-HBM3" || h.MemoryTotalMiB != 80<<10 || h.MemoryUsedMiB != 8<<10 || h.UtilizationGPU != 9 ||
		h.PowerWatts != 123.456 || h.PowerLimitWatts != 700 || !h.MIGEnabled || len(h.MIGDevices) != 2 || h.MIGDevices[1].GPUInstanceID != 2 {
		t.Errorf("H100: %+v", h)
	}
	l4 := s.Devices[1]
	if l4.MIGEnabled || len(l4.Unsupported) != 1 || !strings.HasPrefix(l4.Unsupported[0], "power: not supported") {
		t.Errorf("L4: %+v", l4)
	}
	if len(lib.ShutdownCalls()) != 1 {
		t.Errorf("Shutdown called %d times", len(lib.ShutdownCalls()))
	}
}

// Without a driver, nothing but Init is called: any other NVML call after a
// failed Init would kill the process.
func TestNoDriverCallsNothingElse(t *testing.T) {
	lib := fakeNode(nvml.ERROR_LIBRARY_NOT_FOUND)
	_, err := nodegpu.Read(lib)
	if !errors.Is(err, nodegpu.ErrNoDriver) {
		t.Fatalf("err = %v", err)
	}
	if n := len(lib.SystemGetDriverVersionCalls()) + len(lib.DeviceGetCountCalls()) + len(lib.ShutdownCalls()); n != 0 {
		t.Fatalf("%d NVML calls after a failed Init", n)
	}
	if _, err := nodegpu.Read(fakeNode(nvml.ERROR_DRIVER_NOT_LOADED)); err == nil || !strings.Contains(err.Error(), "driver not loaded") {
		t.Fatalf("err = %v", err)
	}
}
