package nodegpu_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/node/nodegpu"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// dgx is an NVML stand-in for an 8-GPU Hopper node with every GPU cut into
// 7 MIG instances (56 devices), GPM supported; calls cost what the mock
// costs, so the figures are Gantry's own cost on top of NVML's.
func dgx() *mock.Interface {
	samples := map[string]int{}
	gpmGet := func(id string) func(nvml.GpmSample) nvml.Return {
		return func(s nvml.GpmSample) nvml.Return {
			samples[id]++
			gs := s.(*gpmSample)
			gs.device, gs.count = id, samples[id]
			return nvml.SUCCESS
		}
	}
	var devs []nvml.Device
	for g := 0; g < 8; g++ {
		uuid := fmt.Sprintf("GPU-%d", g)
		var migs []nvml.Device
		for i := 0; i < 7; i++ {
			mu := fmt.Sprintf("MIG-%d-%d", g, i)
			migs = append(migs, &mock.Device{
				GetUUIDFunc:             func() (string, nvml.Return) { return mu, nvml.SUCCESS },
				GetNameFunc:             func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3 MIG 1g.10gb", nvml.SUCCESS },
				GetGpuInstanceIdFunc:    func() (int, nvml.Return) { return 7 + i, nvml.SUCCESS },
				GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED },
				GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
					return nvml.Memory_v2{Total: 10 << 30, Used: 3 << 30}, nvml.SUCCESS
				},
				GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
					return nil, nvml.ERROR_NOT_SUPPORTED
				},
			})
		}
		devs = append(devs, &mock.Device{
			GetUUIDFunc:                      func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetNameFunc:                      func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
			GetMemoryInfo_v2Func:             func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{Total: 80 << 30}, nvml.SUCCESS },
			GetUtilizationRatesFunc:          func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 50}, nvml.SUCCESS },
			GetPowerUsageFunc:                func() (uint32, nvml.Return) { return 400000, nvml.SUCCESS },
			GetTemperatureFunc:               func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 50, nvml.SUCCESS },
			GetClockInfoFunc:                 func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS },
			GetTotalEnergyConsumptionFunc:    func() (uint64, nvml.Return) { return 1, nvml.SUCCESS },
			GetCurrentClocksEventReasonsFunc: func() (uint64, nvml.Return) { return 0, nvml.SUCCESS },
			GetTotalEccErrorsFunc:            func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS },
			GetRemappedRowsFunc:              func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS },
			RegisterEventsFunc:               func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
			GetMigModeFunc:                   func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS },
			GetMaxMigDeviceCountFunc:         func() (int, nvml.Return) { return 7, nvml.SUCCESS },
			GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
				return migs[i], nvml.SUCCESS
			},
			GetPcieThroughputFunc: func(nvml.PcieUtilCounter) (uint32, nvml.Return) { return 0, nvml.SUCCESS },
			GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
				return nil, nvml.ERROR_NOT_SUPPORTED
			},
			GpmMigSampleGetFunc: func(gi int, s nvml.GpmSample) nvml.Return { return gpmGet(fmt.Sprintf("MIG-%d-%d", g, gi-7))(s) },
		})
	}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
		GpmSampleAllocFunc: func() (nvml.GpmSample, nvml.Return) {
			return &gpmSample{GpmSample: &mock.GpmSample{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}}, nvml.SUCCESS
		},
		GpmMetricsGetFunc: func(m *nvml.GpmMetricsGetType) nvml.Return {
			for i := 0; i < int(m.NumMetrics); i++ {
				m.Metrics[i].Value = 42
			}
			return nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS },
				WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_TIMEOUT }}, nvml.SUCCESS
		},
	}
}

type benchPods []agent.PodDevices

func (p benchPods) List(context.Context) ([]agent.PodDevices, error) { return p, nil }

// BenchmarkSamplePass measures one sampling pass of 8 GPUs × 7 MIG
// instances: the NVML reads alone (Reader.Sample: the baseline every agent
// pays), and gantry-agent's whole pass (inventory, samples, attribution to
// 56 pods, the push buffer), and a /metrics scrape of the pass.
func BenchmarkSamplePass(b *testing.B) {
	ctx := context.Background()
	r, err := nodegpu.Open(dgx())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Sample(ctx, time.Now()); err != nil { // the first GPM samples
		b.Fatal(err)
	}
	var pods benchPods
	for g := 0; g < 8; g++ {
		for i := 0; i < 7; i++ {
			pods = append(pods, agent.PodDevices{Pod: telemetry.PodRef{Namespace: "ns", Name: fmt.Sprintf("p-%d-%d", g, i), Container: "main"},
				Resources: map[string][]string{"nvidia.com/mig-1g.10gb": {fmt.Sprintf("MIG-%d-%d", g, i)}}})
		}
	}
	b.Run("NVMLReads", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.Sample(ctx, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/56, "µs/device")
	})
	a, err := agent.New(agent.Options{Node: "n", GPUs: r, Pods: pods, Sink: nopSink{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("AgentPass", func(b *testing.B) {
		for b.Loop() {
			if err := a.SampleOnce(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/56, "µs/device")
	})
	b.Run("MetricsScrape", func(b *testing.B) {
		h := a.Handler()
		for b.Loop() {
			w := discard{}
			h.ServeHTTP(w, httptestRequest)
		}
	})
}

type nopSink struct{}

func (nopSink) Push(context.Context, telemetry.Batch) error { return nil }

var httptestRequest = httptest.NewRequest("GET", "/metrics", nil)

// discard is a ResponseWriter that keeps nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}
