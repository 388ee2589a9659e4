// Package quota owns how Gantry's GPU quotas are expressed in Kueue, the
// quota engine that admits workloads: a team's quota in the policy (GPUs per
// class, a cohort to borrow in), the Kueue objects that carry it — one
// ResourceFlavor per GPU class, a ClusterQueue per team, a LocalQueue in each
// team namespace, a WorkloadPriorityClass per template priority — the
// resource transformations that count a MIG slice as its share of a GPU, and
// the names a rendered workload uses to enter its team's queue. It builds
// objects as plain maps; applying them is package kube's.
package quota

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/team"
)

// Kueue's API, and the names Gantry gives its objects.
const (
	APIVersion = "kueue.x-k8s.io/v1beta2"
	// LocalQueue is the queue in every team namespace.
	LocalQueue = "gantry"
	// LabelQueueName puts a Job or pod in a LocalQueue.
	LabelQueueName = "kueue.x-k8s.io/queue-name"
	// LabelPriorityClass names a workload's WorkloadPriorityClass.
	LabelPriorityClass = "kueue.x-k8s.io/priority-class"
	// LabelManagedPod and GatePodAdmission are what Kueue's pod webhook
	// would add to a pod it manages: the pod waits at the gate until Kueue
	// admits it.
	LabelManagedPod  = "kueue.x-k8s.io/managed"
	GatePodAdmission = "kueue.x-k8s.io/admission"
	// TaintGPUClass marks a class's ResourceFlavor: only workloads that
	// tolerate it (those rendered for the class) are assigned that flavor.
	// No node carries it; a toleration of a taint no node has is inert.
	TaintGPUClass = "gantry.dev/gpu-class"
	// GPUMilli is the resource quotas count, in thousandths of a GPU: a
	// whole GPU (nvidia.com/gpu) and each MIG slice are transformed into it
	// (Kueue counts extended resources in whole units, so a share must be a
	// whole number of something).
	GPUMilli = "gantry.dev/gpu-milli"
	// wholeGPU is the device plugin's resource for a whole GPU, and
	// passthroughGPU a whole GPU passed to a confidential (Kata) pod.
	wholeGPU       = "nvidia.com/gpu"
	passthroughGPU = "nvidia.com/pgpu"
	// labelManagedBy and managedBy mark the objects Gantry owns (the same
	// pair package render puts on workloads).
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "gantry"
)

// Quota is a team's share of the cluster's GPUs, as the policy declares it.
type Quota struct {
	// GPUs per GPU class (whole GPUs; a MIG slice counts as its share, so
	// 0.5 holds one 3g.40gb slice); "*" is every class not listed. A class
	// not listed, without "*", has none.
	GPUs map[string]float64 `json:"gpus,omitempty"`
	// Cohort: teams naming the same cohort lend each other the quota they
	// leave unused, and borrow it (up to BorrowingLimit), with fair sharing.
	Cohort string `json:"cohort,omitempty"`
	// BorrowingLimit caps, per class, how many GPUs beyond its own quota the
	// team may borrow in its cohort (unset: no cap).
	BorrowingLimit map[string]float64 `json:"borrowingLimit,omitempty"`
	// Cores bounds the CPU the team's CPU-only launches ask for at once,
	// in cores (the GPU classes' cpu section; unset: no bound). In a cohort
	// the team lends what it leaves unused but borrows none: a bound.
	Cores *float64 `json:"cores,omitempty"`
}

// Validate checks q (at path, e.g. "teams.vision.quota") against the GPU
// classes (nil: class names unchecked).
func (q Quota) Validate(path string, classes *gpu.Catalog, errs *fault.List) {
	check := func(field string, m map[string]float64) {
		for _, class := range sortedKeys(m) {
			v := m[class]
			p := fmt.Sprintf("%s.%s.%s", path, field, class)
			if classes != nil && class != "*" {
				if _, ok := classes.Get(class); !ok {
					errs.Addf(p, "unknown GPU class %q (classes: %s)", class, strings.Join(classes.Names(), ", "))
				}
			}
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > 1e6 {
				errs.Addf(p, "%v GPUs: must be a number from 0 to 1000000", v)
			}
		}
	}
	check("gpus", q.GPUs)
	check("borrowingLimit", q.BorrowingLimit)
	if c := q.Cores; c != nil {
		if *c < 0 || math.IsNaN(*c) || math.IsInf(*c, 0) || *c > 1e6 {
			errs.Addf(path+".cores", "%v cores: must be a number from 0 to 1000000", *c)
		}
		if classes != nil {
			if _, ok := classes.CPU(); !ok {
				errs.Addf(path+".cores", "the GPU classes have no cpu section: no CPU-only launch runs here to count")
			}
		}
	}
	if q.Cohort != "" && !dnsLabel(q.Cohort) {
		errs.Addf(path+".cohort", "%q must be a lowercase DNS label", q.Cohort)
	}
	if len(q.BorrowingLimit) > 0 && q.Cohort == "" {
		errs.Addf(path+".borrowingLimit", "borrowing needs a cohort to borrow from")
	}
}

func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// Flavor names a GPU class's ResourceFlavor.
func Flavor(class string) string { return "gantry-" + strings.ToLower(class) }

// CPUFlavor is the ResourceFlavor of the CPU nodes, where CPU-only launches
// (recorded as class CPU) run.
var CPUFlavor = Flavor(gpu.CPUClass)

// CPU is the resource a CPU flavor's quota counts (Quota.Cores), and
// unboundedCores the quota of CPU where there is no bound (a million cores).
const (
	CPU            = "cpu"
	unboundedCores = "1000000"
)

// ClusterQueue names a team's ClusterQueue.
func ClusterQueue(t team.Name) string { return "gantry-" + t.String() }

// Cohort names a policy cohort's Kueue Cohort.
func Cohort(name string) string { return "gantry-" + name }

// Object is a Kueue object as a plain map, ready to apply.
type Object = map[string]any

// Priority is a template priority and its value.
type Priority struct {
	Name  string
	Value int64
}

// Objects are the cluster-wide Kueue objects for the classes, the teams'
// quotas and the priorities: the ResourceFlavors, one ClusterQueue per team
// (covering every class, the classes it has no quota for at zero) and the
// WorkloadPriorityClasses. Teams come sorted; the result is deterministic.
func Objects(classes *gpu.Catalog, teams map[string]Quota, priorities []Priority, opt Options) []Object {
	var out []Object
	if opt.ApprovalCheck {
		out = append(out, Object{
			"apiVersion": APIVersion, "kind": "AdmissionCheck",
			"metadata": meta(ApprovalCheck, nil),
			"spec":     map[string]any{"controllerName": ApprovalController},
		})
	}
	names := classes.Names()
	for _, c := range names {
		out = append(out, Object{
			"apiVersion": APIVersion, "kind": "ResourceFlavor",
			"metadata": meta(Flavor(c), nil),
			"spec": map[string]any{
				"nodeTaints": []any{map[string]any{"key": TaintGPUClass, "value": c, "effect": "NoSchedule"}},
			},
		})
	}
	if cpu, ok := classes.CPU(); ok {
		// CPU-only pods run on the CPU nodes and tolerate their taint;
		// a GPU pod does not, and finds no GPU here either.
		out = append(out, Object{
			"apiVersion": APIVersion, "kind": "ResourceFlavor",
			"metadata": meta(CPUFlavor, nil),
			"spec": map[string]any{
				"nodeLabels": map[string]any{cpu.NodeLabel: "true"},
				"nodeTaints": []any{map[string]any{"key": cpu.NodeLabel, "value": "true", "effect": "NoSchedule"}},
			},
		})
	}
	for _, p := range priorities {
		out = append(out, Object{
			"apiVersion": APIVersion, "kind": "WorkloadPriorityClass",
			"metadata": meta(PriorityClass(p.Name), nil),
			"value":    p.Value,
		})
	}
	var checks []any
	if opt.ApprovalCheck {
		checks = append(checks, map[string]any{"name": ApprovalCheck})
	}
	if opt.Fleet != nil {
		out = append(out, fleetObjects(opt.Fleet)...)
		checks = append(checks, map[string]any{"name": FleetCheck})
	}
	for _, t := range sortedKeys(teams) {
		cq := ClusterQueueObject(classes, team.Name(t), teams[t])
		spec := cq["spec"].(map[string]any)
		if len(checks) > 0 {
			spec["admissionChecksStrategy"] = map[string]any{"admissionChecks": checks}
		}
		switch {
		case opt.Held[t]:
			spec["stopPolicy"] = "Hold"
		case opt.Held != nil:
			// Said, not left out: the hold a launch puts on at once
			// (HoldQueue, a merge patch) is another owner's field, which
			// an apply that leaves the field out would leave held.
			spec["stopPolicy"] = "None"
		}
		out = append(out, cq)
	}
	return out
}

// Options shape the ClusterQueues beyond the quotas.
type Options struct {
	// ApprovalCheck puts Gantry's AdmissionCheck on every team's queue:
	// Kueue admits nothing until Gantry says it needs no approval or was
	// approved (Gantry must run its check controller).
	ApprovalCheck bool
	// Held teams' queues admit nothing new (stopPolicy Hold: a spent
	// budget under block); what runs goes on. With Held set, every other
	// team's queue says stopPolicy None.
	Held map[string]bool
	// Fleet, in a MultiKueue manager, puts the MultiKueue AdmissionCheck
	// (FleetCheck) on every team's queue, with its MultiKueueConfig and a
	// MultiKueueCluster per worker: a workload whose quota is reserved here
	// runs on the worker Gantry's dispatcher nominates.
	Fleet []Worker
}

// Worker is a worker cluster as MultiKueue reaches it: the Secret, in
// Kueue's namespace of the manager, that holds its kubeconfig.
type Worker struct {
	Name   string
	Secret string
}

// FleetCheck names the MultiKueue AdmissionCheck and its MultiKueueConfig;
// MultiKueueController is MultiKueue's controllerName.
const (
	FleetCheck           = "gantry-fleet"
	MultiKueueController = "kueue.x-k8s.io/multikueue"
)

// fleetObjects are MultiKueue's objects for the workers: a
// MultiKueueCluster each, one MultiKueueConfig, and the AdmissionCheck.
func fleetObjects(workers []Worker) []Object {
	var out []Object
	names := []any{}
	for _, w := range workers {
		out = append(out, Object{
			"apiVersion": APIVersion, "kind": "MultiKueueCluster",
			"metadata": meta(w.Name, nil),
			"spec": map[string]any{"clusterSource": map[string]any{
				"kubeConfig": map[string]any{"locationType": "Secret", "location": w.Secret}}},
		})
		names = append(names, w.Name)
	}
	return append(out,
		Object{"apiVersion": APIVersion, "kind": "MultiKueueConfig", "metadata": meta(FleetCheck, nil), "spec": map[string]any{"clusters": names}},
		Object{"apiVersion": APIVersion, "kind": "AdmissionCheck", "metadata": meta(FleetCheck, nil), "spec": map[string]any{
			"controllerName": MultiKueueController,
			"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": FleetCheck}}},
	)
}

// WorkerObjects are the Kueue objects of a worker cluster that runs the
// manager's work: the flavors and priorities, and each team's ClusterQueue
// with its quota under the cluster's caps for the team (caps[team][class],
// "*" for the classes not listed). Gantry's approval check stays in the
// manager, which admits first.
func WorkerObjects(classes *gpu.Catalog, teams map[string]Quota, priorities []Priority, caps map[string]map[string]float64) []Object {
	capped := make(map[string]Quota, len(teams))
	for t, q := range teams {
		capped[t] = q.Capped(caps[t])
	}
	return Objects(classes, capped, priorities, Options{})
}

// Capped is q with each class's GPUs bounded by caps (a fleet cluster's
// caps for the team, "*" for the GPU classes not listed), its borrowing in
// its cohort bounded to the same, and its cores by caps[gpu.CPUClass]: a
// team's queue on a worker.
func (q Quota) Capped(caps map[string]float64) Quota {
	if len(caps) == 0 {
		return q
	}
	out := q
	out.GPUs = map[string]float64{}
	keys := map[string]bool{"*": true}
	for c := range q.GPUs {
		keys[c] = true
	}
	for c := range caps {
		keys[c] = true
	}
	delete(keys, gpu.CPUClass)
	if limit, ok := caps[gpu.CPUClass]; ok {
		cores := limit
		if q.Cores != nil {
			cores = min(*q.Cores, limit)
		}
		out.Cores = &cores
	}
	if q.Cohort != "" {
		out.BorrowingLimit = maps.Clone(q.BorrowingLimit)
		if out.BorrowingLimit == nil {
			out.BorrowingLimit = map[string]float64{}
		}
	}
	for c := range keys {
		v, _ := lookup(q.GPUs, c)
		limit, capped := lookup(caps, c)
		if capped {
			v = min(v, limit)
		}
		out.GPUs[c] = v
		// In a cohort, what it may borrow stops at the cap too.
		if capped && q.Cohort != "" {
			room := max(0, limit-v)
			if b, ok := lookup(q.BorrowingLimit, c); !ok || b > room {
				out.BorrowingLimit[c] = room
			}
		}
	}
	return out
}

// ApprovalCheck names Gantry's AdmissionCheck; ApprovalController is its
// controllerName.
const (
	ApprovalCheck      = "gantry-approval"
	ApprovalController = "gantry.dev/approval"
)

// PriorityClass names a template priority's WorkloadPriorityClass.
func PriorityClass(priority string) string { return "gantry-" + priority }

// ClusterQueueObject is a team's ClusterQueue: nominal quota per class
// flavor, in its cohort when it has one, admitting only from the team's
// namespaces. It covers CPU too (Kueue counts a pod's CPU requests unless
// its configuration excludes them): unbounded in the GPU classes' flavors,
// the team's cores in the CPU flavor.
func ClusterQueueObject(classes *gpu.Catalog, t team.Name, q Quota) Object {
	team := t.String()
	var flavors []any
	for _, c := range classes.Names() {
		r := map[string]any{"name": GPUMilli, "nominalQuota": quantity(q.For(c))}
		if l, ok := lookup(q.BorrowingLimit, c); ok && q.Cohort != "" {
			r["borrowingLimit"] = quantity(l)
		}
		flavors = append(flavors, map[string]any{"name": Flavor(c), "resources": []any{r, map[string]any{"name": CPU, "nominalQuota": unboundedCores}}})
	}
	if _, ok := classes.CPU(); ok {
		cpu := map[string]any{"name": CPU, "nominalQuota": unboundedCores}
		if q.Cores != nil {
			cpu["nominalQuota"] = fmt.Sprintf("%dm", int64(math.Round(*q.Cores*1000)))
			if q.Cohort != "" {
				// A bound, not a share: a team of the cohort without one
				// (a million cores) would otherwise lend it past it.
				cpu["borrowingLimit"] = "0"
			}
		}
		flavors = append(flavors, map[string]any{"name": CPUFlavor, "resources": []any{
			map[string]any{"name": GPUMilli, "nominalQuota": "0"}, cpu}})
	}
	spec := map[string]any{
		"namespaceSelector": map[string]any{"matchLabels": map[string]any{"gantry.dev/team": team, labelManagedBy: managedBy}},
		"queueingStrategy":  "BestEffortFIFO",
		"resourceGroups":    []any{map[string]any{"coveredResources": []any{GPUMilli, CPU}, "flavors": flavors}},
		"preemption": map[string]any{
			"withinClusterQueue":  "LowerPriority",
			"reclaimWithinCohort": "Any",
		},
	}
	if q.Cohort != "" {
		spec["cohortName"] = Cohort(q.Cohort)
	}
	return Object{"apiVersion": APIVersion, "kind": "ClusterQueue", "metadata": meta(ClusterQueue(t), map[string]any{"gantry.dev/team": team}), "spec": spec}
}

// For is the team's quota of class c, in GPUs.
func (q Quota) For(c string) float64 {
	v, _ := lookup(q.GPUs, c)
	return v
}

// lookup reads class c from a per-class map, "*" standing for the classes
// not listed.
func lookup(m map[string]float64, c string) (float64, bool) {
	if v, ok := m[c]; ok {
		return v, true
	}
	v, ok := m["*"]
	return v, ok
}

// LocalQueueObject is the queue in a team's namespace.
func LocalQueueObject(namespace string, t team.Name) Object {
	team := t.String()
	return Object{
		"apiVersion": APIVersion, "kind": "LocalQueue",
		"metadata": map[string]any{"name": LocalQueue, "namespace": namespace, "labels": map[string]any{labelManagedBy: managedBy, "gantry.dev/team": team}},
		"spec":     map[string]any{"clusterQueue": ClusterQueue(t)},
	}
}

func meta(name string, labels map[string]any) map[string]any {
	l := map[string]any{labelManagedBy: managedBy}
	for k, v := range labels {
		l[k] = v
	}
	return map[string]any{"name": name, "labels": l}
}

// quantity writes GPUs in thousandths (GPUMilli).
func quantity(v float64) string { return fmt.Sprint(int64(math.Round(v * 1000))) }

// Transformation is one of Kueue's resource transformations: each unit of
// Input (a whole GPU or a MIG slice) counts as Milli of GPUMilli.
type Transformation struct {
	Input string
	Milli int64
}

// Transformations count a whole GPU (passed through or not) as 1000 and each MIG profile as its
// share of a GPU,
// max(compute/7, memory/8), in thousandths rounded up. A profile name that
// several classes cut differently (1g.10gb is an eighth of an A100-80GB's
// memory and a quarter of an A100-40GB's) counts at its largest share: Kueue
// transforms by resource name, which does not say the class.
func Transformations(classes *gpu.Catalog) []Transformation {
	share := map[string]int64{wholeGPU: 1000, passthroughGPU: 1000}
	for _, name := range classes.Names() {
		c, _ := classes.Get(name)
		for _, p := range c.MIG {
			m := int64(math.Ceil(1000 * p.Share()))
			share[p.Resource()] = max(share[p.Resource()], m)
		}
	}
	var out []Transformation
	for _, r := range sortedKeys(share) {
		out = append(out, Transformation{Input: r, Milli: share[r]})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Clip(keys)
}
