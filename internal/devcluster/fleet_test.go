package devcluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestNodes: a GPU node is labelled with its product and tainted for GPU
// pods; a CPU node has no GPU, no NVIDIA label, and the CPU label and its
// taint alone, with the cores asked.
func TestNodes(t *testing.T) {
	nodes := Nodes([]NodeSpec{
		{Prefix: "l4", Count: 1, Product: "NVIDIA-L4", MemoryMB: 23034, GPUs: 4, Whole: 4},
		{Prefix: "cpu", Count: 2, CPULabel: "gantry.dev/cpu-node", Cores: 16},
	})
	if len(nodes) != 3 || nodes[0].Name != "l4-0" || nodes[2].Name != "cpu-1" {
		t.Fatalf("nodes %d", len(nodes))
	}
	gpu := nodes[0]
	if gpu.Labels["nvidia.com/gpu.product"] != "NVIDIA-L4" || gpu.Spec.Taints[0].Key != "nvidia.com/gpu" ||
		gpu.Status.Allocatable.Cpu().Value() != 192 || gpu.Status.Allocatable.Name("nvidia.com/gpu", "").Value() != 4 {
		t.Errorf("GPU node %v %v %v", gpu.Labels, gpu.Spec.Taints, gpu.Status.Allocatable)
	}
	cpu := nodes[1]
	for k := range cpu.Labels {
		if strings.HasPrefix(k, "nvidia.com/") {
			t.Errorf("a CPU node labelled %s", k)
		}
	}
	if _, ok := cpu.Status.Allocatable["nvidia.com/gpu"]; ok {
		t.Error("a CPU node with nvidia.com/gpu")
	}
	if cpu.Labels["gantry.dev/cpu-node"] != "true" || len(cpu.Spec.Taints) != 1 ||
		cpu.Spec.Taints[0] != (corev1.Taint{Key: "gantry.dev/cpu-node", Value: "true", Effect: corev1.TaintEffectNoSchedule}) ||
		cpu.Status.Allocatable.Cpu().Value() != 16 {
		t.Errorf("CPU node %v %v %v", cpu.Labels, cpu.Spec.Taints, cpu.Status.Allocatable)
	}
}
