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

// TestServerPriorityClass: Gantry's own pods are above every workload's
// priority (no launch preempts the server) and below the system's classes;
// the placeholders' class is below every workload's.
func TestServerPriorityClass(t *testing.T) {
	var server, warm schedulingv1.PriorityClass
	for _, f := range []struct {
		data []byte
		into *schedulingv1.PriorityClass
	}{{deploy.ServerPriorityClass, &server}, {deploy.WarmPriorityClass, &warm}} {
		if err := yaml.UnmarshalStrict(f.data, f.into); err != nil {
			t.Fatal(err)
		}
	}
	if server.Name != "gantry-server" || server.Value >= 1_000_000_000 {
		t.Errorf("%s %d: want gantry-server below the system classes (1,000,000,000)", server.Name, server.Value)
	}
	for _, p := range deploy.Priorities {
		if int64(server.Value) <= p.Value || int64(warm.Value) >= p.Value {
			t.Errorf("priority %s (%d): want it below %s (%d) and above %s (%d)", p.Name, p.Value, server.Name, server.Value, warm.Name, warm.Value)
		}
	}
}
