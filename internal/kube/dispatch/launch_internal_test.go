package dispatch

import (
	"math"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/render"
)

// TestLaunchOf: what a Workload asks of the fleet, read from its labels
// and pod sets: whole GPUs summed over pods, MIG instances counted and at
// their profile's share (the larger of compute and memory), spot from the
// toleration, and every container's image.
func TestLaunchOf(t *testing.T) {
	classes, err := gpu.LoadFile("../../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wl := func(class string, count int64, limits map[string]any, spot bool) *unstructured.Unstructured {
		spec := map[string]any{
			"initContainers": []any{map[string]any{"name": "fetch", "image": "registry.gantry.internal/library/busybox:1.35"}},
			"containers": []any{map[string]any{"name": "main", "image": "registry.gantry.internal/pytorch:2", "resources": map[string]any{"limits": limits}},
				map[string]any{"name": "side", "image": "registry.gantry.internal/library/busybox:1.35"}},
		}
		if spot {
			spec["tolerations"] = []any{map[string]any{"key": "gantry.dev/spot", "operator": "Exists"}}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "w", "uid": "u1", "labels": map[string]any{"gantry.dev/team": "vision", "gantry.dev/gpu-class": class, "gantry.dev/template": "t"}},
			"spec":     map[string]any{"priority": int64(5), "podSets": []any{map[string]any{"name": "main", "count": count, "template": map[string]any{"spec": spec}}}},
		}}
	}
	for _, tc := range []struct {
		name   string
		u      *unstructured.Unstructured
		mig    string
		slices int
		gpus   float64
		spot   bool
	}{
		{"whole GPUs over pods", wl("H100-80GB", 2, map[string]any{"nvidia.com/gpu": "4", "cpu": "8"}, false), "", 0, 8, false},
		{"MIG instances at their share", wl("A100-80GB", 2, map[string]any{"nvidia.com/mig-3g.40gb": "1"}, false), "3g.40gb", 2, 1, false},
		{"memory share over compute share", wl("A100-80GB", 1, map[string]any{"nvidia.com/mig-1g.20gb": "1"}, false), "1g.20gb", 1, 0.25, false},
		{"a profile the catalog does not name: a whole GPU", wl("A100-80GB", 1, map[string]any{"nvidia.com/mig-9g.90gb": "1"}, false), "9g.90gb", 1, 1, false},
		{"spot", wl("H100-80GB", 1, map[string]any{"nvidia.com/gpu": "1"}, true), "", 0, 1, true},
		{"CPU-only: no GPUs", wl(gpu.CPUClass, 3, map[string]any{"cpu": "1500m"}, false), "", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := launchOf(tc.u, classes)
			if got := strings.Join(l.Images, " "); got != "registry.gantry.internal/library/busybox:1.35 registry.gantry.internal/pytorch:2" {
				t.Errorf("images %q: every container's, init containers' too, each once", got)
			}
			if l.MIG != tc.mig || l.Slices != tc.slices || math.Abs(l.GPUs-tc.gpus) > 1e-9 || l.Spot != tc.spot || l.Team != "vision" || l.Priority != 5 {
				t.Errorf("got %+v, want MIG %q slices %d GPUs %g spot %v", l, tc.mig, tc.slices, tc.gpus, tc.spot)
			}
		})
	}
	// A CPU-only launch's cores: its containers' CPU requests (a limit
	// alone stands for its request), in Kubernetes' quantities, times its
	// pods; a GPU launch's CPU is not counted.
	u := wl(gpu.CPUClass, 3, map[string]any{"cpu": "1500m"}, false)
	if l := launchOf(u, classes); l.Cores != 4.5 || l.Class != gpu.CPUClass {
		t.Errorf("a limit of 1500m, 3 pods: %g cores", l.Cores)
	}
	sets, _, _ := unstructured.NestedSlice(u.Object, "spec", "podSets")
	spec := sets[0].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	spec["containers"].([]any)[0].(map[string]any)["resources"].(map[string]any)["requests"] = map[string]any{"cpu": "500m"}
	spec["containers"].([]any)[1].(map[string]any)["resources"] = map[string]any{"requests": map[string]any{"cpu": "1"}}
	if l := launchOf(u, classes); l.Cores != 4.5 {
		t.Errorf("requests of 500m and 1, 3 pods: %g cores", l.Cores)
	}
	if l := launchOf(wl("H100-80GB", 2, map[string]any{"nvidia.com/gpu": "4", "cpu": "8"}, false), classes); l.Cores != 0 {
		t.Errorf("a GPU launch counted %g cores", l.Cores)
	}
}

// TestJobLaunch: a Job reads as its Kueue Workload would — its pods that
// run at once times each pod's GPUs, its spot toleration, its images, and
// the cluster its start was planned on.
func TestJobLaunch(t *testing.T) {
	classes, err := gpu.LoadFile("../../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "gantry-vision", Labels: map[string]string{
			"gantry.dev/team": "vision", "gantry.dev/gpu-class": "H100-80GB", "gantry.dev/template": "batch-inference", render.LabelPlannedCluster: "cloud-west"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](2), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Key: render.TaintSpot, Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.gantry.internal/pytorch:2", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}}}}}},
	}
	l, err := JobLaunch(job, classes)
	if err != nil {
		t.Fatal(err)
	}
	if l.Team != "vision" || l.Class != "H100-80GB" || l.Template != "batch-inference" || l.GPUs != 4 || !l.Spot || l.Planned != "cloud-west" ||
		strings.Join(l.Images, " ") != "registry.gantry.internal/pytorch:2" {
		t.Errorf("got %+v: want 2 pods at once × 2 H100s, spot, planned on cloud-west", l)
	}
}
