package render_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	psa "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
)

var update = flag.Bool("update", false, "rewrite golden files")

func load(t testing.TB) (*gpu.Catalog, map[string]*template.Template) {
	t.Helper()
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*template.Template{}
	for _, f := range files {
		m[f.Template.Metadata.Name] = f.Template
	}
	return classes, m
}

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGantryTestKeyForGoldenFilesOnly0000000000 alice@laptop"

var meta = render.Meta{WorkloadID: "k7f3x9q2ab", Team: "vision", Owner: "alice@example.com", Namespace: "gantry-vision", TemplateVersion: 3, Kueue: true,
	RunURL: "http://gantry.gantry-system.svc:8080"}

// cases: every starter template with its defaults, plus variants that change what
// is rendered. Every template in templates/ must appear at least once.
var cases = []struct {
	name     string
	template string
	choice   template.Choice
	fleet    bool // in a fleet's manager (Meta.MultiKueue)
}{
	{"pytorch-train", "pytorch-train", template.Choice{}, false},
	{"pytorch-train-h200-2gpu", "pytorch-train", template.Choice{Class: "H200-141GB", Count: 2, Params: map[string]any{"epochs": 3, "script": "runs/llama.py"}}, false},
	{"jupyter-notebook", "jupyter-notebook", template.Choice{}, false},
	{"jupyter-notebook-whole-gpu", "jupyter-notebook", template.Choice{MIGProfile: template.NoMIG, Params: map[string]any{"memory": "64Gi"}}, false},
	{"jupyter-notebook-a100-40", "jupyter-notebook", template.Choice{Class: "A100-40GB", MIGProfile: "2g.10gb"}, false},
	{"vllm-inference", "vllm-inference", template.Choice{}, false},
	{"batch-inference", "batch-inference", template.Choice{Params: map[string]any{"input": "prompts.jsonl"}}, false},
	{"batch-inference-mig", "batch-inference", template.Choice{Class: "H100-80GB", MIGProfile: "3g.40gb", Params: map[string]any{"input": "prompts.jsonl"}}, false},
	{"dev-environment", "dev-environment", template.Choice{}, false},
	{"confidential-inference", "confidential-inference", template.Choice{}, false},
	{"gpu-vm", "gpu-vm", template.Choice{Params: map[string]any{"sshPublicKey": testKey}}, false},
	{"gpu-vm-h100-confidential", "gpu-vm", template.Choice{Class: "H100-80GB", Count: 2, Confidential: true, Params: map[string]any{"sshPublicKey": testKey}}, false},
	{"gpu-vm-fleet", "gpu-vm", template.Choice{Class: "A100-80GB", Count: 2, Params: map[string]any{"sshPublicKey": testKey}}, true},
	{"vllm-inference-confidential-h200", "vllm-inference", template.Choice{Class: "H200-141GB", Confidential: true}, false},
	{"cpu-job", "cpu-job", template.Choice{Params: map[string]any{"cpu": "2"}}, false},
	{"cpu-notebook", "cpu-notebook", template.Choice{}, false},
	{"cpu-train", "cpu-train", template.Choice{Params: map[string]any{"steps": 500}}, false},
	{"cpu-inference", "cpu-inference", template.Choice{}, false},
}

func TestGolden(t *testing.T) {
	classes, templates := load(t)
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tpl := templates[tc.template]
			if tpl == nil {
				t.Fatalf("template %s not in templates/", tc.template)
			}
			covered[tc.template] = true
			r, err := tpl.Resolve(classes, tc.choice)
			if err != nil {
				t.Fatal(err)
			}
			m := metaFor(r)
			m.MultiKueue = tc.fleet
			objs, err := render.Objects(r, m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := render.YAML(objs)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", tc.name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/render -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered objects differ from %s (run with -update if intended):\n%s", path, got)
			}
		})
	}
	for name := range templates {
		if !covered[name] {
			t.Errorf("template %s has no golden case", name)
		}
	}
}

func podOf(t *testing.T, o render.Object) (*metav1.ObjectMeta, *corev1.PodSpec) {
	t.Helper()
	switch x := o.(type) {
	case *batchv1.Job:
		return &x.Spec.Template.ObjectMeta, &x.Spec.Template.Spec
	case *appsv1.Deployment:
		return &x.Spec.Template.ObjectMeta, &x.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &x.Spec.Template.ObjectMeta, &x.Spec.Template.Spec
	}
	return nil, nil
}

// TestRestrictedPodSecurity runs the real Pod Security admission checks
// (k8s.io/pod-security-admission) at level restricted over every rendered pod.
func TestRestrictedPodSecurity(t *testing.T) {
	classes, templates := load(t)
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psa.LevelVersion{Level: psa.LevelRestricted, Version: psa.LatestVersion()}
	for _, tc := range cases {
		r, err := templates[tc.template].Resolve(classes, tc.choice)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := render.Objects(r, metaFor(r))
		if err != nil {
			t.Fatal(err)
		}
		pods := 0
		for _, o := range objs {
			pm, ps := podOf(t, o)
			if ps == nil {
				continue
			}
			pods++
			for _, res := range eval.EvaluatePod(lv, pm, ps) {
				if !res.Allowed {
					t.Errorf("%s: %s: %s", tc.name, res.ForbiddenReason, res.ForbiddenDetail)
				}
			}
		}
		// A VM's pod (virt-launcher) is KubeVirt's, not rendered by Gantry.
		if want := 1; templates[tc.template].Spec.Workload != template.VM && pods != want {
			t.Errorf("%s: %d pod templates, want %d", tc.name, pods, want)
		}
	}
}

func TestGPURequestsAndPlacement(t *testing.T) {
	classes, templates := load(t)
	tests := []struct {
		name, template string
		choice         template.Choice
		resource       string
		count          int64
		products       []string
	}{
		{"whole H100s", "pytorch-train", template.Choice{Count: 4}, "nvidia.com/gpu", 4, []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"}},
		{"default MIG slice", "jupyter-notebook", template.Choice{}, "nvidia.com/mig-1g.10gb", 1, []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"}},
		{"default MIG absent on L4 falls back to whole GPU", "jupyter-notebook", template.Choice{Class: "L4"}, "nvidia.com/gpu", 1, []string{"NVIDIA-L4"}},
		{"explicit MIG", "batch-inference", template.Choice{Class: "H100-80GB", MIGProfile: "7g.80gb", Params: map[string]any{"input": "a.jsonl"}}, "nvidia.com/mig-7g.80gb", 1, []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := templates[tc.template].Resolve(classes, tc.choice)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := render.Objects(r, metaFor(r))
			if err != nil {
				t.Fatal(err)
			}
			var spec *corev1.PodSpec
			for _, o := range objs {
				if _, ps := podOf(t, o); ps != nil {
					spec = ps
				}
			}
			c := spec.Containers[0]
			for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				q := list[corev1.ResourceName(tc.resource)]
				if q.Value() != tc.count {
					t.Errorf("%s = %v, want %d", tc.resource, q.String(), tc.count)
				}
				for name := range list {
					if strings.HasPrefix(string(name), "nvidia.com/") && string(name) != tc.resource {
						t.Errorf("unexpected GPU resource %s", name)
					}
				}
			}
			expr := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]
			if expr.Key != render.LabelGPUProduct || strings.Join(expr.Values, ",") != strings.Join(tc.products, ",") {
				t.Errorf("node affinity %+v, want %s in %v", expr, render.LabelGPUProduct, tc.products)
			}
			if spec.Tolerations[0].Key != "nvidia.com/gpu" {
				t.Errorf("no toleration for the nvidia.com/gpu taint: %+v", spec.Tolerations)
			}
		})
	}
}

func TestJobDeadlineAndLabels(t *testing.T) {
	classes, templates := load(t)
	r, err := templates["pytorch-train"].Resolve(classes, template.Choice{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Objects(r, metaFor(r))
	if err != nil {
		t.Fatal(err)
	}
	job := objs[len(objs)-2].(*batchv1.Job) // then its NetworkPolicy
	if got := *job.Spec.ActiveDeadlineSeconds; got != 72*3600 {
		t.Errorf("activeDeadlineSeconds = %d, want %d", got, 72*3600)
	}
	want := map[string]string{
		"app.kubernetes.io/managed-by": "gantry",
		"app.kubernetes.io/instance":   "pytorch-train-k7f3x9q2ab",
		"gantry.dev/workload-id":       "k7f3x9q2ab",
		"gantry.dev/team":              "vision",
		"gantry.dev/owner":             "alice_example.com",
		"gantry.dev/template":          "pytorch-train",
		"gantry.dev/template-version":  "3",
		"gantry.dev/gpu-class":         "H100-80GB",
		"gantry.dev/cost-center":       "ml-training",
	}
	for k, v := range want {
		if job.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, job.Labels[k], v)
		}
	}
	if job.Annotations["gantry.dev/owner"] != "alice@example.com" || job.Annotations["gantry.dev/template"] != "pytorch-train@3" {
		t.Errorf("annotations %v", job.Annotations)
	}
}

// TestParameterCannotInject: values that look like YAML or JSON stay inside the
// one string field that references them.
func TestParameterCannotInject(t *testing.T) {
	classes, templates := load(t)
	base := render.Meta{WorkloadID: "abcd1234", Team: "vision", Owner: "bob", Namespace: "gantry-vision", TemplateVersion: 1,
		Image: "registry.gantry.internal/vllm/vllm-openai@sha256:" + strings.Repeat("0", 64)}
	clean, err := templates["vllm-inference"].Resolve(classes, template.Choice{})
	if err != nil {
		t.Fatal(err)
	}
	cleanObjs, _ := render.Objects(clean, base)
	evil := "x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: pwned\n"
	// The pattern refuses it at resolution...
	if _, err := templates["vllm-inference"].Resolve(classes, template.Choice{Params: map[string]any{"model": evil}}); err == nil {
		t.Fatal("pattern did not refuse a multi-line value")
	}
	// ...and a template without a pattern keeps it inside one field.
	tpl := *templates["vllm-inference"]
	tpl.Spec.Parameters = append([]template.Parameter(nil), tpl.Spec.Parameters...)
	tpl.Spec.Parameters[0].Pattern = ""
	r, err := tpl.Resolve(classes, template.Choice{Params: map[string]any{"model": evil}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Objects(r, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(cleanObjs) {
		t.Fatalf("%d objects, want %d", len(objs), len(cleanObjs))
	}
	dep := objs[1].(*appsv1.Deployment)
	if got := dep.Spec.Template.Spec.Containers[0].Args[0]; got != evil {
		t.Errorf("args[0] = %q, want the value verbatim", got)
	}
	y, _ := render.YAML(objs)
	if n := strings.Count(string(y), "\n---\n"); n != len(objs)-1 {
		t.Errorf("YAML stream has %d separators, want %d", n, len(objs)-1)
	}
}

func TestInvalidAfterSubstitution(t *testing.T) {
	classes, templates := load(t)
	tpl := *templates["jupyter-notebook"]
	tpl.Spec.Parameters = []template.Parameter{{Name: "memory", Type: template.TypeString, Default: "32Gi"}}
	r, err := tpl.Resolve(classes, template.Choice{Params: map[string]any{"memory": "lots"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = render.Objects(r, metaFor(r))
	if err == nil || !strings.Contains(err.Error(), "spec.resources.memory") || !strings.Contains(err.Error(), `"lots"`) {
		t.Fatalf("err = %v, want a quantity error naming spec.resources.memory", err)
	}
}

func BenchmarkRender(b *testing.B) {
	classes, templates := load(b)
	for _, tc := range cases {
		if tc.choice.Class != "" || tc.choice.MIGProfile != "" || tc.choice.Count != 0 {
			continue
		}
		b.Run(tc.template, func(b *testing.B) {
			r, err := templates[tc.template].Resolve(classes, tc.choice)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := render.Objects(r, metaFor(r)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzRender: whatever a user puts in string parameters, rendering never panics,
// and either fails with a field error or yields the same objects, by kind and name,
// as the defaults do.
func FuzzRender(f *testing.F) {
	classes, templates := load(f)
	tpl := *templates["vllm-inference"]
	tpl.Spec.Parameters = []template.Parameter{
		{Name: "model", Type: template.TypeString, Default: "m"},
		{Name: "maxModelLen", Type: template.TypeString, Default: "8192"},
	}
	tpl.Spec.Resources.Memory = "{{maxModelLen}}"
	base, err := tpl.Resolve(classes, template.Choice{})
	if err != nil {
		f.Fatal(err)
	}
	want, err := render.Objects(base, metaFor(base))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("x\n---\nkind: Secret", "64Gi")
	f.Add(`{"a":1}`, "1e3")
	f.Add("{{gantry.team}}", "-1")
	f.Fuzz(func(t *testing.T, model, mem string) {
		r, err := tpl.Resolve(classes, template.Choice{Params: map[string]any{"model": model, "maxModelLen": mem}})
		if err != nil {
			return
		}
		objs, err := render.Objects(r, metaFor(r))
		if err != nil {
			if !strings.Contains(err.Error(), "spec.resources.memory") {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		if len(objs) != len(want) {
			t.Fatalf("%d objects, want %d", len(objs), len(want))
		}
		for i := range objs {
			if objs[i].GetName() != want[i].GetName() || objs[i].GetObjectKind().GroupVersionKind() != want[i].GetObjectKind().GroupVersionKind() {
				t.Fatalf("object %d changed identity", i)
			}
		}
		if got := objs[1].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args[0]; got != model {
			t.Fatalf("args[0] = %q, want %q", got, model)
		}
	})
}

// BenchmarkRenderBaseline decodes the same objects from their golden YAML into
// typed structs: what reading a static manifest costs, the natural baseline for
// rendering from a template.
func BenchmarkRenderBaseline(b *testing.B) {
	for _, tc := range cases {
		if tc.choice.Class != "" || tc.choice.MIGProfile != "" || tc.choice.Count != 0 {
			continue
		}
		b.Run(tc.template, func(b *testing.B) {
			data, err := os.ReadFile(filepath.Join("testdata", "golden", tc.name+".yaml"))
			if err != nil {
				b.Fatal(err)
			}
			docs := strings.Split(string(data), "\n---\n")
			b.ReportAllocs()
			for b.Loop() {
				for _, d := range docs {
					var meta metav1.TypeMeta
					if err := yaml.Unmarshal([]byte(d), &meta); err != nil {
						b.Fatal(err)
					}
					var obj any
					switch meta.Kind {
					case "Job":
						obj = &batchv1.Job{}
					case "Deployment":
						obj = &appsv1.Deployment{}
					case "StatefulSet":
						obj = &appsv1.StatefulSet{}
					case "Service":
						obj = &corev1.Service{}
					default:
						obj = &corev1.PersistentVolumeClaim{}
					}
					if err := yaml.Unmarshal([]byte(d), obj); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func TestHash(t *testing.T) {
	classes, templates := load(t)
	r, _ := templates["vllm-inference"].Resolve(classes, template.Choice{})
	a, _ := render.Objects(r, metaFor(r))
	b, _ := render.Objects(r, metaFor(r))
	ha, _ := render.Hash(a)
	hb, _ := render.Hash(b)
	if ha != hb || len(ha) != 64 {
		t.Fatalf("same objects, hashes %s and %s", ha, hb)
	}
	r2, _ := templates["vllm-inference"].Resolve(classes, template.Choice{Params: map[string]any{"maxModelLen": 4096}})
	c, _ := render.Objects(r2, metaFor(r2))
	if hc, _ := render.Hash(c); hc == ha {
		t.Fatal("different objects, same hash")
	}
}

func BenchmarkHash(b *testing.B) {
	classes, templates := load(b)
	r, _ := templates["vllm-inference"].Resolve(classes, template.Choice{})
	objs, _ := render.Objects(r, metaFor(r))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := render.Hash(objs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkYAML is the YAML form the CLI prints (and what the hash was computed
// over before it moved to JSON).
func BenchmarkYAML(b *testing.B) {
	classes, templates := load(b)
	r, _ := templates["vllm-inference"].Resolve(classes, template.Choice{})
	objs, _ := render.Objects(r, metaFor(r))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := render.YAML(objs); err != nil {
			b.Fatal(err)
		}
	}
}

// metaFor is meta with the template's image as verification would pin it: a
// stand-in digest derived from the catalog reference.
func metaFor(r *template.Resolved) render.Meta {
	m := meta
	name, _, _ := strings.Cut(r.Template.Spec.Image, ":")
	sum := sha256.Sum256([]byte(r.Template.Spec.Image))
	m.Image = "registry.gantry.internal/catalog/" + name + "@sha256:" + hex.EncodeToString(sum[:])
	if r.Confidential {
		m.TEE = "snp"
		m.InitData, _ = render.InitData("https://kbs.example.com:8080")
	}
	if r.CPUOnly {
		m.CPUNodeLabel = "gantry.dev/cpu-node"
	}
	return m
}

// TestImageRequired: nothing renders without the verified, pinned image.
func TestImageRequired(t *testing.T) {
	classes, templates := load(t)
	r, err := templates["pytorch-train"].Resolve(classes, template.Choice{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := render.Objects(r, meta); err == nil || !strings.Contains(err.Error(), "image: \"\" is not an image reference") {
		t.Fatalf("no image: %v", err)
	}
}

// TestConfidential: a confidential pod runs on its TEE's Kata runtime class,
// on CC-mode nodes, with the passed-through GPU resource and init data naming
// the key broker; without a TEE, on a class without CC, or without init data
// it does not render.
func TestConfidential(t *testing.T) {
	classes, templates := load(t)
	r, err := templates["confidential-inference"].Resolve(classes, template.Choice{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Objects(r, metaFor(r))
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			dep = d
		}
	}
	pod := dep.Spec.Template
	reqs := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions
	if deref(pod.Spec.RuntimeClassName) != "kata-qemu-nvidia-gpu-snp" || reqs[len(reqs)-1].Key != "nvidia.com/cc.mode" ||
		pod.Spec.Containers[0].Resources.Limits.Name("nvidia.com/pgpu", "").Value() != 1 || pod.Labels["gantry.dev/confidential"] != "snp" {
		t.Fatalf("confidential pod: %+v", pod.Spec)
	}
	if _, ok := pod.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; ok {
		t.Error("a confidential pod asks for nvidia.com/gpu besides nvidia.com/pgpu")
	}
	raw, err := base64.StdEncoding.DecodeString(pod.Annotations["io.katacontainers.config.runtime.cc_init_data"])
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(zr)
	if !strings.Contains(string(doc), "url = 'https://kbs.example.com:8080'") || !strings.Contains(string(doc), `"cdh.toml"`) {
		t.Errorf("init data:\n%s", doc)
	}
	for name, edit := range map[string]func(*render.Meta){
		"no TEE":       func(m *render.Meta) { m.TEE = "" },
		"no init data": func(m *render.Meta) { m.InitData = "" },
	} {
		m := metaFor(r)
		edit(&m)
		if _, err := render.Objects(r, m); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
	// Classes without CC, and MIG slices where CC gets whole GPUs.
	if _, err := templates["vllm-inference"].Resolve(classes, template.Choice{Class: "L4", Confidential: true}); err == nil ||
		!strings.Contains(err.Error(), "gpu.class: L4 does not support confidential computing (classes that do: H100-80GB, H200-141GB)") {
		t.Errorf("CC on L4: %v", err)
	}
	if _, err := templates["jupyter-notebook"].Resolve(classes, template.Choice{MIGProfile: "1g.10gb", Confidential: true}); err == nil ||
		!strings.Contains(err.Error(), "gpu.migProfile: 1g.10gb cannot be confidential on H100-80GB") {
		t.Errorf("CC with an explicit MIG profile: %v", err)
	}
	nb, err := templates["jupyter-notebook"].Resolve(classes, template.Choice{Confidential: true})
	if err != nil || nb.MIG != nil {
		t.Errorf("CC with the template's default MIG profile: whole GPUs expected: %+v %v", nb, err)
	}
	if _, err := render.InitData("kbs.example.com"); err == nil {
		t.Error("a KBS URL without a scheme was accepted")
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// TestKueue: with Kueue on, a Job is created suspended in its team's queue
// with its priority; the pods of a service or notebook wait at Kueue's
// admission gate; every queued pod tolerates its class's flavor taint; a VM
// is not queued. With Kueue off, none of it.
func TestKueue(t *testing.T) {
	classes, templates := load(t)
	for _, tc := range []struct{ template, kind string }{
		{"pytorch-train", "Job"}, {"vllm-inference", "Deployment"}, {"jupyter-notebook", "StatefulSet"}, {"gpu-vm", "VirtualMachine"},
	} {
		choice := template.Choice{}
		if tc.kind == "VirtualMachine" {
			choice.Params = map[string]any{"sshPublicKey": testKey}
		}
		r, err := templates[tc.template].Resolve(classes, choice)
		if err != nil {
			t.Fatal(err)
		}
		for _, on := range []bool{true, false} {
			m := metaFor(r)
			m.Kueue = on
			objs, err := render.Objects(r, m)
			if err != nil {
				t.Fatal(err)
			}
			var primary render.Object
			for _, o := range objs {
				if o.GetObjectKind().GroupVersionKind().Kind == tc.kind {
					primary = o
				}
			}
			if primary == nil {
				t.Fatalf("%s: no %s", tc.template, tc.kind)
			}
			queued := on && tc.kind != "VirtualMachine"
			if tc.kind == "VirtualMachine" {
				// Queued by Gantry: halted, with a Kueue Workload asking for
				// its GPUs in its class's flavor; its pods are not Kueue's.
				vm := primary.(*kubevirtv1.VirtualMachine)
				halted := vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == kubevirtv1.RunStrategyHalted
				_, labelled := vm.Labels["kueue.x-k8s.io/queue-name"]
				var wl *unstructured.Unstructured
				for _, o := range objs {
					if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "Workload" {
						wl = u
					}
				}
				if halted != on || labelled != on || (wl != nil) != on {
					t.Errorf("gpu-vm (kueue %v): halted %v, labelled %v, Kueue Workload %v", on, halted, labelled, wl != nil)
				}
				if _, gated := vm.Spec.Template.ObjectMeta.Labels["kueue.x-k8s.io/queue-name"]; gated {
					t.Errorf("gpu-vm: its launcher pod is labelled for Kueue's pod integration")
				}
				if wl != nil {
					sets, _, _ := unstructured.NestedSlice(wl.Object, "spec", "podSets")
					ctr, _, _ := unstructured.NestedSlice(sets[0].(map[string]any), "template", "spec", "containers")
					gpus, _, _ := unstructured.NestedString(ctr[0].(map[string]any), "resources", "requests", "nvidia.com/gpu")
					tol, _, _ := unstructured.NestedSlice(sets[0].(map[string]any), "template", "spec", "tolerations")
					if q, _, _ := unstructured.NestedString(wl.Object, "spec", "queueName"); q != "gantry" || gpus != fmt.Sprint(r.Count) || len(tol) == 0 || wl.GetName() != vm.Name ||
						wl.GetLabels()["gantry.dev/workload-id"] != vm.Labels["gantry.dev/workload-id"] {
						t.Errorf("the VM's Kueue Workload: %v", wl.Object)
					}
				}
				continue
			}
			podMeta, pod := podOf(t, primary)
			tolerates := slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
				return tl.Key == "gantry.dev/gpu-class" && tl.Value == r.Class.Name && tl.Effect == corev1.TaintEffectNoSchedule
			})
			gated := slices.ContainsFunc(pod.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == "kueue.x-k8s.io/admission" })
			if tolerates != queued {
				t.Errorf("%s (kueue %v): tolerates the flavor taint: %v", tc.template, on, tolerates)
			}
			if gated != (queued && tc.kind != "Job") {
				t.Errorf("%s (kueue %v): gated: %v", tc.template, on, gated)
			}
			queueLabel := primary.GetLabels()["kueue.x-k8s.io/queue-name"]
			if tc.kind != "Job" {
				queueLabel = podMeta.Labels["kueue.x-k8s.io/queue-name"]
				if queued && podMeta.Labels["kueue.x-k8s.io/managed"] != "true" {
					t.Errorf("%s: pod not marked as managed by Kueue", tc.template)
				}
			}
			if (queueLabel == "gantry") != queued {
				t.Errorf("%s (kueue %v): queue label %q", tc.template, on, queueLabel)
			}
			if job, ok := primary.(*batchv1.Job); ok {
				if _, ok := podMeta.Labels["kueue.x-k8s.io/queue-name"]; ok {
					t.Errorf("%s: a Job's pods are labelled for a queue (Kueue's pod integration would take them)", tc.template)
				}
				suspended := job.Spec.Suspend != nil && *job.Spec.Suspend
				if suspended != queued || queued && job.Labels["kueue.x-k8s.io/priority-class"] != "gantry-"+strings.TrimPrefix(pod.PriorityClassName, "gantry-") {
					t.Errorf("%s (kueue %v): suspended %v, labels %v", tc.template, on, suspended, job.Labels)
				}
			}
		}
	}
}

// TestMultiKueue: in a MultiKueue manager a queued Job is MultiKueue's
// (spec.managedBy, as Kueue's webhook would set it); unqueued, it is not.
// Either way its pods report their progress (on a worker, with the
// worker's token, which Gantry has the worker review).
func TestMultiKueue(t *testing.T) {
	classes, templates := load(t)
	r, err := templates["pytorch-train"].Resolve(classes, template.Choice{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kueue, multiKueue bool
		want              string
	}{{true, true, render.ManagedByMultiKueue}, {true, false, ""}, {false, true, ""}} {
		m := metaFor(r)
		m.Kueue, m.MultiKueue = tc.kueue, tc.multiKueue
		objs, err := render.Objects(r, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if j, ok := o.(*batchv1.Job); ok {
				got := ""
				if j.Spec.ManagedBy != nil {
					got = *j.Spec.ManagedBy
				}
				if got != tc.want {
					t.Errorf("kueue %v, multiKueue %v: managedBy %q", tc.kueue, tc.multiKueue, got)
				}
				env := map[string]string{}
				for _, e := range j.Spec.Template.Spec.Containers[0].Env {
					env[e.Name] = e.Value
				}
				token := slices.ContainsFunc(j.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "gantry-run" && v.Projected != nil })
				if env["GANTRY_RUN_URL"] != m.RunURL+"/api/v1/workloads/"+m.WorkloadID+"/progress" || env["GANTRY_RUN_TOKEN_FILE"] != render.RunTokenFile || !token {
					t.Errorf("kueue %v, multiKueue %v: reports to %q with %q (token volume %v)", tc.kueue, tc.multiKueue, env["GANTRY_RUN_URL"], env["GANTRY_RUN_TOKEN_FILE"], token)
				}
			}
		}
	}
}

// TestFleetVM: in a fleet's manager a VM is a FleetVM holding the very VM
// (halted, in its team's queue) that a cluster of its own would get,
// handed to MultiKueue and naming its Kueue Workload, which asks for the
// same GPUs and names the VM's disk image.
func TestFleetVM(t *testing.T) {
	classes, templates := load(t)
	r, err := templates["gpu-vm"].Resolve(classes, template.Choice{Class: "A100-80GB", Count: 2, Params: map[string]any{"sshPublicKey": testKey}})
	if err != nil {
		t.Fatal(err)
	}
	m := metaFor(r)
	alone, err := render.Objects(r, m)
	if err != nil {
		t.Fatal(err)
	}
	m.MultiKueue = true
	inFleet, err := render.Objects(r, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(alone) != 2 || len(inFleet) != 2 {
		t.Fatalf("objects: %d alone, %d in a fleet", len(alone), len(inFleet))
	}
	vm, err := runtime.DefaultUnstructuredConverter.ToUnstructured(alone[0])
	if err != nil {
		t.Fatal(err)
	}
	fvm, ok := inFleet[0].(*unstructured.Unstructured)
	if !ok || fvm.GetKind() != render.FleetVMKind || !render.IsPrimary(fvm.GetKind()) || !render.CreatedOnce(fvm.GetKind()) {
		t.Fatalf("the primary object in a fleet: %T %v", inFleet[0], inFleet[0].GetObjectKind().GroupVersionKind())
	}
	if by, _, _ := unstructured.NestedString(fvm.Object, "spec", "managedBy"); by != render.ManagedByMultiKueue {
		t.Errorf("managedBy %q", by)
	}
	if fvm.GetName() != alone[0].GetName() || fvm.GetLabels()[render.LabelPrebuiltWorkload] != inFleet[1].GetName() || inFleet[1].GetName() != fvm.GetName() {
		t.Errorf("names: FleetVM %s (its Workload %q), Workload %s, VM alone %s", fvm.GetName(), fvm.GetLabels()[render.LabelPrebuiltWorkload], inFleet[1].GetName(), alone[0].GetName())
	}
	tmplSpec, _, _ := unstructured.NestedMap(fvm.Object, "spec", "template", "spec")
	vmSpec, _, _ := unstructured.NestedMap(vm, "spec")
	if !reflect.DeepEqual(tmplSpec, vmSpec) {
		t.Errorf("the FleetVM's template differs from the VM:\n%v\n%v", tmplSpec, vmSpec)
	}
	if rs, _ := tmplSpec["runStrategy"].(string); rs != "Halted" {
		t.Errorf("runStrategy %q: a VM waits halted until Kueue admits it", rs)
	}
	labels, _, _ := unstructured.NestedStringMap(fvm.Object, "spec", "template", "metadata", "labels")
	if !maps.Equal(labels, alone[0].GetLabels()) {
		t.Errorf("the template's labels %v, the VM's %v", labels, alone[0].GetLabels())
	}
	wlAlone, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(alone[1])
	wlFleet, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(inFleet[1])
	if !reflect.DeepEqual(wlAlone, wlFleet) {
		t.Errorf("the Kueue Workload differs in a fleet:\n%v\n%v", wlFleet, wlAlone)
	}
	if img, _, _ := unstructured.NestedSlice(wlFleet, "spec", "podSets"); len(img) != 1 || !strings.Contains(fmt.Sprint(img), m.Image) {
		t.Errorf("the Workload's pod set does not name the disk image %s: %v", m.Image, img)
	}
}

// TestTracking: a job with a tracker gets its address, its project and a
// run id that is the workload's own — the same on every render of it, so
// a restart or a requeue logs to the same tracker run — and the team's
// credentials Secret as optional variables, never its values.
func TestTracking(t *testing.T) {
	classes, templates := load(t)
	for _, tc := range []struct {
		name     string
		tracking *template.Tracking
		want     map[string]string
		secret   string
	}{
		{"mlflow", &template.Tracking{MLflow: &template.MLflow{URI: "https://mlflow.example", Credentials: "mlflow-token"}},
			map[string]string{"MLFLOW_TRACKING_URI": "https://mlflow.example", "MLFLOW_EXPERIMENT_NAME": "pytorch-train", "MLFLOW_RUN_NAME": "gantry-wk000001",
				"GANTRY_TRACKING_RUN_ID": "gantry-wk000001"}, "mlflow-token"},
		{"wandb", &template.Tracking{WandB: &template.WandB{Project: "llm", Entity: "vision", Credentials: "wandb-key"}},
			map[string]string{"WANDB_PROJECT": "llm", "WANDB_ENTITY": "vision", "WANDB_RUN_ID": "gantry-wk000001", "WANDB_RESUME": "allow", "GANTRY_TRACKING_RUN_ID": "gantry-wk000001"}, "wandb-key"},
		{"wandb without credentials", &template.Tracking{WandB: &template.WandB{Project: "llm"}},
			map[string]string{"WANDB_PROJECT": "llm", "WANDB_RUN_ID": "gantry-wk000001"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl := *templates["pytorch-train"]
			tpl.Spec.Tracking = tc.tracking
			if err := tpl.Validate(classes); err != nil {
				t.Fatalf("the template: %v", err)
			}
			r, err := tpl.Resolve(classes, template.Choice{})
			if err != nil {
				t.Fatal(err)
			}
			m := metaFor(r)
			m.WorkloadID = "wk000001"
			for range 2 { // every render the same
				objs, err := render.Objects(r, m)
				if err != nil {
					t.Fatal(err)
				}
				var c corev1.Container
				for _, o := range objs {
					if j, ok := o.(*batchv1.Job); ok {
						c = j.Spec.Template.Spec.Containers[0]
					}
				}
				env := map[string]string{}
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
				for k, v := range tc.want {
					if env[k] != v {
						t.Errorf("%s=%q, want %q", k, env[k], v)
					}
				}
				switch {
				case tc.secret == "" && len(c.EnvFrom) != 0:
					t.Errorf("envFrom %+v without credentials", c.EnvFrom)
				case tc.secret != "" && (len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != tc.secret ||
					c.EnvFrom[0].SecretRef.Optional == nil || !*c.EnvFrom[0].SecretRef.Optional):
					t.Errorf("envFrom %+v, want the optional Secret %s", c.EnvFrom, tc.secret)
				}
			}
		})
	}
}

// TestEnvReservedAndOnce: a template saved before validation refused them —
// an NVIDIA_ variable (which would show the pod every GPU of its node) and
// a tracker's variable set twice — renders without the first and with each
// name once, the tracker's value winning (an apply refuses a repeated
// name). Validation refuses both.
func TestEnvReservedAndOnce(t *testing.T) {
	classes, templates := load(t)
	tpl := *templates["pytorch-train"]
	tpl.Spec.Tracking = &template.Tracking{MLflow: &template.MLflow{URI: "https://mlflow.example"}}
	tpl.Spec.Env = append(slices.Clone(tpl.Spec.Env), template.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"},
		template.EnvVar{Name: "MLFLOW_TRACKING_URI", Value: "https://elsewhere.example"})
	err := tpl.Validate(classes)
	for _, want := range []string{"spec.env[" + strconv.Itoa(len(tpl.Spec.Env)-2) + "].name: NVIDIA_VISIBLE_DEVICES is reserved",
		"spec.env[" + strconv.Itoa(len(tpl.Spec.Env)-1) + "].name: MLFLOW_TRACKING_URI is set by spec.tracking.mlflow"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validation: %v, want %q", err, want)
		}
	}
	// A tracker field left empty sets no variable: the template may (a
	// self-hosted W&B's address); one the tracker sets it may not.
	wb := *templates["pytorch-train"]
	wb.Spec.Tracking = &template.Tracking{WandB: &template.WandB{Project: "llm"}}
	wb.Spec.Env = append(slices.Clone(wb.Spec.Env), template.EnvVar{Name: "WANDB_BASE_URL", Value: "https://wandb.internal"}, template.EnvVar{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "compute,video"})
	if err := wb.Validate(classes); err != nil {
		t.Errorf("WANDB_BASE_URL without the tracker's baseURL, NVIDIA_DRIVER_CAPABILITIES: %v", err)
	}
	wb.Spec.Env = append(wb.Spec.Env, template.EnvVar{Name: "WANDB_PROJECT", Value: "other"})
	if err := wb.Validate(classes); err == nil || !strings.Contains(err.Error(), "WANDB_PROJECT is set by spec.tracking.wandb") {
		t.Errorf("WANDB_PROJECT beside the tracker's project: %v", err)
	}
	r, err := tpl.Resolve(classes, template.Choice{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Objects(r, metaFor(r))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		j, ok := o.(*batchv1.Job)
		if !ok {
			continue
		}
		seen := map[string]string{}
		for _, e := range j.Spec.Template.Spec.Containers[0].Env {
			if _, twice := seen[e.Name]; twice {
				t.Errorf("%s twice", e.Name)
			}
			seen[e.Name] = e.Value
		}
		if v, ok := seen["NVIDIA_VISIBLE_DEVICES"]; ok {
			t.Errorf("NVIDIA_VISIBLE_DEVICES=%q reached the pod", v)
		}
		if v := seen["MLFLOW_TRACKING_URI"]; v != "https://mlflow.example" {
			t.Errorf("MLFLOW_TRACKING_URI=%q, want the tracker's", v)
		}
	}
}
