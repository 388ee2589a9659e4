package template_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/template"
)

func classes(t testing.TB) *gpu.Catalog {
	t.Helper()
	c, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const valid = `apiVersion: gantry.dev/v1alpha1
kind: Template
metadata:
  name: tiny
  title: Tiny job
spec:
  workload: job
  image: tiny:1
  gpu:
    classes: [H100-80GB, L4]
    defaultClass: L4
    migProfiles: [1g.10gb]
    count: {min: 1, max: 2, default: 1}
  resources: {cpu: "1", memory: 1Gi}
  args: ["{{n}}"]
  parameters:
    - {name: n, type: int, default: 3, min: 1, max: 5}
`

func TestStarterCatalogIsValid(t *testing.T) {
	files, err := template.LoadDir("../../templates", classes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("%d starter templates, want at least 5", len(files))
	}
	kinds := map[string]bool{}
	for _, f := range files {
		kinds[f.Template.Spec.Workload] = true
	}
	for _, k := range []string{"job", "service", "notebook"} {
		if !kinds[k] {
			t.Errorf("no starter template of kind %s", k)
		}
	}
}

// TestParseErrors: each broken document reports the listed problems, each with
// its line and field path, all at once.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(string) string
		want []string // "line: path: message fragment"
	}{
		{"unknown field", func(s string) string {
			return strings.Replace(s, "  workload: job\n", "  workload: job\n  replicas: 3\n", 1)
		},
			[]string{`8: spec.replicas: unknown field "replicas"`}},
		{"wrong types, all reported", func(s string) string {
			s = strings.Replace(s, "max: 2,", "max: two,", 1)
			return strings.Replace(s, "  workload: job\n", "  workload: [job]\n", 1)
		}, []string{"7: spec.workload: expected a string, got a list", "13: spec.gpu.count.max: expected an integer, got a string"}},
		{"unknown class and MIG profile name allowed values", func(s string) string {
			s = strings.Replace(s, "[H100-80GB, L4]", "[H100-80GB, V100]", 1)
			return strings.Replace(s, "[1g.10gb]", "[1g.10gb, 3g.99gb]", 1)
		}, []string{`10: spec.gpu.classes[1]: unknown GPU class "V100" (known: A100-40GB, A100-80GB, H100-80GB, H200-141GB, L4)`,
			`12: spec.gpu.migProfiles[1]: MIG profile "3g.99gb" is not supported`,
			`11: spec.gpu.defaultClass: "L4" is not one of the allowed classes H100-80GB, V100`}},
		{"count bounds", func(s string) string { return strings.Replace(s, "default: 1}", "default: 9}", 1) },
			[]string{"13: spec.gpu.count.default: must be between min (1) and max (2)"}},
		{"bad name and reference", func(s string) string {
			s = strings.Replace(s, "name: tiny", "name: ../etc/passwd", 1)
			return strings.Replace(s, `"{{n}}"`, `"{{m}}"`, 1)
		}, []string{"4: metadata.name:", `15: spec.args[0]: references unknown parameter "m"`}},
		{"bad default", func(s string) string { return strings.Replace(s, "default: 3,", "default: 9,", 1) },
			[]string{"17: spec.parameters[0].default: 9 is more than the maximum 5"}},
		{"quantity", func(s string) string { return strings.Replace(s, "memory: 1Gi", "memory: lots", 1) },
			[]string{`14: spec.resources.memory: "lots" is not a positive quantity`}},
		{"CPU-only bounds that are not quantities, and defaults over them", func(s string) string {
			return strings.Replace(s, "  resources: {cpu: \"1\", memory: 1Gi}\n", "  resources: {cpu: \"1\", memory: 1Gi}\n  cpuOnly: {maxCPU: many, maxMemory: 512Mi}\n", 1)
		}, []string{`spec.cpuOnly.maxCPU: "many" is not a positive quantity`}},
		{"CPU-only defaults over the bounds", func(s string) string {
			return strings.Replace(s, "  resources: {cpu: \"1\", memory: 1Gi}\n", "  resources: {cpu: \"1\", memory: 1Gi}\n  cpuOnly: {maxCPU: \"1\", maxMemory: 512Mi}\n", 1)
		}, []string{`cpuOnly: memory 1Gi is over template "tiny"'s CPU-only bound 512Mi`}},
		{"a CPU-only template with GPU settings", func(s string) string {
			s = strings.Replace(s, "    classes: [H100-80GB, L4]\n", "", 1)
			return strings.Replace(s, "  resources: {cpu: \"1\", memory: 1Gi}\n", "  resources: {cpu: \"1\", memory: 1Gi}\n  cpuOnly: {maxCPU: \"1\", maxMemory: 1Gi}\n", 1)
		}, []string{`spec.gpu: a CPU-only template (no GPU classes) takes no GPU settings`}},
		{"duplicate key", func(s string) string {
			return strings.Replace(s, "  title: Tiny job\n", "  title: Tiny job\n  title: again\n", 1)
		},
			[]string{"6: metadata.title: duplicate key (first at line 5)"}},
		{"syntax", func(s string) string { return strings.Replace(s, "kind: Template", "kind: [Template", 1) },
			[]string{"malformed YAML"}},
		{"volume mounts that hide the image or the service-account token", func(s string) string {
			return strings.Replace(s, "  args:", `  volumes:
    - {name: a, mountPath: /, size: 1Gi}
    - {name: b, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, size: 1Gi}
    - {name: c, mountPath: /var/run, size: 1Gi}
    - {name: d, mountPath: /run/secrets/kubernetes.io/serviceaccount/x, size: 1Gi}
    - {name: e, mountPath: /data/../etc, size: 1Gi}
    - {name: f, mountPath: /dev/shm, size: 1Gi}
    - {name: g, mountPath: /data/, size: 1Gi}
    - {name: h, mountPath: /data, size: 1Gi}
  args:`, 1)
		}, []string{
			`16: spec.volumes[0].mountPath: "/" would hide the image's whole filesystem`,
			`17: spec.volumes[1].mountPath: "/var/run/secrets/kubernetes.io/serviceaccount" overlaps /var/run/secrets/kubernetes.io/serviceaccount`,
			`18: spec.volumes[2].mountPath: "/var/run" overlaps /var/run/secrets/kubernetes.io/serviceaccount`,
			`19: spec.volumes[3].mountPath: "/run/secrets/kubernetes.io/serviceaccount/x" overlaps /run/secrets/kubernetes.io/serviceaccount`,
			`20: spec.volumes[4].mountPath: "/data/../etc" must be a clean absolute path`,
			`21: spec.volumes[5].mountPath: "/dev/shm" overlaps /dev`,
			`22: spec.volumes[6].mountPath: "/data/" must be a clean absolute path`,
		}},
		{"a volume over the run's token", func(s string) string {
			return strings.Replace(s, "  args:", "  volumes:\n    - {name: a, mountPath: /var/run/gantry/run, size: 1Gi}\n  args:", 1)
		}, []string{`spec.volumes[0].mountPath: "/var/run/gantry/run" overlaps /var/run/gantry`}},
		{"checkpoints on no volume, outside it", func(s string) string {
			return strings.Replace(s, "  args:", "  volumes:\n    - {name: data, mountPath: /data, size: 1Gi}\n  checkpoints: {volume: other, path: ../etc}\n  args:", 1)
		}, []string{`spec.checkpoints.volume: "other" is not one of spec.volumes`, `spec.checkpoints.path: "../etc" must be a clean relative path`}},
		{"early stopping with a bad action, an empty rule, two kinds in one and bad numbers", func(s string) string {
			return strings.Replace(s, "  args:", `  earlyStopping:
    action: halt
    rules:
      - {}
      - {plateau: {metric: val loss, reports: 1, delta: -1}, costCap: 5}
      - {target: {metric: acc, mode: up, value: 1}}
  args:`, 1)
		}, []string{
			`spec.earlyStopping.action: "halt": want stop or advise`,
			`spec.earlyStopping.rules[0]: want exactly one of plateau, target, costCap, maxSteps, median and deadline`,
			`spec.earlyStopping.rules[1].plateau.metric: "val loss"`,
			`spec.earlyStopping.rules[1].plateau.reports: 1: want 2 to 1000 reports`,
			`spec.earlyStopping.rules[1].plateau.delta: -1: want 0 or more`,
			`spec.earlyStopping.rules[1]: want exactly one of plateau, target, costCap, maxSteps, median and deadline`,
			`spec.earlyStopping.rules[2].target.mode: "up": want min (lower is better) or max`,
		}},
		{"trackers: two at once, bad addresses and names", func(s string) string {
			return strings.Replace(s, "  args:", `  tracking:
    mlflow: {uri: "ftp://mlflow", experiment: " x", credentials: Not_A_Name}
    wandb: {project: "", baseURL: "https://user:pw@wandb.example"}
  args:`, 1)
		}, []string{
			`spec.tracking: want exactly one of mlflow and wandb`,
			`spec.tracking.mlflow.uri: "ftp://mlflow": want an http or https address without credentials, query or fragment`,
			`spec.tracking.mlflow.experiment: " x": want a letter or digit`,
			`spec.tracking.mlflow.credentials: "Not_A_Name" is not a Secret's name`,
			`spec.tracking.wandb.project: "": want a letter or digit`,
			`spec.tracking.wandb.baseURL: "https://user:pw@wandb.example": want an http or https address without credentials`,
		}},
		{"a tracker's credentials over plain http", func(s string) string {
			return strings.Replace(s, "  args:", "  tracking:\n    mlflow: {uri: \"http://mlflow.internal:5000\", credentials: mlflow-token}\n  args:", 1)
		}, []string{`spec.tracking.mlflow.uri: "http://mlflow.internal:5000": with credentials, want an https address`}},
		{"median and deadline rules with bad numbers", func(s string) string {
			return strings.Replace(s, "  args:", `  earlyStopping:
    action: stop
    rules:
      - {median: {metric: loss, mode: down, graceSteps: -1, minRuns: 40}}
      - {deadline: {within: 30s, graceReports: 1}}
      - {deadline: {within: soon}}
  args:`, 1)
		}, []string{
			`spec.earlyStopping.rules[0].median.mode: "down": want min (lower is better) or max`,
			`spec.earlyStopping.rules[0].median.graceSteps: -1: want 0 or more steps`,
			`spec.earlyStopping.rules[0].median.minRuns: 40: want 1 to 20 earlier runs (default 3)`,
			`spec.earlyStopping.rules[1].deadline.within: "30s" must be a duration of at least 1m, such as 8h`,
			`spec.earlyStopping.rules[1].deadline.graceReports: 1: want 2 to 1000 reports (default 5)`,
			`spec.earlyStopping.rules[2].deadline.within: "soon" must be a duration of at least 1m`,
		}},
		{"an idle timeout maximum needs an idle timeout no longer than it", func(s string) string {
			return strings.Replace(s, "  args:", "  lifecycle: {idleTimeoutMax: 1h}\n  args:", 1)
		}, []string{"spec.lifecycle.idleTimeoutMax: needs spec.lifecycle.idleTimeout, and must not be shorter than it"}},
		{"an idle timeout maximum shorter than the timeout", func(s string) string {
			return strings.Replace(s, "  args:", "  lifecycle: {idleTimeout: 2h, idleTimeoutMax: 1h}\n  args:", 1)
		}, []string{"spec.lifecycle.idleTimeoutMax: needs spec.lifecycle.idleTimeout"}},
		{"spot requeues without spot", func(s string) string {
			return strings.Replace(s, "  args:", "  scheduling: {spotRequeues: 5}\n  args:", 1)
		}, []string{"spec.scheduling.spotRequeues: applies to jobs with spot: true"}},
		{"flexible with bad durations", func(s string) string {
			return strings.Replace(s, "  args:", "  lifecycle: {maxRuntime: 2h}\n  scheduling: {flexible: {maxDelay: 200h, expectedRuntime: 3h}}\n  args:", 1)
		}, []string{
			`spec.scheduling.flexible.maxDelay: "200h" must be a duration from 1m to 168h`,
			"spec.scheduling.flexible.expectedRuntime: 3h is longer than spec.lifecycle.maxRuntime (2h)",
		}},
		{"flexible for a notebook", func(s string) string {
			return strings.Replace(strings.Replace(s, "workload: job", "workload: notebook", 1), "  args:", "  scheduling: {flexible: {maxDelay: 8h}}\n  args:", 1)
		}, []string{"spec.ports: a notebook needs at least one port", "spec.interactive: a notebook is opened", "spec.scheduling.flexible: applies to jobs only"}},
		{"a pattern that does not compile, reported once", func(s string) string {
			return s + "    - {name: s, type: string, default: abc, pattern: '[a-z'}\n"
		}, []string{"18: spec.parameters[1].pattern: invalid regular expression"}},
		{"anchors refused", func(s string) string {
			return strings.Replace(strings.Replace(s, "resources: {", "resources: &r {", 1), "  args:", "  ports: *r\n  args:", 1)
		}, []string{"14: spec.resources: YAML anchors and aliases are not supported", "15: spec.ports: YAML anchors and aliases are not supported"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := template.Parse("t.yaml", []byte(tc.edit(valid)), classes(t), nil)
			var inv *fault.Invalid
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v, want *fault.Invalid", err)
			}
			got := make([]string, len(inv.Fields))
			for i, f := range inv.Fields {
				got[i] = f.String()
				if f.File != "t.yaml" {
					t.Errorf("problem %q has no file", got[i])
				}
			}
			all := strings.Join(got, "\n")
			if len(got) != len(tc.want) && !strings.Contains(tc.name, "all reported") {
				t.Errorf("%d problems, want %d (each reported once):\n%s", len(got), len(tc.want), all)
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("missing %q in:\n%s", w, all)
				}
			}
		})
	}
	if _, err := template.Parse("t.yaml", []byte(valid), classes(t), nil); err != nil {
		t.Fatalf("valid template: %v", err)
	}
}

func TestResolve(t *testing.T) {
	tpl, err := template.Parse("t.yaml", []byte(valid), classes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		choice  template.Choice
		wantErr []string
		check   func(*template.Resolved) string
	}{
		{"defaults", template.Choice{}, nil, func(r *template.Resolved) string {
			if r.Class.Name != "L4" || r.MIG != nil || r.Count != 1 || r.Params["n"] != "3" {
				return "defaults not applied"
			}
			return ""
		}},
		{"MIG on H100", template.Choice{Class: "H100-80GB", MIGProfile: "1g.10gb", Params: map[string]any{"n": float64(5)}}, nil, func(r *template.Resolved) string {
			if r.MIG == nil || r.MIG.Resource() != "nvidia.com/mig-1g.10gb" || r.Params["n"] != "5" {
				return "MIG not resolved"
			}
			return ""
		}},
		{"string int from a command line", template.Choice{Params: map[string]any{"n": "4"}}, nil, nil},
		{"MIG on L4", template.Choice{MIGProfile: "1g.10gb"}, []string{`gpu.migProfile: template "tiny" allows no MIG profile on L4`}, nil},
		{"MIG not allowed", template.Choice{Class: "H100-80GB", MIGProfile: "3g.40gb"}, []string{`gpu.migProfile: "3g.40gb" is not allowed on H100-80GB by template "tiny" (allowed: 1g.10gb)`}, nil},
		{"too many GPUs", template.Choice{Count: 8}, []string{`gpu.count: 8 is outside the range 1 to 2`}, nil},
		{"class not allowed", template.Choice{Class: "A100-40GB"}, []string{`gpu.class: "A100-40GB" is not allowed by template "tiny" (allowed: H100-80GB, L4)`}, nil},
		{"everything wrong at once", template.Choice{Count: 3, Params: map[string]any{"n": 1.5, "x": 1}},
			[]string{"gpu.count", "parameters.n: 1.5 is not an integer", `parameters.x: template "tiny" has no parameter "x" (has: n)`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tpl.Resolve(classes(t), tc.choice)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if tc.check != nil {
					if msg := tc.check(r); msg != "" {
						t.Error(msg)
					}
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestDigestIgnoresFormatting(t *testing.T) {
	a, err := template.Parse("a.yaml", []byte(valid), classes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := template.Parse("b.yaml", []byte("# comment\n"+strings.ReplaceAll(valid, "{cpu: \"1\", memory: 1Gi}", "\n    cpu: \"1\"\n    memory: 1Gi")), classes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() {
		t.Error("same template, different digests")
	}
	c, _ := template.Parse("c.yaml", []byte(strings.Replace(valid, "Tiny job", "Tiny job!", 1)), classes(t), nil)
	if a.Digest() == c.Digest() {
		t.Error("different templates, same digest")
	}
}

// FuzzParse: no input makes the parser panic, every problem has a message and a
// file, and whatever parses also validates and resolves with its defaults.
func FuzzParse(f *testing.F) {
	entries, _ := os.ReadDir("../../templates")
	for _, e := range entries {
		if b, err := os.ReadFile("../../templates/" + e.Name()); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(valid))
	f.Add([]byte(`{"apiVersion":"gantry.dev/v1alpha1","kind":"Template","metadata":{"name":"x"}}`))
	cat := classes(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		tpl, err := template.Parse("f.yaml", data, cat, nil)
		if err != nil {
			var inv *fault.Invalid
			if !errors.As(err, &inv) || len(inv.Fields) == 0 {
				t.Fatalf("error %v is not a field list", err)
			}
			for _, fl := range inv.Fields {
				if fl.Message == "" || fl.File != "f.yaml" {
					t.Fatalf("problem without message or file: %+v", fl)
				}
			}
			return
		}
		if err := tpl.Validate(cat); err != nil {
			t.Fatalf("parsed template fails validation: %v", err)
		}
	})
}

// TestCPUOnly: a template's CPU-only choice — asked for, or the default of
// a template without GPU classes — has no GPU, the CPU class's name, and
// the template's resources within its bounds; what cannot be CPU-only says
// where and why.
func TestCPUOnly(t *testing.T) {
	both := strings.Replace(valid, "  resources: {cpu: \"1\", memory: 1Gi}\n",
		"  resources: {cpu: \"{{cores}}\", memory: 1Gi}\n  cpuOnly: {maxCPU: \"4\", maxMemory: 8Gi}\n", 1) +
		"    - {name: cores, type: int, default: 2, min: 1, max: 8}\n"
	tpl, err := template.Parse("t.yaml", []byte(both), classes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	gpuOnly, err := template.Parse("t.yaml", []byte(valid), classes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	cpuTemplate := strings.Replace(valid, `  gpu:
    classes: [H100-80GB, L4]
    defaultClass: L4
    migProfiles: [1g.10gb]
    count: {min: 1, max: 2, default: 1}
`, "  cpuOnly: {maxCPU: \"2\", maxMemory: 4Gi}\n", 1)
	cpuOnly, err := template.Parse("t.yaml", []byte(cpuTemplate), classes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		tpl     *template.Template
		choice  template.Choice
		cpu     bool
		cores   float64
		wantErr string
	}{
		{"GPU by default", tpl, template.Choice{}, false, 2, ""},
		{"CPU-only asked for", tpl, template.Choice{CPUOnly: true}, true, 2, ""},
		{"CPU-only with more cores", tpl, template.Choice{CPUOnly: true, Params: map[string]any{"cores": 4}}, true, 4, ""},
		{"over the CPU bound", tpl, template.Choice{CPUOnly: true, Params: map[string]any{"cores": 6}}, true, 0, `cpuOnly: CPU 6 is over template "tiny"'s CPU-only bound 4`},
		{"over the bound is fine on a GPU", tpl, template.Choice{Params: map[string]any{"cores": 6}}, false, 6, ""},
		{"CPU-only with a GPU", tpl, template.Choice{CPUOnly: true, Class: "L4"}, true, 0, "gpu: a CPU-only launch takes no GPU"},
		{"not offered", gpuOnly, template.Choice{CPUOnly: true}, true, 0, `cpuOnly: template "tiny" offers no CPU-only choice (it runs on H100-80GB, L4)`},
		{"CPU-only template by default", cpuOnly, template.Choice{}, true, 1, ""},
		{"CPU-only template given a class", cpuOnly, template.Choice{Class: "L4"}, false, 0, `gpu: template "tiny" runs without a GPU (CPU-only): leave gpu out`},
		{"confidential", tpl, template.Choice{CPUOnly: true, Confidential: true}, true, 0, "confidential: confidential launches run on confidential GPUs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.tpl.Resolve(classes(t), tc.choice)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.CPUOnly != tc.cpu || r.CPUCores() != tc.cores || (tc.cpu && (r.Class.Name != gpu.CPUClass || r.Count != 0 || r.MIG != nil)) {
				t.Errorf("CPU-only %v, cores %v, class %q, count %d; want CPU-only %v, cores %v", r.CPUOnly, r.CPUCores(), r.Class.Name, r.Count, tc.cpu, tc.cores)
			}
		})
	}
}

// images stands in for the image catalog: each image's GPU classes.
type images map[string][]string

func (i images) Describe(ref string) ([]string, string, error) {
	c, ok := i[ref]
	if !ok {
		return nil, "", errors.New("not in the catalog")
	}
	return c, "", nil
}

// TestCPUOnlyImage: a template that offers a CPU-only choice runs an image
// that says it runs without a GPU (CPU among its classes).
func TestCPUOnlyImage(t *testing.T) {
	doc := strings.Replace(valid, "  resources: {cpu: \"1\", memory: 1Gi}\n", "  resources: {cpu: \"1\", memory: 1Gi}\n  cpuOnly: {maxCPU: \"2\", maxMemory: 2Gi}\n", 1)
	if _, err := template.Parse("t.yaml", []byte(doc), classes(t), images{"tiny:1": {"H100-80GB", "L4", "CPU"}}); err != nil {
		t.Fatalf("an image that runs without a GPU: %v", err)
	}
	_, err := template.Parse("t.yaml", []byte(doc), classes(t), images{"tiny:1": {"H100-80GB", "L4"}})
	if err == nil || !strings.Contains(err.Error(), "spec.cpuOnly: image tiny:1 does not run without a GPU") {
		t.Fatalf("a GPU-only image: %v", err)
	}
}
