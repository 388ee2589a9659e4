package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestProbeMapsClasses(t *testing.T) {
	dev := &mock.Device{
		GetNameFunc:               func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
		GetUUIDFunc:               func() (string, nvml.Return) { return "GPU-1", nvml.SUCCESS },
		GetMemoryInfoFunc:         func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 141 << 30}, nvml.SUCCESS },
		GetUtilizationRatesFunc:   func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.SUCCESS },
		GetTemperatureFunc:        func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 30, nvml.SUCCESS },
		GetPowerUsageFunc:         func() (uint32, nvml.Return) { return 80000, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS },
		GetMigModeFunc:            func() (int, int, nvml.Return) { return 0, 0, nvml.SUCCESS },
	}
	lib := &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "580", nvml.SUCCESS },
		SystemGetNVMLVersionFunc:       func() (string, nvml.Return) { return "13", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 13000, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
	var out, errb bytes.Buffer
	if code := run([]string{"probe", "--gpu-classes", "../../templates/gpu-classes.yaml", "--samples", "2", "--interval", "1ms"}, lib, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep probeReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Samples) != 2 || rep.Classes["GPU-1"] != "H200-141GB" {
		t.Fatalf("%s", out.String())
	}
	lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	errb.Reset()
	if code := run([]string{"probe", "--gpu-classes", "../../templates/gpu-classes.yaml"}, lib, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no NVIDIA driver") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}
