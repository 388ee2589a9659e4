// Package karpenter owns Gantry's side of the node autoscaler, Karpenter:
// the NodePools, node classes and instance types that its node groups
// become. Reserved groups are machines already bought and are not given to
// Karpenter (their nodes carry the group's label); each on-demand or spot
// group is a NodePool of one instance type, priced per node-hour, labelled
// and tainted as GPU Feature Discovery and Gantry's spot handling expect, so
// that Karpenter's scheduling simulation places exactly the pods the real
// scheduler would.
package karpenter

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// Labels Gantry puts on every node of a group.
const (
	GroupLabel        = "gantry.dev/node-group"
	CapacityTypeLabel = "gantry.dev/capacity-type"
	// NodePoolLabel is the label Karpenter puts on the nodes it makes.
	NodePoolLabel = "karpenter.sh/nodepool"
	// Zone is the one zone of the local cluster's offerings.
	Zone = "local-a"
)

// Machine is what one machine of a group looks like to the scheduler
// besides its GPUs.
var Machine = map[string]string{"cpu": "192", "memory": "2Ti", "ephemeral-storage": "20Ti", "pods": "110"}

// InstanceType names the instance type of a group.
func InstanceType(g nodegroup.Group) string { return "gantry-" + g.Name }

// Scaled reports whether Karpenter scales the group.
func Scaled(g nodegroup.Group) bool { return g.Purchase != nodegroup.Reserved }

// NodeLabels are the labels of a group's nodes: what GPU Feature Discovery
// writes for the class's first product, and the group's own.
func NodeLabels(g nodegroup.Group, c gpu.Class) map[string]string {
	product := ""
	if len(c.Products) > 0 {
		product = c.Products[0]
	}
	return map[string]string{
		"nvidia.com/gpu.present":  "true",
		"nvidia.com/gpu.product":  product,
		"nvidia.com/gpu.memory":   strconv.Itoa(c.MemoryGiB * 1024),
		"nvidia.com/gpu.count":    strconv.Itoa(g.GPUsPerNode),
		"nvidia.com/mig.strategy": "mixed",
		GroupLabel:                g.Name,
		CapacityTypeLabel:         string(g.Purchase),
	}
}

// Taints are the taints of a group's nodes: GPU nodes take only pods that
// tolerate GPUs, spot nodes only pods that accept spot.
func Taints(g nodegroup.Group) []map[string]any {
	t := []map[string]any{{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}}
	if g.Purchase == nodegroup.Spot {
		t = append(t, map[string]any{"key": "gantry.dev/spot", "value": "true", "effect": "NoSchedule"})
	}
	return t
}

// Objects are the NodePools and KWOKNodeClasses of the scaled groups, in
// group order. bootScale multiplies the groups' boot times in the simulated
// cluster (1: as declared).
func Objects(groups []nodegroup.Group, classes *gpu.Catalog, bootScale float64) ([]map[string]any, error) {
	var out []map[string]any
	for _, g := range groups {
		if !Scaled(g) {
			continue
		}
		c, ok := classes.Get(g.Class)
		if !ok {
			return nil, fmt.Errorf("node group %s: no GPU class %q", g.Name, g.Class)
		}
		labels := map[string]any{}
		for k, v := range NodeLabels(g, c) {
			labels[k] = v
		}
		var taints []any
		for _, t := range Taints(g) {
			taints = append(taints, t)
		}
		boot := time.Duration(float64(g.Boot()) * bootScale).Round(time.Second)
		out = append(out, map[string]any{
			"apiVersion": "karpenter.kwok.sh/v1alpha1",
			"kind":       "KWOKNodeClass",
			"metadata":   map[string]any{"name": g.Name, "labels": map[string]any{"app.kubernetes.io/managed-by": "gantry"}},
			"spec":       map[string]any{"nodeRegistrationDelay": durationText(boot)},
		}, map[string]any{
			"apiVersion": "karpenter.sh/v1",
			"kind":       "NodePool",
			"metadata":   map[string]any{"name": g.Name, "labels": map[string]any{"app.kubernetes.io/managed-by": "gantry"}},
			"spec": map[string]any{
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec": map[string]any{
						"nodeClassRef": map[string]any{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": g.Name},
						"requirements": []any{
							map[string]any{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": []any{InstanceType(g)}},
							map[string]any{"key": "karpenter.sh/capacity-type", "operator": "In", "values": []any{string(g.Purchase)}},
						},
						"taints":      taints,
						"expireAfter": "Never",
					},
				},
				"disruption": map[string]any{
					"consolidationPolicy": "WhenEmpty",
					"consolidateAfter":    durationText(g.Quiet()),
				},
				"limits": map[string]any{"nvidia.com/gpu": strconv.Itoa(g.MaxGPUs())},
			},
		})
	}
	return out, nil
}

// durationText writes a duration as Karpenter's fields take it (1h2m3s,
// whole seconds, no fractions).
func durationText(d time.Duration) string {
	d = d.Round(time.Second)
	if d <= 0 {
		return "0s"
	}
	var s string
	if h := d / time.Hour; h > 0 {
		s += fmt.Sprintf("%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		s += fmt.Sprintf("%dm", m)
		d -= m * time.Minute
	}
	if sec := d / time.Second; sec > 0 || s == "" {
		s += fmt.Sprintf("%ds", sec)
	}
	return s
}

// instanceType is one entry of the kwok provider's instance types file.
type instanceType struct {
	Name             string            `json:"name"`
	Offerings        []offering        `json:"offerings"`
	Architecture     string            `json:"architecture"`
	OperatingSystems []string          `json:"operatingSystems"`
	Resources        map[string]string `json:"resources"`
}

type offering struct {
	Price        float64       `json:"Price"`
	Available    bool          `json:"Available"`
	Requirements []requirement `json:"Requirements"`
}

type requirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}

// InstanceTypes is the kwok provider's instance types file
// (--instance-types-file-path): one machine type per scaled group, offered
// in one zone at the group's purchase kind and price per node-hour.
func InstanceTypes(groups []nodegroup.Group) ([]byte, error) {
	out := []instanceType{}
	for _, g := range groups {
		if !Scaled(g) {
			continue
		}
		res := map[string]string{"nvidia.com/gpu": strconv.Itoa(g.GPUsPerNode)}
		for k, v := range Machine {
			res[k] = v
		}
		out = append(out, instanceType{
			Name: InstanceType(g),
			Offerings: []offering{{Price: g.PricePerNodeHour, Available: true, Requirements: []requirement{
				{Key: "karpenter.sh/capacity-type", Operator: "In", Values: []string{string(g.Purchase)}},
				{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{Zone}},
			}}},
			Architecture:     "amd64",
			OperatingSystems: []string{"linux"},
			Resources:        res,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return json.MarshalIndent(out, "", "  ")
}
