package devcluster

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeSpec describes a group of simulated GPU nodes.
type NodeSpec struct {
	Prefix   string
	Count    int
	Product  string         // nvidia.com/gpu.product, as GPU Feature Discovery writes it
	MemoryMB int            // nvidia.com/gpu.memory
	GPUs     int            // physical GPUs per node
	Whole    int            // GPUs exposed whole as nvidia.com/gpu
	MIG      map[string]int // mixed-strategy MIG resources, e.g. "1g.10gb": 8
	MIGConf  string         // nvidia.com/mig.config
	Spot     bool           // spot capacity: labelled and tainted
	CC       bool           // confidential computing ready (nvidia.com/cc.mode=on)
	// TEE of a CC node's CPUs (snp | tdx): its GPUs are bound for passthrough
	// and advertised as nvidia.com/pgpu, not nvidia.com/gpu.
	TEE string
	// Passthrough GPUs are bound for KubeVirt VMs, advertised as VMDevice
	// (the class's gpu.Class.VMDeviceName), beside the Whole ones.
	Passthrough int
	VMDevice    string
	// Group is the node group the nodes belong to (label gantry.dev/node-group).
	Group string
	// Reserved nodes are bought whole (label gantry.dev/capacity-type=reserved).
	Reserved bool
	// CPULabel makes them CPU nodes without a GPU, labelled and tainted
	// (NoSchedule) <CPULabel>=true as the GPU classes' cpu section names
	// the nodes of CPU-only launches; Cores is their allocatable CPU (0:
	// 192, as the GPU nodes').
	CPULabel string
	Cores    int
}

// Fleet is the simulated GPU fleet of the local cluster: every GPU class of the
// starter catalog, an H100 node cut into MIG slices (mixed strategy), a spot L4
// node, and two confidential-computing nodes (H100 on AMD SEV-SNP, H200 on
// Intel TDX) whose GPUs are passed through to Kata VMs.
var Fleet = []NodeSpec{
	{Prefix: "h100", Count: 2, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: 8, Whole: 8, Group: "h100-reserved", Reserved: true},
	{Prefix: "h100-mig", Count: 1, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: 4,
		MIG: map[string]int{"1g.10gb": 8, "2g.20gb": 4, "3g.40gb": 4}, MIGConf: "all-balanced"},
	{Prefix: "a100-40", Count: 1, Product: "NVIDIA-A100-SXM4-40GB", MemoryMB: 40960, GPUs: 8, Whole: 8},
	{Prefix: "a100-80", Count: 1, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 8, Whole: 8},
	{Prefix: "h200", Count: 1, Product: "NVIDIA-H200", MemoryMB: 143771, GPUs: 8, Whole: 8},
	{Prefix: "l4", Count: 2, Product: "NVIDIA-L4", MemoryMB: 23034, GPUs: 4, Whole: 4},
	{Prefix: "l4-spot", Count: 1, Product: "NVIDIA-L4", MemoryMB: 23034, GPUs: 4, Whole: 4, Spot: true},
	{Prefix: "h100-cc-snp", Count: 1, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: 8, CC: true, TEE: "snp"},
	{Prefix: "h200-cc-tdx", Count: 1, Product: "NVIDIA-H200", MemoryMB: 143771, GPUs: 8, CC: true, TEE: "tdx"},
}

// teeLabels are the Node Feature Discovery labels of a CPU TEE, which the
// RuntimeClasses in deploy/ select on.
var teeLabels = map[string]string{
	"snp": "feature.node.kubernetes.io/cpu-security.sev.snp.enabled",
	"tdx": "feature.node.kubernetes.io/cpu-security.tdx.enabled",
}

// Nodes builds the Node objects of a fleet; kwok manages nodes annotated
// kwok.x-k8s.io/node=fake.
func Nodes(fleet []NodeSpec) []*corev1.Node {
	var out []*corev1.Node
	for _, s := range fleet {
		for i := 0; i < s.Count; i++ {
			name := fmt.Sprintf("%s-%d", s.Prefix, i)
			labels := map[string]string{
				"kubernetes.io/hostname":           name,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/arch":               "amd64",
				"type":                             "kwok",
				"nvidia.com/gpu.present":           "true",
				"nvidia.com/gpu.product":           s.Product,
				"nvidia.com/gpu.memory":            fmt.Sprint(s.MemoryMB),
				"nvidia.com/gpu.count":             fmt.Sprint(s.GPUs),
				"nvidia.com/mig.strategy":          "mixed",
				"gantry.dev/capacity-type":         "on-demand",
				"node.kubernetes.io/instance-type": s.Prefix,
			}
			taints := []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
			if s.CPULabel != "" {
				for k := range labels {
					if strings.HasPrefix(k, "nvidia.com/") {
						delete(labels, k)
					}
				}
				labels[s.CPULabel] = "true"
				taints = []corev1.Taint{{Key: s.CPULabel, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
			}
			if s.Group != "" {
				labels["gantry.dev/node-group"] = s.Group
			}
			if s.Reserved {
				labels["gantry.dev/capacity-type"] = "reserved"
			}
			if s.MIGConf != "" {
				labels["nvidia.com/mig.config"] = s.MIGConf
			}
			if s.Spot {
				labels["gantry.dev/capacity-type"] = "spot"
				taints = append(taints, corev1.Taint{Key: "gantry.dev/spot", Value: "true", Effect: corev1.TaintEffectNoSchedule})
			}
			if s.CC {
				labels["nvidia.com/cc.mode"] = "on"
				labels["nvidia.com/cc.ready.state"] = "true"
				labels[teeLabels[s.TEE]] = "true"
			}
			cores := 192
			if s.Cores > 0 {
				cores = s.Cores
			}
			res := corev1.ResourceList{
				corev1.ResourceCPU:              *resource.NewQuantity(int64(cores), resource.DecimalSI),
				corev1.ResourceMemory:           resource.MustParse("2Ti"),
				corev1.ResourceEphemeralStorage: resource.MustParse("20Ti"),
				corev1.ResourcePods:             resource.MustParse("110"),
				"nvidia.com/gpu":                *resource.NewQuantity(int64(s.Whole), resource.DecimalSI),
			}
			if s.CPULabel != "" {
				delete(res, "nvidia.com/gpu")
			}
			if s.CC {
				res["nvidia.com/pgpu"] = *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI)
			}
			if s.Passthrough > 0 && s.VMDevice != "" {
				res[corev1.ResourceName(s.VMDevice)] = *resource.NewQuantity(int64(s.Passthrough), resource.DecimalSI)
			}
			for p, n := range s.MIG {
				res[corev1.ResourceName("nvidia.com/mig-"+p)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
			}
			out = append(out, &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{
					Name:        name,
					Labels:      labels,
					Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				},
				Spec:   corev1.NodeSpec{Taints: taints},
				Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
			})
		}
	}
	return out
}
