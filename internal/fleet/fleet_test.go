package fleet

import (
	"os"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/gpu"
)

func classes(t testing.TB) *gpu.Catalog {
	t.Helper()
	c, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestShippedFile(t *testing.T) {
	f, err := LoadFile("../../templates/clusters.yaml", classes(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.ClassNames(); strings.Join(got, ",") != "A100-80GB,H100-80GB" {
		t.Errorf("classes %v", got)
	}
	if r := f.TeamRules("vision"); r.Require["residency"] != "onprem" {
		t.Errorf("vision's rules %+v", r)
	}
}

// TestCPUOnly: a cluster may offer CPU nodes alone; CPU-only launches go
// there, and nowhere without a cpu section in the GPU classes.
func TestCPUOnly(t *testing.T) {
	f, err := Parse("x.yaml", []byte(`apiVersion: gantry.dev/v1alpha1
kind: ClusterList
clusters:
  - {name: cpus, region: r, provider: on-premises, kubeconfig: {file: k}, offers: [], cpu: {purchase: reserved, pricePerCoreHour: 0.01, cores: 128}, caps: {nlp: {CPU: 8}}}
`), classes(t))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := f.Get("cpus")
	if c.CPU == nil || c.CPU.Cores != 128 || c.CPU.PricePerCoreHour != 0.01 || c.CPU.Purchase != "reserved" {
		t.Fatalf("cpu read as %+v", c.CPU)
	}
	if d := f.Place(Launch{Team: "vision", Class: gpu.CPUClass, Cores: 2}, map[string]State{"cpus": up(map[string]float64{gpu.CPUClass: 100})}); d.Cluster() != "cpus" ||
		d.Reason != "placed on cpus: $0.01/core-h (reserved); 100 cores free" || d.Candidates[0].PricePerHour != 0.02 {
		t.Errorf("%s: %s (%+v)", d.Cluster(), d.Reason, d.Candidates)
	}
	if d := f.Place(Launch{Team: "vision", Class: "A100-80GB", GPUs: 1}, map[string]State{"cpus": up(nil)}); d.Cluster() != "" || d.Refused[0].Why != "offers no A100-80GB" {
		t.Errorf("a GPU launch on CPU nodes alone: %s %+v", d.Cluster(), d.Refused)
	}
	noCPU, err := gpu.Parse("g.yaml", []byte("apiVersion: gantry.dev/v1alpha1\nkind: GPUClassList\nclasses:\n  - {name: L4, products: [NVIDIA-L4], memoryGiB: 24, price: {onDemand: 0.75}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("x.yaml", []byte(`apiVersion: gantry.dev/v1alpha1
kind: ClusterList
clusters:
  - {name: cpus, region: r, provider: on-premises, kubeconfig: {file: k}, offers: [], cpu: {purchase: reserved, pricePerCoreHour: 0.01}}
`), noCPU); err == nil || !strings.Contains(err.Error(), "x.yaml:4: clusters[0].cpu: the GPU classes have no cpu section") {
		t.Errorf("cpu without the classes' cpu section: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	head := "apiVersion: gantry.dev/v1alpha1\nkind: ClusterList\nclusters:\n"
	for _, c := range []struct{ name, body, want string }{
		{"provider", "  - {name: a, region: r, provider: moon, kubeconfig: {file: k}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `x.yaml:4: clusters[0].provider: "moon" is not one of cloud, on-premises`},
		{"kubeconfig", "  - {name: a, region: r, provider: cloud, kubeconfig: {}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", "clusters[0].kubeconfig: give exactly one of file or secret"},
		{"secret", "  - {name: a, region: r, provider: cloud, kubeconfig: {secret: ../../etc}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].kubeconfig.secret: "../../etc" is not a Secret's name`},
		{"class", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: B200, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].offers[0].class: "B200" is not a GPU class`},
		{"price", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 0}]}\n", "clusters[0].offers[0].pricePerGPUHour: must be a price above 0"},
		{"mig", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: A100-80GB, purchase: spot, pricePerGPUHour: 1, mig: [9g.90gb]}]}\n", `clusters[0].offers[0].mig[0]: "9g.90gb" is not a MIG profile of A100-80GB`},
		{"twice", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}, {class: L4, purchase: spot, pricePerGPUHour: 2}]}\n", "clusters[0].offers[1]: L4 bought spot is offered twice"},
		{"pin", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\nteams:\n  nlp: {pin: [b]}\n", `teams.nlp.pin[0]: "b" is not a cluster of this file`},
		{"image tag", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: [ghcr.io/acme/train:1], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `x.yaml:4: clusters[0].images[0]: "ghcr.io/acme/train:1": a registry or a repository, without a tag or digest`},
		{"image digest", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: ['ghcr.io/acme/train@sha256:00'], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: "ghcr.io/acme/train@sha256:00": a registry or a repository, without a tag or digest`},
		{"image slash", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: [ghcr.io/], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: "ghcr.io/": a repository's path has no empty parts`},
		{"image double slash", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: [ghcr.io//x], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: "ghcr.io//x": a repository's path has no empty parts`},
		{"image scheme", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: ['https://ghcr.io'], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: "https://ghcr.io": a registry or a repository, without a scheme`},
		{"image no registry", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: [acme/train], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: "acme/train" does not start with a registry (a host name with a '.', a port, or localhost): write it as docker.io/acme/train for Docker Hub`},
		{"image bare name", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: [python], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: "python" does not start with a registry`},
		{"image empty", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: [\"\"], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: empty: a registry or a repository`},
		{"image bad port", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: [\"reg:x\"], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: "reg:x" is not a registry: registries must be valid RFC 3986 URI authorities`},
		{"image bad path", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, images: [\"ghcr.io/Acme/tr ain\"], offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[0].images[0]: "ghcr.io/acme/tr ain" is not a repository`},
		{"nothing offered", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: []}\n", "clusters[0].offers: a cluster offers at least one GPU class, or CPU nodes (cpu)"},
		{"cpu price", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [], cpu: {purchase: on-demand}}\n", "clusters[0].cpu.pricePerCoreHour: must be a price above 0"},
		{"cpu purchase", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [], cpu: {purchase: lease, pricePerCoreHour: 0.1}}\n", `clusters[0].cpu.purchase: "lease" is not one of reserved, on-demand`},
		{"cpu on spot", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [], cpu: {purchase: spot, pricePerCoreHour: 0.1}}\n", `clusters[0].cpu.purchase: "spot" is not one of reserved, on-demand (CPU-only launches do not run on spot machines)`},
		{"cpu cores", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [], cpu: {purchase: on-demand, pricePerCoreHour: 0.1, cores: -1}}\n", "clusters[0].cpu.cores: cannot be negative"},
		{"cpu field", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [], cpu: {purchase: on-demand, pricePerGPUHour: 0.1}}\n", "pricePerGPUHour"},
		{"cap on cores without cpu", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}], caps: {nlp: {CPU: 4}}}\n", "clusters[0].caps.nlp.CPU: a cap on cores, but the cluster states no cpu nodes"},
		{"cap class", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}], caps: {nlp: {B200: 1}}}\n", "clusters[0].caps.nlp.B200: not a GPU class (or CPU: cores)"},
		{"duplicate", "  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n  - {name: a, region: r, provider: cloud, kubeconfig: {file: k}, offers: [{class: L4, purchase: spot, pricePerGPUHour: 1}]}\n", `clusters[1].name: duplicate cluster "a"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(head+c.body), classes(t))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want %q", err, c.want)
			}
		})
	}
}

// FuzzParse: any input is refused with an error or accepted whole, and an
// accepted fleet holds what validation promised and can decide a launch.
func FuzzParse(f *testing.F) {
	data, _ := os.ReadFile("../../templates/clusters.yaml")
	f.Add(data)
	f.Add([]byte("apiVersion: gantry.dev/v1alpha1\nkind: ClusterList\nclusters: [{name: a, offers: [{pricePerGPUHour: -1}]}]"))
	cat := classes(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := Parse("f.yaml", data, cat)
		if err != nil {
			return
		}
		states := map[string]State{}
		for _, c := range fl.Clusters() {
			for _, o := range c.Offers {
				if o.PricePerGPUHour <= 0 || o.GPUs < 0 {
					t.Fatalf("accepted %+v", o)
				}
			}
			for _, img := range c.Images {
				if again, err := imageSource(img); err != nil || again != img {
					t.Fatalf("accepted image source %q: read again %q, %v", img, again, err)
				}
			}
			if o := c.CPU; o != nil && (o.PricePerCoreHour <= 0 || o.Cores < 0) {
				t.Fatalf("accepted %+v", *o)
			}
			states[c.Name] = State{Reachable: true, Free: map[string]float64{"A100-80GB": 8, gpu.CPUClass: 8}}
		}
		d := fl.Place(Launch{Team: "vision", Class: gpu.CPUClass, Cores: 1, Spot: true}, states)
		for _, c := range d.Candidates {
			if cl, _ := fl.Get(c.Cluster); cl.CPU == nil || c.Offer.Class != gpu.CPUClass {
				t.Fatalf("a CPU-only launch placed on %s, which states no cpu nodes (%+v)", c.Cluster, c.Offer)
			}
		}
		for _, class := range fl.ClassNames() {
			d := fl.Place(Launch{Team: "vision", Class: class, GPUs: 1, Spot: true}, states)
			if d.Reason == "" {
				t.Fatal("a decision without a reason")
			}
		}
	})
}
