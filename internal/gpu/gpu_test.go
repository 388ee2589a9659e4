package gpu_test

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/gpu"
)

func TestStarterClasses(t *testing.T) {
	c, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "L4"} {
		if _, ok := c.Get(name); !ok {
			t.Errorf("class %s missing", name)
		}
	}
	h200, _ := c.Get("H200-141GB")
	if p, ok := h200.Profile("1g.18gb"); !ok || p.Resource() != "nvidia.com/mig-1g.18gb" || p.MaxInstances != 7 {
		t.Errorf("H200 1g.18gb: %+v", p)
	}
	if c.ForProduct("NVIDIA-H100-80GB-HBM3") != "H100-80GB" || c.ForProduct("NVIDIA-B200") != "" {
		t.Error("product lookup")
	}
	// Memory eighths: 1g, 1g double, 2g, 3g, 4g, 7g = 1, 2, 2, 4, 4, 8 on every MIG-capable class.
	for _, cl := range c.List() {
		if len(cl.MIG) == 0 {
			continue
		}
		var got []int
		for _, p := range cl.MIG {
			got = append(got, p.Memory)
		}
		if want := []int{1, 2, 2, 4, 4, 8}; !equal(got, want) {
			t.Errorf("%s memory eighths %v, want %v", cl.Name, got, want)
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseErrors(t *testing.T) {
	in := `apiVersion: gantry.dev/v1alpha1
kind: GPUClassList
classes:
  - name: X1
    products: [NVIDIA-X1]
    memoryGiB: 0
    price: {onDemand: -1}
    mig:
      - {name: 2g.10gb, compute: 3, memory: 9, maxInstances: 8}
  - name: X1
    products: [NVIDIA-X1, "bad label!"]
    memoryGiB: 10
    price: {onDemand: 1}
`
	_, err := gpu.Parse("c.yaml", []byte(in))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"c.yaml:6: classes[0].memoryGiB: must be positive",
		"c.yaml:7: classes[0].price: prices cannot be negative",
		`c.yaml:9: classes[0].mig[0].compute: 3 does not match profile "2g.10gb"`,
		"c.yaml:9: classes[0].mig[0].memory: must be between 1 and 8",
		"c.yaml:9: classes[0].mig[0].maxInstances: must be between 1 and 7",
		`c.yaml:10: classes[1].name: duplicate class "X1"`,
		`c.yaml:11: classes[1].products[0]: product "NVIDIA-X1" already belongs to class "X1"`,
		`c.yaml:11: classes[1].products[1]: "bad label!" is not a valid label value`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

// TestConfidentialAndVMFields: the CC classes and VM device names of the
// starter file, and every problem with them at once, with lines.
func TestConfidentialAndVMFields(t *testing.T) {
	c, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := c.Get("H100-80GB")
	l4, _ := c.Get("L4")
	if !h100.SupportsTEE("snp") || !h100.SupportsTEE("tdx") || l4.SupportsTEE("snp") || h100.VMDeviceName != "nvidia.com/GH100_H100_SXM5_80GB" {
		t.Errorf("H100 %+v, L4 %+v", h100.Confidential, l4.Confidential)
	}
	in := `apiVersion: gantry.dev/v1alpha1
kind: GPUClassList
classes:
  - name: X1
    products: [NVIDIA-X1]
    memoryGiB: 80
    price: {onDemand: 1}
    confidential: {tees: [sev]}
    vmDeviceName: "not a device"
  - name: X2
    products: [NVIDIA-X2]
    memoryGiB: 80
    price: {onDemand: 1}
    confidential: {tees: []}
`
	_, err = gpu.Parse("c.yaml", []byte(in))
	for _, want := range []string{
		`c.yaml:8: classes[0].confidential.tees[0]: "sev" is not one of snp, tdx`,
		`c.yaml:9: classes[0].vmDeviceName: "not a device" is not a device resource name`,
		`c.yaml:14: classes[1].confidential.tees: at least one TEE (snp, tdx) is required`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

// TestReplace: a reload puts new prices and classes in force for whoever
// holds the catalog; one that drops a class or a MIG profile in force is
// refused, naming it, and changes nothing.
func TestReplace(t *testing.T) {
	data, err := os.ReadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	held, err := gpu.Parse("gpu-classes.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(text string) *gpu.Catalog {
		t.Helper()
		c, err := gpu.Parse("gpu-classes.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dearer := strings.Replace(string(data), "price: {onDemand: 2.7, spot: 1.6}", "price: {onDemand: 3.1, spot: 1.6}", 1)
	if err := held.Replace(parse(dearer)); err != nil {
		t.Fatalf("a new price: %v", err)
	}
	if c, _ := held.Get("A100-40GB"); c.Price.OnDemand != 3.1 {
		t.Fatalf("the holder sees %v, want the new price 3.1", c.Price.OnDemand)
	}
	withoutL4 := string(data[:strings.Index(string(data), "  - name: L4")])
	noProfile := strings.Replace(dearer, "      - {name: 1g.5gb, compute: 1, memory: 1, maxInstances: 7}\n", "", 1)
	for name, text := range map[string]string{"a class removed": withoutL4, "a MIG profile removed": noProfile} {
		err := held.Replace(parse(text))
		if err == nil || !strings.Contains(err.Error(), map[string]string{"a class removed": `class "L4"`, "a MIG profile removed": `"1g.5gb"`}[name]) {
			t.Errorf("%s: %v", name, err)
		}
		if _, ok := held.Get("L4"); !ok || len(held.Names()) != 5 {
			t.Errorf("%s: the refused reload changed the catalog: %v", name, held.Names())
		}
		if c, _ := held.Get("A100-40GB"); len(c.MIG) != 6 || c.Price.OnDemand != 3.1 {
			t.Errorf("%s: the refused reload changed A100-40GB: %+v", name, c)
		}
	}
}

// TestShare: a MIG instance counts as the larger of its compute and memory
// shares; whole GPUs, and a profile or class the catalog does not name,
// count whole.
func TestShare(t *testing.T) {
	c, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		class, profile string
		count, want    float64
	}{
		{"A100-80GB", "", 4, 4},
		{"A100-80GB", "1g.10gb", 7, 1},   // compute 1/7 over memory 1/8
		{"A100-80GB", "1g.20gb", 2, 0.5}, // memory 2/8 over compute 1/7
		{"A100-80GB", "3g.40gb", 2, 1},   // memory 4/8
		{"A100-80GB", "9g.90gb", 1, 1},   // not in the catalog: whole
		{"V100-16GB", "1g.10gb", 3, 3},   // no such class: whole
	} {
		if got := c.Share(tc.class, tc.profile, tc.count); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s %s ×%g: %g, want %g", tc.class, tc.profile, tc.count, got, tc.want)
		}
	}
}
