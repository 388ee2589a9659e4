// Package kapi holds what Gantry's Kubernetes packages share: the field
// manager of everything Gantry writes, the API resources of the kinds it
// renders and of Kueue's and KubeVirt's objects, and the mapping of API
// server errors to Gantry's typed errors (Classify).
package kapi

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gantryhq/gantry/internal/fault"
)

// FieldManager is the server-side apply field manager of everything Gantry writes.
const FieldManager = "gantry"

// AnnotationStopped marks a queued Job or VM that Gantry stopped: Kueue owns
// the Job's suspend field (and starts a queued VM), so the stop is said on
// the object and done by deactivating its Kueue Workload.
const AnnotationStopped = "gantry.dev/stopped"

// resources maps the kinds Gantry renders to their API resources.
var Resources = map[schema.GroupVersionKind]schema.GroupVersionResource{
	{Group: "batch", Version: "v1", Kind: "Job"}:                       {Group: "batch", Version: "v1", Resource: "jobs"},
	{Group: "apps", Version: "v1", Kind: "Deployment"}:                 {Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"}:                {Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "", Version: "v1", Kind: "Service"}:                        {Group: "", Version: "v1", Resource: "services"},
	{Group: "", Version: "v1", Kind: "PersistentVolumeClaim"}:          {Group: "", Version: "v1", Resource: "persistentvolumeclaims"},
	{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"}: {Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	VMKind: VMResource,
	// A VM in a fleet (render: the manager's wrapper of it).
	FleetVMKind: FleetVMResource,
	// The Kueue Workload that queues a VM (render.vmWorkload).
	{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "Workload"}: KueueWorkloads,
}

// KubeVirt's VirtualMachine, the primary object of a vm workload.
var (
	VMKind     = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"}
	VMResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}
)

// FleetVM (deploy/helm/gantry/crds/fleetvms.yaml) is a VM that MultiKueue
// runs on a worker cluster: in the manager, the primary object of a vm
// workload in a fleet, holding the VirtualMachine (spec.template) and
// owning its Kueue Workload; on the worker, MultiKueue's copy of it, from
// which Gantry makes the VirtualMachine (same name) and into whose status
// it copies the VM's. FleetVMFramework names it in Kueue's configuration
// (multiKueue.externalFrameworks: kind.version.group).
var (
	FleetVMKind      = schema.GroupVersionKind{Group: "gantry.dev", Version: "v1alpha1", Kind: "FleetVM"}
	FleetVMResource  = schema.GroupVersionResource{Group: "gantry.dev", Version: "v1alpha1", Resource: "fleetvms"}
	FleetVMFramework = "FleetVM.v1alpha1.gantry.dev"
)

// VMIResource is KubeVirt's running instance of a VirtualMachine (same name).
var VMIResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

// AnnotationMovingOff marks a Kueue Workload (a Job, without Kueue) that
// Gantry took off a node quarantined for a failed GPU (named): queued
// again once its pods are gone.
const AnnotationMovingOff = "gantry.dev/moving-off"

// AnnotationPlacement carries, on a MultiKueue manager's Kueue Workload,
// Gantry's dispatch decision in words ("placed on onprem: ...").
const AnnotationPlacement = "gantry.dev/placement"

// AnnotationDrainedFrom marks a manager's Kueue Workload deactivated to
// move it off a draining worker cluster (named): queued again once
// MultiKueue has taken it off.
const AnnotationDrainedFrom = "gantry.dev/drained-from"

// AnnotationDispatchedTo names, on a manager's Kueue Workload, the worker
// cluster it was last nominated to: where it runs once admitted there, kept
// when Kueue's own record of it (status.clusterName) is cleared.
const AnnotationDispatchedTo = "gantry.dev/dispatched-to"

// AnnotationHomeCluster names, on a manager's volume claim, the worker
// cluster its workload first ran on, where its copy holds the data: a
// notebook's home is there, and the notebook runs there alone.
const AnnotationHomeCluster = "gantry.dev/home-cluster"

// AnnotationGPUHourPrice carries, beside the placement, the chosen
// cluster's price per GPU-hour for the Workload: its run is priced so.
const AnnotationGPUHourPrice = "gantry.dev/gpu-hour-price"

// AnnotationHourPrice carries the run's price per hour on the chosen
// cluster (a GPU launch's GPUs at its GPU-hour price, a CPU-only launch's
// cores at its core-hour price): its run is priced so.
const AnnotationHourPrice = "gantry.dev/hour-price"

// KueueResources are Kueue's API resources, by kind.
var KueueResources = map[string]schema.GroupVersionResource{
	"ResourceFlavor":        {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"},
	"ClusterQueue":          {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"},
	"LocalQueue":            {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"},
	"WorkloadPriorityClass": {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloadpriorityclasses"},
	"Cohort":                {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "cohorts"},
	"AdmissionCheck":        {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "admissionchecks"},
	"MultiKueueConfig":      {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "multikueueconfigs"},
	"MultiKueueCluster":     {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "multikueueclusters"},
}

// KueueWorkloads is the API resource of Kueue's Workloads.
var KueueWorkloads = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// ResourceOf is the API resource of a kind Gantry renders.
func ResourceOf(kind string) (schema.GroupVersionResource, error) {
	for gvk, gvr := range Resources {
		if gvk.Kind == kind {
			return gvr, nil
		}
	}
	return schema.GroupVersionResource{}, fmt.Errorf("kapi: unknown kind %q", kind)
}

// typedPatchRE finds the field in server-side apply's "failed to create typed patch object".
var typedPatchRE = regexp.MustCompile(`\): \.([A-Za-z0-9_.\[\]]+): (.+)$`)

// rbacDenied says whether a Forbidden answer is the authorizer's (RBAC:
// `... is forbidden: User "x" cannot create resource ...`) rather than an
// admission plugin's (Pod Security, quotas), which is about the object.
func rbacDenied(msg string) bool {
	return strings.Contains(msg, `is forbidden: User "`) && strings.Contains(msg, `" cannot `)
}

// classify maps apiserver errors to Gantry's typed errors: rejected objects to
// *fault.Invalid naming the field the apiserver named, conflicts to
// *fault.Conflict, and an unreachable server to *fault.Unavailable.
func Classify(err error, kind, name string) error {
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		switch {
		case apierrors.IsForbidden(err) && rbacDenied(st.Message):
			// Gantry's own identity lacks a permission: nothing the caller
			// can change. The cluster is as good as away until an operator
			// grants it; launches are kept and applied then.
			return &fault.Unavailable{What: "kubernetes API server", Err: fmt.Errorf("not allowed to Gantry's ServiceAccount (grant it: deploy/helm/gantry/files/clusterrole-rules.yaml): %s", st.Message)}
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) && st.Details != nil:
			var l fault.List
			prefix := fmt.Sprintf("objects.%s/%s", kind, name)
			if st.Details != nil {
				for _, c := range st.Details.Causes {
					l.Addf(fault.JoinPath(prefix, c.Field), "rejected by the Kubernetes API server: %s", c.Message)
				}
			}
			if l.Len() == 0 {
				l.Addf(prefix, "rejected by the Kubernetes API server: %s", st.Message)
			}
			return l.Err()
		case apierrors.IsForbidden(err):
			var l fault.List
			l.Addf(fmt.Sprintf("objects.%s/%s", kind, name), "rejected by the Kubernetes API server: %s", st.Message)
			return l.Err()
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			return &fault.Conflict{Kind: kind, Name: name, Reason: st.Message}
		case apierrors.IsNotFound(err):
			return &fault.NotFound{Kind: kind, Name: name}
		case strings.Contains(st.Message, "failed to create typed patch object"):
			// Server-side apply refuses an object that breaks its type's
			// schema before validation, naming the field in the message:
			// "...: .spec.a.b: expected numeric (int or float), got string".
			var l fault.List
			prefix := fmt.Sprintf("objects.%s/%s", kind, name)
			if m := typedPatchRE.FindStringSubmatch(st.Message); m != nil {
				l.Addf(fault.JoinPath(prefix, m[1]), "rejected by the Kubernetes API server: %s", m[2])
			} else {
				l.Addf(prefix, "rejected by the Kubernetes API server: %s", st.Message)
			}
			return l.Err()
		case apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err):
			return &fault.Unavailable{What: "kubernetes API server", Err: err}
		}
		return fmt.Errorf("%s %s: %w", kind, name, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) || strings.Contains(err.Error(), "connection refused") {
		return &fault.Unavailable{What: "kubernetes API server", Err: err}
	}
	return fmt.Errorf("%s %s: %w", kind, name, err)
}

// Ptr is a pointer to v (for API fields that take one).
func Ptr[T any](v T) *T { return &v }
