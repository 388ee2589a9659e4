package render

import "github.com/gantryhq/gantry/internal/template"

// primaryKinds is the one registry of workload kinds: for each, the kind of the
// object that owns the workload's other objects, which Gantry applies first,
// watches, stops, starts and deletes. fleetKinds are those that differ in a
// fleet's manager (Meta.MultiKueue).
var (
	primaryKinds = map[string]string{
		template.Job:      "Job",
		template.Service:  "Deployment",
		template.Notebook: "StatefulSet",
		template.VM:       "VirtualMachine",
	}
	fleetKinds = map[string]string{
		template.VM: FleetVMKind,
	}
)

// PrimaryKind is the primary object's kind for a workload kind ("" for an
// unknown workload kind); inFleet for a fleet's manager.
func PrimaryKind(workloadKind string, inFleet bool) string {
	if k, ok := fleetKinds[workloadKind]; ok && inFleet {
		return k
	}
	return primaryKinds[workloadKind]
}

// IsPrimary reports whether objects of this kind are a workload's primary object.
func IsPrimary(kind string) bool {
	for _, ks := range []map[string]string{primaryKinds, fleetKinds} {
		for _, k := range ks {
			if k == kind {
				return true
			}
		}
	}
	return false
}

// CreatedOnce reports whether a primary object of this kind is created once
// and never applied again: a Job's or VirtualMachine's run state (spec.suspend,
// runStrategy) belongs to Kueue and to stop/start once it exists, and the
// rendered object would set it back; a FleetVM's copy on a worker is
// MultiKueue's, made once.
func CreatedOnce(kind string) bool {
	return kind == "Job" || kind == "VirtualMachine" || kind == FleetVMKind
}
