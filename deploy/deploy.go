// Package deploy holds the manifests a cluster needs for Gantry's workloads, and
// the tools module (deploy/cluster) that builds the local control plane.
package deploy

import _ "embed"

// PriorityClasses is priorityclasses.yaml: the gantry-low, gantry-normal and
// gantry-high PriorityClasses that rendered pods name.
//
//go:embed priorityclasses.yaml
var PriorityClasses []byte

// RuntimeClasses is runtimeclasses.yaml: the Kata runtime classes of
// confidential workloads (kata-qemu-nvidia-gpu-snp and -tdx), with the node
// selectors that keep each on nodes of its TEE.
//
//go:embed runtimeclasses.yaml
var RuntimeClasses []byte
