package helm_test

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	psa "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// valueSets are testdata/<name>.yaml: the installs the chart is checked for.
var valueSets = []string{"postgres", "sqlite", "gitsync", "tls", "fleet"}

// helmBin builds Helm the first time (deploy/helm/build.sh, cached by
// version) and returns its path; the script runs once per test binary.
var helmBin = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("bash", "build.sh").Output()
	return strings.TrimSpace(string(out)), err
})

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	bin, err := helmBin()
	if err != nil {
		t.Fatalf("build helm: %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// render is `helm template gantry` for a value set (and extra --set pairs).
func render(t *testing.T, values string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "gantry", "gantry", "--namespace", "gantry-system", "-f", filepath.Join("testdata", values+".yaml")}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", values, err, out)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(out, "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%s: %v\n%s", values, err, doc)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

func find[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			var v T
			data, _ := yaml.Marshal(o.Object)
			if err := yaml.UnmarshalStrict(data, &v); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return &v
		}
	}
	return nil
}

func TestLint(t *testing.T) {
	for _, v := range valueSets {
		if out, err := helm(t, "lint", "--strict", "gantry", "-f", filepath.Join("testdata", v+".yaml")); err != nil {
			t.Errorf("helm lint %s: %v\n%s", v, err, out)
		}
	}
}

// TestGolden: what each value set renders, byte for byte (go test
// ./deploy/helm -update rewrites testdata/*.golden.yaml).
func TestGolden(t *testing.T) {
	for _, v := range valueSets {
		got, err := helm(t, "template", "gantry", "gantry", "--namespace", "gantry-system", "-f", filepath.Join("testdata", v+".yaml"))
		if err != nil {
			t.Fatalf("%s: %v\n%s", v, err, got)
		}
		path := filepath.Join("testdata", v+".golden.yaml")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./deploy/helm -update)", err)
		}
		if got != string(want) {
			t.Errorf("%s renders differently from %s (run with -update if intended)", v, path)
		}
	}
}

// TestRefused: values that cannot work are refused with a message naming the
// value, before anything reaches a cluster.
func TestRefused(t *testing.T) {
	tests := []struct {
		name, values string
		set          []string
		want         string
	}{
		{"sqlite with two replicas", "sqlite", []string{"replicas=2"}, "database.driver: sqlite serves one replica; replicas is 2"},
		{"postgres without its Secret", "postgres", []string{"database.existingSecret="}, "database.existingSecret: name the Secret"},
		{"no OpenID provider", "postgres", []string{"oidc.issuer="}, "oidc.issuer: Gantry serves beyond loopback only with an OpenID provider"},
		{"an http OpenID provider", "postgres", []string{"oidc.issuer=http://idp.example.com"}, "/oidc/issuer"},
		{"no public URL", "postgres", []string{"publicURL="}, "publicURL: how browsers reach Gantry"},
		{"trusted proxies that anyone may pass", "postgres", []string{"ingress.trustedProxies[0]=10.0.0.0/8"}, "ingress.trustedProxies: Gantry believes X-Forwarded-For"},
		{"no catalog", "postgres", []string{"catalog.policy.configMap="}, "catalog.policy: give configMap"},
		{"replicas not a number", "postgres", []string{"replicas=two"}, "/replicas"},
		{"an unknown value", "postgres", []string{"replica=3"}, "replica"},
		{"an unknown log level", "postgres", []string{"logLevel=loud"}, "/logLevel"},
		{"git-sync without a repository", "gitsync", []string{"catalog.gitSync.repo="}, "catalog.gitSync.repo"},
		{"an unknown appDial", "sqlite", []string{"appDial=proxy"}, "/appDial"},
		{"extraEnv over Gantry's settings", "postgres", []string{"extraEnv[0].name=GANTRY_DATABASE_DSN", "extraEnv[0].value=postgres://x"}, "/extraEnv/0/name"},
		{"extraEnv over the CA's directory", "postgres", []string{"extraEnv[0].name=SSL_CERT_DIR", "extraEnv[0].value=/"}, "/extraEnv/0/name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "gantry", "gantry", "-f", filepath.Join("testdata", tc.values+".yaml")}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := helm(t, args...)
			if err == nil {
				t.Fatalf("rendered; want refused with %q", tc.want)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("error %q does not say %q", out, tc.want)
			}
		})
	}
}

// TestServer: Gantry's pods pass Pod Security "restricted", probe /healthz
// and /readyz, take their secrets from Secrets (never the ConfigMap), and run
// on the cluster's own credentials.
func TestServer(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psa.LevelVersion{Level: psa.LevelRestricted, Version: psa.LatestVersion()}
	for _, v := range valueSets {
		objs := render(t, v)
		d := find[appsv1.Deployment](t, objs, "Deployment", "gantry")
		if d == nil {
			t.Fatalf("%s: no Deployment", v)
		}
		for _, res := range eval.EvaluatePod(lv, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec) {
			if !res.Allowed {
				t.Errorf("%s: not restricted: %s: %s", v, res.ForbiddenReason, res.ForbiddenDetail)
			}
		}
		c := d.Spec.Template.Spec.Containers[0]
		if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: probes %s, %s", v, c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
		}
		for _, e := range c.Env {
			if strings.Contains(e.Name, "DSN") || strings.Contains(e.Name, "SECRET") {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.Value != "" {
					t.Errorf("%s: %s is not from a Secret", v, e.Name)
				}
			}
		}
		cm := find[corev1.ConfigMap](t, objs, "ConfigMap", "gantry-config")
		var cfg map[string]any
		if err := yaml.UnmarshalStrict([]byte(cm.Data["gantry.yaml"]), &cfg); err != nil {
			t.Fatalf("%s: gantry.yaml: %v", v, err)
		}
		if cfg["kubeconfig"] != "in-cluster" || cfg["namespace"] != "gantry-system" {
			t.Errorf("%s: kubeconfig %v, namespace %v", v, cfg["kubeconfig"], cfg["namespace"])
		}
		if strings.Contains(cm.Data["gantry.yaml"], "dsn: postgres") || strings.Contains(cm.Data["gantry.yaml"], "clientSecret") {
			t.Errorf("%s: a secret in the ConfigMap:\n%s", v, cm.Data["gantry.yaml"])
		}
		pdb := find[map[string]any](t, objs, "PodDisruptionBudget", "gantry")
		if multi := *d.Spec.Replicas > 1; multi != (pdb != nil) {
			t.Errorf("%s: %d replicas, PodDisruptionBudget %v", v, *d.Spec.Replicas, pdb != nil)
		}
		if v == "sqlite" && d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("sqlite: strategy %s, want Recreate (one process owns the file)", d.Spec.Strategy.Type)
		}
	}
}

// TestReach: what an operator sets where Gantry's pod reaches the rest
// differently (a cluster without DNS or kube-proxy, a private CA, a
// registry mirror): appDial and images.mirrors reach Gantry's settings,
// appDial endpoints alone grants reading Services and their EndpointSlices,
// the CA's ConfigMap is mounted and added to the system's roots, and
// hostAliases and extraEnv reach the pod; by default none of it is there.
func TestReach(t *testing.T) {
	for _, tc := range []struct {
		name    string
		set     []string
		appDial string
		mirrors map[string]string
		aliases []corev1.HostAlias
		env     map[string]string // "" for a name that must not be set
		ca      bool
	}{
		{name: "default", appDial: "dns", env: map[string]string{"SSL_CERT_DIR": ""}},
		{name: "everything", set: []string{"appDial=endpoints", "images.mirrors.registry\\.example\\.com=mirror.internal:5000",
			"extraCA.configMap=corp-ca", "hostAliases[0].ip=10.0.0.1", "hostAliases[0].hostnames[0]=idp.corp",
			"extraEnv[0].name=GOMEMLIMIT", "extraEnv[0].value=1800MiB"},
			appDial: "endpoints", mirrors: map[string]string{"registry.example.com": "mirror.internal:5000"},
			aliases: []corev1.HostAlias{{IP: "10.0.0.1", Hostnames: []string{"idp.corp"}}},
			env:     map[string]string{"GOMEMLIMIT": "1800MiB", "SSL_CERT_DIR": "/etc/ssl/certs:/etc/gantry/ca"}, ca: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, "sqlite", tc.set...)
			d := find[appsv1.Deployment](t, objs, "Deployment", "gantry")
			cm := find[corev1.ConfigMap](t, objs, "ConfigMap", "gantry-config")
			var cfg struct {
				AppDial string `json:"appDial"`
				Images  struct {
					Mirrors map[string]string `json:"mirrors"`
				} `json:"images"`
			}
			if err := yaml.Unmarshal([]byte(cm.Data["gantry.yaml"]), &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.AppDial != tc.appDial || !maps.Equal(cfg.Images.Mirrors, tc.mirrors) {
				t.Errorf("settings: appDial %q, mirrors %v", cfg.AppDial, cfg.Images.Mirrors)
			}
			reads := granted(find[rbacv1.ClusterRole](t, objs, "ClusterRole", "gantry-system-gantry"), "endpointslices")
			if reads != (tc.appDial == "endpoints") {
				t.Errorf("appDial %s: EndpointSlices granted %v", tc.appDial, reads)
			}
			spec := d.Spec.Template.Spec
			if !reflect.DeepEqual(spec.HostAliases, tc.aliases) {
				t.Errorf("hostAliases %+v", spec.HostAliases)
			}
			env := map[string]string{}
			for _, e := range spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			for name, want := range tc.env {
				if got, set := env[name]; got != want || set != (want != "") {
					t.Errorf("%s = %q (set %v), want %q", name, got, set, want)
				}
			}
			mounted, fromCM := false, false
			for _, m := range spec.Containers[0].VolumeMounts {
				mounted = mounted || m.Name == "extra-ca" && m.MountPath == "/etc/gantry/ca" && m.ReadOnly
			}
			for _, v := range spec.Volumes {
				fromCM = fromCM || v.Name == "extra-ca" && v.ConfigMap != nil && v.ConfigMap.Name == "corp-ca"
			}
			if mounted != tc.ca || fromCM != tc.ca {
				t.Errorf("the CA: mounted %v, from corp-ca %v; want %v", mounted, fromCM, tc.ca)
			}
		})
	}
}

// TestRBAC: the ClusterRole and Role are exactly files/*-rules.yaml (the
// rules the e2e suite checks against the API server's audit log), with no
// wildcard and no access to Secrets, and are bound to Gantry's
// ServiceAccount, which the Deployment runs as.
func TestRBAC(t *testing.T) {
	objs := render(t, "postgres")
	for _, tc := range []struct{ kind, file string }{{"ClusterRole", "clusterrole-rules.yaml"}, {"Role", "role-rules.yaml"}} {
		data, err := os.ReadFile(filepath.Join("gantry", "files", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		var want []rbacv1.PolicyRule
		if err := yaml.UnmarshalStrict(data, &want); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		name := map[string]string{"ClusterRole": "gantry-system-gantry", "Role": "gantry"}[tc.kind]
		role := find[rbacv1.ClusterRole](t, objs, tc.kind, name)
		if role == nil {
			t.Fatalf("no %s", tc.kind)
		}
		gotY, _ := yaml.Marshal(role.Rules)
		wantY, _ := yaml.Marshal(want)
		if !bytes.Equal(gotY, wantY) {
			t.Errorf("%s rules differ from %s:\n%s", tc.kind, tc.file, gotY)
		}
		for _, r := range role.Rules {
			if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
				t.Errorf("%s: wildcard in %+v", tc.kind, r)
			}
			if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Verbs, "escalate") || slices.Contains(r.Verbs, "bind") || slices.Contains(r.Verbs, "impersonate") {
				t.Errorf("%s: grants %+v", tc.kind, r)
			}
		}
	}
	for kind, name := range map[string]string{"ClusterRoleBinding": "gantry-system-gantry", "RoleBinding": "gantry"} {
		b := find[rbacv1.ClusterRoleBinding](t, objs, kind, name)
		if b == nil || b.RoleRef.Name != name || len(b.Subjects) != 1 || b.Subjects[0].Name != "gantry" || b.Subjects[0].Namespace != "gantry-system" {
			t.Errorf("%s: %+v", kind, b)
		}
	}
	if d := find[appsv1.Deployment](t, objs, "Deployment", "gantry"); d.Spec.Template.Spec.ServiceAccountName != "gantry" {
		t.Errorf("Deployment runs as %q", d.Spec.Template.Spec.ServiceAccountName)
	}
}

// TestFleet: with worker clusters Gantry reads the clusters file among the
// templates and the workers' credentials where it looks for them, may write
// Secrets in Kueue's namespace only (and read none), and may keep
// MultiKueue's objects; without, none of it is granted.
func TestFleet(t *testing.T) {
	objs := render(t, "fleet")
	cm := find[corev1.ConfigMap](t, objs, "ConfigMap", "gantry-config")
	var cfg struct {
		ClustersFile string `json:"clustersFile"`
		Quota        struct {
			KueueNamespace string `json:"kueueNamespace"`
		} `json:"quota"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["gantry.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.ClustersFile != "/etc/gantry/catalog/templates/clusters.yaml" || cfg.Quota.KueueNamespace != "kueue-system" {
		t.Errorf("clustersFile %q, kueueNamespace %q", cfg.ClustersFile, cfg.Quota.KueueNamespace)
	}
	d := find[appsv1.Deployment](t, objs, "Deployment", "gantry")
	mounts := map[string]string{}
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && strings.HasPrefix(v.Name, "worker-") {
			if want := "/var/run/gantry/workers/" + v.Secret.SecretName; mounts[v.Name] != want {
				t.Errorf("Secret %s mounted at %q, want %s", v.Secret.SecretName, mounts[v.Name], want)
			}
			delete(mounts, v.Name)
		}
	}
	if mounts["worker-worker-onprem-a100"] != "" || len(d.Spec.Template.Spec.Volumes) == 0 {
		t.Errorf("mounts left: %v", mounts)
	}
	role := find[rbacv1.Role](t, objs, "Role", "gantry-system-gantry-fleet")
	if role == nil || role.Namespace != "kueue-system" || len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"secrets"}) || !slices.Equal(role.Rules[0].Verbs, []string{"create", "patch"}) {
		t.Fatalf("the fleet's Role: %+v", role)
	}
	cr := find[rbacv1.ClusterRole](t, objs, "ClusterRole", "gantry-system-gantry")
	if !granted(cr, "multikueueclusters") || !granted(cr, "multikueueconfigs") {
		t.Errorf("the ClusterRole does not grant MultiKueue's objects")
	}
	plain := render(t, "postgres")
	if granted(find[rbacv1.ClusterRole](t, plain, "ClusterRole", "gantry-system-gantry"), "multikueueclusters") || find[rbacv1.Role](t, plain, "Role", "gantry-system-gantry-fleet") != nil {
		t.Errorf("without a clusters file, the fleet's rules are granted")
	}
}

// TestAgent: the agent runs on GPU nodes only, mounts the kubelet's socket
// read-only and a projected token for audience gantry (and no API token),
// drops every capability, and reaches Gantry at its Service; Gantry accepts
// telemetry from that ServiceAccount only.
func TestAgent(t *testing.T) {
	objs := render(t, "postgres")
	ds := find[appsv1.DaemonSet](t, objs, "DaemonSet", "gantry-agent")
	if ds == nil {
		t.Fatal("no agent DaemonSet")
	}
	p := ds.Spec.Template.Spec
	if p.ServiceAccountName != "gantry-agent" || p.NodeSelector["nvidia.com/gpu.present"] != "true" || *p.AutomountServiceAccountToken || p.HostPID {
		t.Fatalf("service account %q, node selector %v, automount %v, hostPID %v", p.ServiceAccountName, p.NodeSelector, *p.AutomountServiceAccountToken, p.HostPID)
	}
	c := p.Containers[0]
	if *c.SecurityContext.AllowPrivilegeEscalation || !slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("security context: %+v", c.SecurityContext)
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
		if !m.ReadOnly {
			t.Errorf("%s is mounted writable", m.MountPath)
		}
	}
	if !token || !socket {
		t.Errorf("volumes: token %v, socket %v", token, socket)
	}
	for _, e := range c.Env {
		if e.Name == "GANTRY_URL" && e.Value != "http://gantry.gantry-system.svc:8080" {
			t.Errorf("GANTRY_URL %s", e.Value)
		}
	}
	cm := find[corev1.ConfigMap](t, objs, "ConfigMap", "gantry-config")
	if !strings.Contains(cm.Data["gantry.yaml"], `serviceAccount: "system:serviceaccount:gantry-system:gantry-agent"`) {
		t.Errorf("telemetry.serviceAccount is not the agent's:\n%s", cm.Data["gantry.yaml"])
	}
	// A NetworkPolicy narrowed to some peers still lets the agents push.
	var np map[string]any
	for _, o := range render(t, "gitsync") {
		if o.GetKind() == "NetworkPolicy" && o.GetName() == "gantry" {
			np = o.Object
		}
	}
	if peers, _ := yaml.Marshal(np["spec"]); !strings.Contains(string(peers), "component: agent") {
		t.Errorf("the agents are not among the peers of Gantry's NetworkPolicy:\n%s", peers)
	}
	if find[appsv1.DaemonSet](t, render(t, "sqlite"), "DaemonSet", "gantry-agent") != nil {
		t.Error("agent.enabled: false still renders the DaemonSet")
	}
	if ds := find[appsv1.DaemonSet](t, render(t, "gitsync"), "DaemonSet", "gantry-agent"); !ds.Spec.Template.Spec.HostPID {
		t.Error("agent.processAttribution: true does not share the host's PID namespace")
	}
}

// granted reports whether a ClusterRole grants anything on resource.
func granted(cr *rbacv1.ClusterRole, resource string) bool {
	for _, r := range cr.Rules {
		if slices.Contains(r.Resources, resource) {
			return true
		}
	}
	return false
}
