package kube

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantryhq/gantry/internal/render"
)

// hasKubeVirt reports whether the API server serves VirtualMachines.
func (c *Cluster) hasKubeVirt() bool {
	_, err := c.core.Discovery().ServerResourcesForGroupVersion(vmResource.GroupVersion().String())
	return err == nil
}

// ObserveVM derives a vm workload's phase from its VirtualMachine's status.
// ok is false when there is nothing to say (no status yet, or stopping: a
// stop is recorded when asked for).
func ObserveVM(vm *unstructured.Unstructured) (Observation, bool) {
	id := vm.GetLabels()[render.LabelWorkloadID]
	if id == "" {
		return Observation{}, false
	}
	o := Observation{WorkloadID: id}
	status, _, _ := unstructured.NestedString(vm.Object, "status", "printableStatus")
	conds, _, _ := unstructured.NestedSlice(vm.Object, "status", "conditions")
	message := func(types ...string) string {
		for _, t := range types {
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == t && m["status"] != "" {
					if msg, _ := m["message"].(string); msg != "" {
						return msg
					}
					if r, _ := m["reason"].(string); r != "" {
						return r
					}
				}
			}
		}
		return ""
	}
	switch status {
	case "Running":
		o.Phase = "Running"
	case "Starting", "Migrating", "WaitingForVolumeBinding":
		o.Phase = "Scheduled"
	case "Provisioning", "WaitingForReceiver":
		o.Phase = "Pending"
	case "ErrorUnschedulable":
		o.Phase, o.Reason = "Pending", message("PodScheduled", "Failure")
		if o.Reason == "" {
			o.Reason = "no node can run this VM"
		}
	case "ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff", "ErrorPvcNotFound", "ErrorDataVolumeNotFound", "DataVolumeError":
		// KubeVirt keeps trying: not the end of the workload, but said.
		o.Phase, o.Reason = "Scheduled", status
		if strings.HasPrefix(status, "Error") || strings.HasPrefix(status, "DataVolume") {
			o.Phase = "Pending"
		}
		if m := message("Failure"); m != "" {
			o.Reason += ": " + m
		}
	default: // Stopped, Stopping, Terminating, Paused, Unknown, none yet
		return o, false
	}
	return o, true
}
