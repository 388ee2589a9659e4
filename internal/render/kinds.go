package render

import "github.com/gantryhq/gantry/internal/template"

// primaryKinds is the one registry of workload kinds: for each, the kind of the
// object that owns the workload's other objects, which Gantry applies first,
// watches, stops, starts and deletes.
var primaryKinds = map[string]string{
	template.Job:      "Job",
	template.Service:  "Deployment",
	template.Notebook: "StatefulSet",
	template.VM:       "VirtualMachine",
}

// PrimaryKind is the primary object's kind for a workload kind ("" for an
// unknown workload kind).
func PrimaryKind(workloadKind string) string { return primaryKinds[workloadKind] }

// IsPrimary reports whether objects of this kind are a workload's primary object.
func IsPrimary(kind string) bool {
	for _, k := range primaryKinds {
		if k == kind {
			return true
		}
	}
	return false
}
