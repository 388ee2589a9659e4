package deploy_test

import (
	"os"
	"strings"
	"testing"

	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/deploy"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
)

func TestPriorityClasses(t *testing.T) {
	data, err := os.ReadFile("helm/gantry/files/priorityclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int32{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var pc schedulingv1.PriorityClass
		if err := yaml.UnmarshalStrict([]byte(doc), &pc); err != nil {
			t.Fatal(err)
		}
		if pc.Kind != "PriorityClass" || pc.APIVersion != "scheduling.k8s.io/v1" {
			t.Fatalf("unexpected object %s/%s", pc.APIVersion, pc.Kind)
		}
		names[pc.Name] = pc.Value
	}
	prev := int32(-1)
	for _, p := range template.Priorities {
		v, ok := names[render.PriorityClassPrefix+p]
		if !ok {
			t.Fatalf("no PriorityClass for priority %q", p)
		}
		if v <= prev {
			t.Errorf("priority %q is not above the one before", p)
		}
		prev = v
		if deploy.PriorityValue(p) != int64(v) {
			t.Errorf("priority %q: PriorityValue %d, want %d", p, deploy.PriorityValue(p), v)
		}
	}
}
