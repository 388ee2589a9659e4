package quota

import (
	"fmt"
	"testing"

	"github.com/gantryhq/gantry/internal/gpu"
)

func classes(t *testing.T) *gpu.Catalog {
	t.Helper()
	c, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTransformations: a MIG slice counts as max(compute/7, memory/8) of a
// GPU, in thousandths rounded up; a name two classes cut differently at its
// larger share.
func TestTransformations(t *testing.T) {
	got := map[string]int64{}
	for _, tr := range Transformations(classes(t)) {
		got[tr.Input] = tr.Milli
	}
	for in, want := range map[string]int64{
		"nvidia.com/mig-3g.40gb": 500, // 3/7 of the SMs, 4/8 of the memory
		"nvidia.com/mig-1g.20gb": 250,
		"nvidia.com/mig-2g.20gb": 286,
		"nvidia.com/mig-7g.80gb": 1000,
		"nvidia.com/mig-1g.5gb":  143,
		"nvidia.com/mig-1g.10gb": 250, // 1/8 of an H100's memory, 2/8 of an A100-40GB's
		"nvidia.com/gpu":         1000,
		"nvidia.com/pgpu":        1000, // a whole GPU passed to a confidential pod
	} {
		if got[in] != want {
			t.Errorf("%s: %d thousandths, want %d", in, got[in], want)
		}
	}
}

// TestClusterQueue: nominal quota per class flavor ("*" for the rest, none
// without it), borrowing only in a cohort, admission only from the team's
// namespaces; CPU covered too, unbounded in the GPU flavors and the team's
// cores (unbounded unless set) in the CPU nodes' flavor.
func TestClusterQueue(t *testing.T) {
	c := classes(t)
	if _, ok := c.CPU(); !ok {
		t.Fatal("the starter GPU classes have no cpu section")
	}
	quotas := func(o Object) map[string]map[string]map[string]any {
		out := map[string]map[string]map[string]any{}
		rg := o["spec"].(map[string]any)["resourceGroups"].([]any)[0].(map[string]any)
		if fmt.Sprint(rg["coveredResources"]) != fmt.Sprint([]any{GPUMilli, CPU}) {
			t.Errorf("covered resources %v", rg["coveredResources"])
		}
		for _, f := range rg["flavors"].([]any) {
			fm := f.(map[string]any)
			rs := map[string]map[string]any{}
			for _, r := range fm["resources"].([]any) {
				rs[r.(map[string]any)["name"].(string)] = r.(map[string]any)
			}
			out[fm["name"].(string)] = rs
		}
		return out
	}
	four := 4.5
	for _, tc := range []struct {
		name   string
		q      Quota
		want   map[string]string // flavor → nominal quota of GPUs
		borrow map[string]string
		cohort string
		cores  string // the CPU flavor's nominal quota of CPU
	}{
		{"listed", Quota{GPUs: map[string]float64{"H100-80GB": 8, "L4": 0.5}},
			map[string]string{"gantry-h100-80gb": "8000", "gantry-l4": "500", "gantry-a100-80gb": "0"}, nil, "", unboundedCores},
		{"default", Quota{GPUs: map[string]float64{"*": 4, "H100-80GB": 2}, Cohort: "research", BorrowingLimit: map[string]float64{"H100-80GB": 1}},
			map[string]string{"gantry-h100-80gb": "2000", "gantry-l4": "4000"}, map[string]string{"gantry-h100-80gb": "1000"}, "gantry-research", unboundedCores},
		{"none", Quota{}, map[string]string{"gantry-h100-80gb": "0"}, nil, "", unboundedCores},
		{"borrowing without a cohort is dropped", Quota{GPUs: map[string]float64{"L4": 1}, BorrowingLimit: map[string]float64{"L4": 1}},
			map[string]string{"gantry-l4": "1000"}, nil, "", unboundedCores},
		{"cores", Quota{GPUs: map[string]float64{"L4": 1}, Cores: &four}, map[string]string{"gantry-l4": "1000"}, nil, "", "4500m"},
		{"cores in a cohort borrow none", Quota{GPUs: map[string]float64{"L4": 1}, Cores: &four, Cohort: "research"}, map[string]string{"gantry-l4": "1000"}, nil, "gantry-research", "4500m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ClusterQueueObject(c, "vision", tc.q)
			got := quotas(o)
			if len(got) != len(c.Names())+1 {
				t.Errorf("%d flavors, want one per class and the CPU nodes' (%d)", len(got), len(c.Names())+1)
			}
			for f, want := range tc.want {
				if got[f][GPUMilli]["nominalQuota"] != want || got[f][CPU]["nominalQuota"] != unboundedCores {
					t.Errorf("%s: nominal %v, want %s GPUs and unbounded CPU", f, got[f], want)
				}
			}
			if cf := got[CPUFlavor]; cf[GPUMilli]["nominalQuota"] != "0" || cf[CPU]["nominalQuota"] != tc.cores {
				t.Errorf("%s: %v, want no GPU and %s of CPU", CPUFlavor, cf, tc.cores)
			}
			if b, has := got[CPUFlavor][CPU]["borrowingLimit"]; has != (tc.q.Cores != nil && tc.q.Cohort != "") || has && b != "0" {
				t.Errorf("%s: CPU borrowing limit %v, want 0 exactly for a bound in a cohort", CPUFlavor, b)
			}
			for f, rs := range got {
				b, has := rs[GPUMilli]["borrowingLimit"]
				if want, ok := tc.borrow[f]; ok != has || ok && b != want {
					t.Errorf("%s: borrowing limit %v, want %q", f, b, tc.borrow[f])
				}
			}
			spec := o["spec"].(map[string]any)
			if got, _ := spec["cohortName"].(string); got != tc.cohort {
				t.Errorf("cohort %q, want %q", got, tc.cohort)
			}
			sel := spec["namespaceSelector"].(map[string]any)["matchLabels"].(map[string]any)
			if sel["gantry.dev/team"] != "vision" {
				t.Errorf("namespace selector %v", sel)
			}
		})
	}
}

// TestObjects: one flavor per class tainted with the class and one for the
// CPU nodes (their label and taint), a priority
// class per priority, a queue per team, in a stable order.
func TestObjects(t *testing.T) {
	c := classes(t)
	objs := Objects(c, map[string]Quota{"nlp": {}, "vision": {}}, []Priority{{"low", 1000}}, Options{})
	kinds := map[string]int{}
	var queues []string
	for _, o := range objs {
		kinds[o["kind"].(string)]++
		if o["kind"] == "ClusterQueue" {
			queues = append(queues, o["metadata"].(map[string]any)["name"].(string))
		}
		if o["kind"] == "ResourceFlavor" {
			spec := o["spec"].(map[string]any)
			taint := spec["nodeTaints"].([]any)[0].(map[string]any)
			want := TaintGPUClass
			if o["metadata"].(map[string]any)["name"] == CPUFlavor {
				cpu, _ := c.CPU()
				want = cpu.NodeLabel
				if labels, _ := spec["nodeLabels"].(map[string]any); labels[cpu.NodeLabel] != "true" {
					t.Errorf("the CPU nodes' flavor: labels %v", spec["nodeLabels"])
				}
			}
			if taint["key"] != want || taint["effect"] != "NoSchedule" {
				t.Errorf("flavor taint %v, want %s", taint, want)
			}
		}
	}
	if kinds["ResourceFlavor"] != len(c.Names())+1 || kinds["WorkloadPriorityClass"] != 1 || kinds["ClusterQueue"] != 2 {
		t.Errorf("objects: %v", kinds)
	}
	if len(queues) != 2 || queues[0] != "gantry-nlp" || queues[1] != "gantry-vision" {
		t.Errorf("queues %v", queues)
	}
}

// TestObjectsChecksAndHolds: the approval check on every team's queue with
// its AdmissionCheck, and stopPolicy Hold only on the held team's (None,
// said, on the others': a hold made by a patch is released so).
func TestObjectsChecksAndHolds(t *testing.T) {
	c := classes(t)
	objs := Objects(c, map[string]Quota{"nlp": {}, "vision": {}}, nil, Options{ApprovalCheck: true, Held: map[string]bool{"nlp": true}})
	checks := 0
	for _, o := range objs {
		spec, _ := o["spec"].(map[string]any)
		switch o["kind"] {
		case "AdmissionCheck":
			checks++
			if spec["controllerName"] != ApprovalController || o["metadata"].(map[string]any)["name"] != ApprovalCheck {
				t.Errorf("admission check %v", o)
			}
		case "ClusterQueue":
			name := o["metadata"].(map[string]any)["name"]
			strategy := spec["admissionChecksStrategy"].(map[string]any)["admissionChecks"].([]any)
			if len(strategy) != 1 || strategy[0].(map[string]any)["name"] != ApprovalCheck {
				t.Errorf("%s: checks %v", name, strategy)
			}
			if want := map[bool]string{true: "Hold", false: "None"}[name == "gantry-nlp"]; spec["stopPolicy"] != want {
				t.Errorf("%s: stopPolicy %v, want %s", name, spec["stopPolicy"], want)
			}
		}
	}
	if checks != 1 {
		t.Errorf("%d AdmissionChecks", checks)
	}
	for _, o := range Objects(c, map[string]Quota{"nlp": {}}, nil, Options{}) {
		if spec, _ := o["spec"].(map[string]any); o["kind"] == "AdmissionCheck" || spec["admissionChecksStrategy"] != nil || spec["stopPolicy"] != nil {
			t.Errorf("without options: %v", o)
		}
	}
}

// TestObjectsFleet: in a MultiKueue manager every team's queue waits on
// Gantry's approval and then on MultiKueue, whose objects name each
// worker's Secret.
func TestObjectsFleet(t *testing.T) {
	c := classes(t)
	objs := Objects(c, map[string]Quota{"nlp": {}}, nil, Options{ApprovalCheck: true, Fleet: []Worker{{Name: "onprem", Secret: "gantry-worker-onprem"}, {Name: "cloud", Secret: "gantry-worker-cloud"}}})
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o["kind"].(string)]++
		spec, _ := o["spec"].(map[string]any)
		name := o["metadata"].(map[string]any)["name"]
		switch o["kind"] {
		case "MultiKueueCluster":
			loc := spec["clusterSource"].(map[string]any)["kubeConfig"].(map[string]any)
			if loc["locationType"] != "Secret" || loc["location"] != "gantry-worker-"+name.(string) {
				t.Errorf("%s: %v", name, loc)
			}
		case "MultiKueueConfig":
			if fmt.Sprint(spec["clusters"]) != "[onprem cloud]" || name != FleetCheck {
				t.Errorf("config %v", o)
			}
		case "AdmissionCheck":
			if name == FleetCheck && (spec["controllerName"] != MultiKueueController || spec["parameters"].(map[string]any)["name"] != FleetCheck) {
				t.Errorf("the MultiKueue check: %v", o)
			}
		case "ClusterQueue":
			got := fmt.Sprint(spec["admissionChecksStrategy"])
			if got != "map[admissionChecks:[map[name:gantry-approval] map[name:gantry-fleet]]]" {
				t.Errorf("%s: checks %s", name, got)
			}
		}
	}
	if kinds["MultiKueueCluster"] != 2 || kinds["MultiKueueConfig"] != 1 || kinds["AdmissionCheck"] != 2 {
		t.Errorf("kinds %v", kinds)
	}
}

// TestWorkerObjects: a worker's queues carry no checks (the manager
// admitted first) and each team's quota under the cluster's caps for it.
func TestWorkerObjects(t *testing.T) {
	c := classes(t)
	teams := map[string]Quota{
		"vision": {GPUs: map[string]float64{"H100-80GB": 8, "A100-80GB": 8}},
		"nlp":    {GPUs: map[string]float64{"*": 4}, Cohort: "research"},
	}
	caps := map[string]map[string]float64{"vision": {"H100-80GB": 2}, "nlp": {"*": 1, "L4": 6}}
	want := map[string]map[string]string{
		"gantry-vision": {"gantry-h100-80gb": "2000", "gantry-a100-80gb": "8000", "gantry-l4": "0"},
		"gantry-nlp":    {"gantry-h100-80gb": "1000", "gantry-a100-80gb": "1000", "gantry-l4": "4000"},
	}
	for _, o := range WorkerObjects(c, teams, nil, caps) {
		spec, _ := o["spec"].(map[string]any)
		if o["kind"] == "AdmissionCheck" || spec["admissionChecksStrategy"] != nil {
			t.Errorf("a check on a worker: %v", o)
		}
		if o["kind"] != "ClusterQueue" {
			continue
		}
		name := o["metadata"].(map[string]any)["name"].(string)
		flavors := spec["resourceGroups"].([]any)[0].(map[string]any)["flavors"].([]any)
		for _, f := range flavors {
			fm := f.(map[string]any)
			got := fm["resources"].([]any)[0].(map[string]any)["nominalQuota"]
			if w, ok := want[name][fm["name"].(string)]; ok && got != w {
				t.Errorf("%s %s: %v, want %s", name, fm["name"], got, w)
			}
		}
		if name == "gantry-nlp" && spec["cohortName"] != "gantry-research" {
			t.Errorf("nlp's cohort: %v", spec["cohortName"])
		}
		// nlp may borrow nothing past its cap of 1 (L4: 2 past its 4).
		if name == "gantry-nlp" {
			for _, f := range flavors {
				fm := f.(map[string]any)
				r := fm["resources"].([]any)[0].(map[string]any)
				want := map[string]any{"gantry-h100-80gb": "0", "gantry-l4": "2000"}[fm["name"].(string)]
				if want != nil && r["borrowingLimit"] != want {
					t.Errorf("nlp %s borrows up to %v, want %v", fm["name"], r["borrowingLimit"], want)
				}
			}
		}
	}
	// Uncapped teams keep their quota as it is.
	q := Quota{GPUs: map[string]float64{"*": 4}}
	if got := q.Capped(nil); got.For("L4") != 4 {
		t.Errorf("uncapped: %v", got)
	}
	// A cap under CPU bounds cores (the lower of it and the quota's), and
	// is no GPU class; "*" bounds no cores.
	eight := 8.0
	for _, tc := range []struct {
		q     Quota
		caps  map[string]float64
		cores float64 // -1: unbounded
	}{
		{Quota{GPUs: map[string]float64{"*": 4}}, map[string]float64{"CPU": 16}, 16},
		{Quota{GPUs: map[string]float64{"*": 4}, Cores: &eight}, map[string]float64{"CPU": 16}, 8},
		{Quota{GPUs: map[string]float64{"*": 4}, Cores: &eight}, map[string]float64{"CPU": 2}, 2},
		{Quota{GPUs: map[string]float64{"*": 4}}, map[string]float64{"*": 1}, -1},
		{Quota{GPUs: map[string]float64{"*": 4}, Cores: &eight}, map[string]float64{"*": 1}, 8},
	} {
		got := tc.q.Capped(tc.caps)
		if _, ok := got.GPUs["CPU"]; ok {
			t.Errorf("%v capped by %v: a GPU class CPU: %v", tc.q, tc.caps, got.GPUs)
		}
		switch {
		case tc.cores < 0 && got.Cores != nil:
			t.Errorf("%v capped by %v: %v cores, want unbounded", tc.q, tc.caps, *got.Cores)
		case tc.cores >= 0 && (got.Cores == nil || *got.Cores != tc.cores):
			t.Errorf("%v capped by %v: %v cores, want %v", tc.q, tc.caps, got.Cores, tc.cores)
		}
	}
	if eight != 8 {
		t.Error("Capped wrote through its quota's cores")
	}
}
