package deploy_test

import (
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/deploy"
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
		if deploy.PriorityValue(p) != int64(v) {
			t.Errorf("priority %q: PriorityValue %d, want %d", p, deploy.PriorityValue(p), v)
		}
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

// TestAgentDaemonSet: the agent's manifest runs on GPU nodes only, mounts
// the kubelet's socket read-only and a projected token for audience gantry,
// and drops every capability.
func TestAgentDaemonSet(t *testing.T) {
	data, err := os.ReadFile("agent/agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	var sa corev1.ServiceAccount
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &sa); err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &ds); err != nil {
		t.Fatal(err)
	}
	p := ds.Spec.Template.Spec
	if p.ServiceAccountName != sa.Name || sa.Name != "gantry-agent" || p.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Fatalf("service account %q, node selector %v", p.ServiceAccountName, p.NodeSelector)
	}
	c := p.Containers[0]
	if c.SecurityContext == nil || *c.SecurityContext.AllowPrivilegeEscalation || len(c.SecurityContext.Capabilities.Drop) != 1 {
		t.Fatalf("security context: %+v", c.SecurityContext)
	}
	var token, socket bool
	for _, v := range p.Volumes {
		if v.Projected != nil && v.Projected.Sources[0].ServiceAccountToken.Audience == "gantry" {
			token = true
		}
		if v.HostPath != nil && v.HostPath.Path == "/var/lib/kubelet/pod-resources" {
			socket = true
		}
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/var/lib/kubelet/pod-resources" && !m.ReadOnly {
			t.Error("the kubelet's socket must be mounted read-only")
		}
	}
	if !token || !socket {
		t.Fatalf("volumes: token %v, socket %v", token, socket)
	}
}
