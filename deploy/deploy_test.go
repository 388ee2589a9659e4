package deploy

import (
	"os"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
)

func TestPriorityClasses(t *testing.T) {
	data, err := os.ReadFile("priorityclasses.yaml")
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
	}
}

// TestTelemetryRBAC: the ClusterRole grants what internal/kube's telemetry
// adapter calls, and nothing wider (no wildcard, no reads of secrets).
func TestTelemetryRBAC(t *testing.T) {
	data, err := os.ReadFile("gantry-telemetry-rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &role); err != nil {
		t.Fatal(err)
	}
	var binding rbacv1.ClusterRoleBinding
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil {
		t.Fatal(err)
	}
	granted := map[string]bool{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" {
						t.Fatalf("wildcard in %+v", r)
					}
					granted[g+"/"+res+"/"+v] = true
				}
			}
		}
	}
	want := []string{"authentication.k8s.io/tokenreviews/create", "/pods/get", "/events/create", "/nodes/patch"}
	for _, w := range want {
		if !granted[w] {
			t.Errorf("%s not granted", w)
		}
	}
	if len(granted) != len(want) {
		t.Errorf("granted %v, want exactly %v", granted, want)
	}
	if binding.RoleRef.Name != role.Name {
		t.Errorf("binding names role %q", binding.RoleRef.Name)
	}
}
