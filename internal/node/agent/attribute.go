package agent

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// ProcessPods maps a process on the node to the UID of the pod it runs in.
type ProcessPods interface {
	PodUID(pid uint32) (string, bool)
}

// CgroupPods reads a process's pod from /proc/<pid>/cgroup: the kubelet puts
// every container in a cgroup whose path names its pod's UID
// (kubepods-burstable-pod<uid>.slice with the systemd driver, with "_" for
// "-"; kubepods/burstable/pod<uid> with cgroupfs).
type CgroupPods struct {
	Proc string // the proc filesystem; default /proc
}

var podInCgroup = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)

// PodUID implements ProcessPods.
func (c CgroupPods) PodUID(pid uint32) (string, bool) {
	proc := c.Proc
	if proc == "" {
		proc = "/proc"
	}
	f, err := os.Open(fmt.Sprintf("%s/%d/cgroup", proc, pid))
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := podInCgroup.FindStringSubmatch(sc.Text()); m != nil {
			return strings.ReplaceAll(m[1], "_", "-"), true
		}
	}
	return "", false
}

// How a reading was attributed to its pod.
const (
	Exclusive = "exclusive" // the pod holds the device alone
	ByProcess = "process"   // shared: split by the pods' processes' utilization
	Even      = "even"      // shared, no per-process data: split evenly (a guess)
)

// holder is a container that holds a device.
type holder struct {
	pod telemetry.PodRef
	uid string
}

// deviceID is a device plugin's id without a time-slicing replica suffix
// ("GPU-…::3" → "GPU-…").
func deviceID(id string) string {
	if i := strings.Index(id, "::"); i >= 0 {
		return id[:i]
	}
	return id
}

// isGPUResource reports whether a resource name is the NVIDIA device
// plugin's: nvidia.com/gpu, a MIG profile under the mixed strategy
// (nvidia.com/mig-1g.10gb), or either renamed for time-slicing
// (renameByDefault: nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb.shared).
func isGPUResource(name string) bool {
	return name == "nvidia.com/gpu" || strings.HasPrefix(name, "nvidia.com/gpu.") || strings.HasPrefix(name, "nvidia.com/mig-")
}

// shared are the metrics that measure activity, split between the pods that
// share a device by their share. Memory is split by the processes' own
// memory where known; totals, clocks and temperature are the device's.
var shared = []telemetry.Metric{telemetry.GPUUtil, telemetry.MemCopyUtil, telemetry.SMActive, telemetry.SMOccupancy,
	telemetry.TensorActive, telemetry.DRAMActive, telemetry.PCIeTX, telemetry.PCIeRX, telemetry.NVLinkTX, telemetry.NVLinkRX, telemetry.Power}

// Attribute turns device samples into readings, each attributed to the
// container that holds the device (PodResources). A device several pods
// hold (time-slicing) gives one reading per pod, its activity split by the
// pods' processes' utilization (procs maps processes to pods) or, without
// that, evenly, and says which. A device no pod holds gives one unattributed
// reading.
func Attribute(samples []DeviceSample, pods []PodDevices, procs ProcessPods) []telemetry.Reading {
	holders := map[string][]holder{}
	for _, p := range pods {
		names := make([]string, 0, len(p.Resources))
		for name := range p.Resources {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if !isGPUResource(name) {
				continue
			}
			for _, id := range p.Resources[name] {
				id = deviceID(id)
				h := holder{pod: p.Pod, uid: p.UID}
				dup := false
				for _, o := range holders[id] {
					dup = dup || o == h
				}
				if !dup {
					holders[id] = append(holders[id], h)
				}
			}
		}
	}
	out := make([]telemetry.Reading, 0, len(samples))
	for _, s := range samples {
		hs := holders[s.Device.ID()]
		switch len(hs) {
		case 0:
			out = append(out, telemetry.Reading{Device: s.Device, Share: 1, Values: s.Values})
		case 1:
			out = append(out, telemetry.Reading{Device: s.Device, Pod: hs[0].pod, Share: 1, Attribution: Exclusive, Values: s.Values})
		default:
			out = append(out, split(s, hs, procs)...)
		}
	}
	return out
}

// split divides a shared device's sample between its holders.
func split(s DeviceSample, hs []holder, procs ProcessPods) []telemetry.Reading {
	util := make([]float64, len(hs))
	mem := make([]float64, len(hs))
	total, memKnown := 0.0, false
	if procs != nil {
		for _, p := range s.Processes {
			uid, ok := procs.PodUID(p.PID)
			if !ok {
				continue
			}
			for i, h := range hs {
				if h.uid != "" && h.uid == uid {
					util[i] += p.SMUtil
					mem[i] += float64(p.MemMiB)
					total += p.SMUtil
					memKnown = memKnown || p.MemMiB > 0
				}
			}
		}
	}
	how := ByProcess
	if total == 0 {
		how = Even
	}
	out := make([]telemetry.Reading, len(hs))
	for i, h := range hs {
		share := 1 / float64(len(hs))
		if how == ByProcess {
			share = util[i] / total
		}
		v := s.Values
		for _, m := range shared {
			v[m] *= share // NaN stays NaN
		}
		if memKnown && how == ByProcess {
			v[telemetry.FBUsed] = mem[i]
		} else {
			v[telemetry.FBUsed] *= share
		}
		out[i] = telemetry.Reading{Device: s.Device, Pod: h.pod, Share: share, Attribution: how, Values: v}
	}
	return out
}
