// Package agent owns gantry-agent's pipeline on a GPU node: every interval it
// reads the node's GPUs and MIG instances through a GPUs implementation (NVML
// on a real node, a replay of recorded series in tests and gantry dev),
// attributes each device to the pod and container that holds it (the
// kubelet's PodResources API; time-sliced GPUs split by per-process
// utilization), exposes the readings as Prometheus metrics with
// dcgm-exporter's names and labels, and pushes compact batches to Gantry
// through a bounded buffer that drops the oldest when Gantry is away, never
// blocking sampling.
package agent

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// GPUs is the node's GPU layer. nodegpu implements it on NVML; replay plays
// recorded or synthetic series through the same pipeline.
type GPUs interface {
	// Inventory lists the physical GPUs with their MIG instances and health
	// counters (ECC, row remapping).
	Inventory(ctx context.Context) ([]telemetry.GPUState, error)
	// Sample reads every device once: each physical GPU without MIG, and
	// each MIG instance of a GPU with MIG on. Values not supported are NaN.
	Sample(ctx context.Context, now time.Time) ([]DeviceSample, error)
	// Events returns the critical events (XIDs) seen since the last call,
	// without blocking.
	Events() []telemetry.Event
}

// DeviceSample is one reading of one device, before attribution.
type DeviceSample struct {
	Device telemetry.Device
	Values telemetry.Values
	// Processes is per-process utilization on the device where NVML gives
	// it (nil where not supported).
	Processes []ProcessUse
}

// ProcessUse is one process's share of a device over the last interval.
type ProcessUse struct {
	PID    uint32
	SMUtil float64 // percent
	MemMiB uint64
}

// PodResources lists which pod and container holds which device, as the
// kubelet's PodResources API (v1 List) says.
type PodResources interface {
	List(ctx context.Context) ([]PodDevices, error)
}

// PodDevices is one container's devices: resource name (nvidia.com/gpu,
// nvidia.com/mig-1g.10gb) and the device plugin's device ids (GPU or MIG
// UUIDs; time-sliced replicas carry a "::<n>" suffix).
type PodDevices struct {
	Pod       telemetry.PodRef
	UID       string // the pod's UID where known (for /proc/<pid>/cgroup matching)
	Resources map[string][]string
}

// Sink receives the batches the agent pushes (Gantry's telemetry endpoint
// over HTTP; in gantry dev, the telemetry service in-process).
type Sink interface {
	Push(ctx context.Context, b telemetry.Batch) error
}
