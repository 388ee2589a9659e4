package imagecat_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/imagecat"
)

func classes(t *testing.T) *gpu.Catalog {
	t.Helper()
	c, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStarterCatalog(t *testing.T) {
	c, err := imagecat.Load("../../images", classes(t))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../images/*.yaml")
	var want []string
	for _, f := range files {
		want = append(want, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	sort.Strings(want)
	if got := strings.Join(c.Names(), ","); got != strings.Join(want, ",") {
		t.Fatalf("names %s", got)
	}
	for _, e := range c.List() {
		if len(e.Keys) == 0 || len(e.Image.Spec.Attestations) == 0 {
			t.Errorf("%s: every starter image has a signing key and an attestation", e.Image.Metadata.Name)
		}
	}
	e, tag, err := c.Resolve("pytorch:25.01-py3")
	if err != nil || tag != "25.01-py3" || e.Image.Spec.Repository != "registry.gantry.internal/nvidia/pytorch" {
		t.Fatalf("resolve: %v %s %v", e, tag, err)
	}
	for ref, msg := range map[string]string{
		"pytorch":         "not a catalog image reference",
		"tensorflow:2.15": `unknown image "tensorflow" (catalog: ` + strings.Join(want, ", ") + `)`,
		"pytorch:latest":  `tag "latest" of image "pytorch" is not approved (allowed: 25.01-py3)`,
	} {
		if _, _, err := c.Resolve(ref); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Resolve(%q) = %v, want %q", ref, err, msg)
		}
	}
}

// TestBrokenCatalog: every problem in every file at once, with file:line.
func TestBrokenCatalog(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "keys"), 0o755)
	os.WriteFile(filepath.Join(dir, "keys", "bad.pub"), []byte("not a key"), 0o644)
	good, _ := os.ReadFile("../../images/keys/platform.pub")
	os.WriteFile(filepath.Join(dir, "keys", "platform.pub"), good, 0o644)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	base := write("base.yaml", `apiVersion: gantry.dev/v1alpha1
kind: Image
metadata: {name: base}
spec:
  repository: registry.example.com/base
  tags: ["1.0"]
  signing: {keys: [keys/platform.pub]}
  layer: base
  gpuClasses: [L4]
`)
	app := write("app.yaml", `apiVersion: gantry.dev/v1alpha1
kind: Image
metadata: {name: app}
spec:
  repository: registry.example.com/app
  tags: ["1.0"]
  signing: {keys: [keys/bad.pub]}
  layer: framework
  base: app2
  gpuClasses: [L4]
`)
	fw := write("fw.yaml", `apiVersion: gantry.dev/v1alpha1
kind: Image
metadata: {name: fw}
spec:
  repository: registry.example.com/fw
  tags: ["1.0"]
  signing: {keys: [keys/platform.pub]}
  layer: framework
  base: fw2
  gpuClasses: [L4]
`)
	_ = fw
	sloppy := write("sloppy.yaml", `apiVersion: gantry.dev/v1alpha1
kind: Image
metadata: {name: sloppy}
spec:
  repository: registry.example.com/sloppy:1.0
  tags: ["a:b"]
  signing: {}
  confidential: {tee: sev}
  layer: top
  gpuClasses: [B200]
  colour: red
`)
	write("dup.yaml", strings.Replace(mustRead(t, base), "registry.example.com/base", "registry.example.com/other", 1))
	_, err := imagecat.Load(dir, classes(t))
	if err == nil {
		t.Fatal("a broken catalog loaded")
	}
	for _, want := range []string{
		sloppy + `:11: spec.colour: unknown field`,
		sloppy + `:8: spec.confidential.tee: "sev" is not one of snp, tdx`,
		app + `:9: spec.base: unknown image "app2"`,
		app + `:7: spec.signing.keys[0]: ` + filepath.Join(dir, "keys", "bad.pub") + ` holds no PEM public key`,
		fw + `:9: spec.base: unknown image "fw2"`,
		`dup.yaml:3: metadata.name: image "base" is also defined in ` + base,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	// The sloppy file's field problems, once its unknown field is gone.
	os.WriteFile(sloppy, []byte(strings.Replace(mustRead(t, sloppy), "  colour: red\n", "", 1)), 0o644)
	_, err = imagecat.Load(dir, classes(t))
	for _, want := range []string{
		sloppy + `:5: spec.repository: "registry.example.com/sloppy:1.0" is not a repository`,
		sloppy + `:6: spec.tags[0]: "a:b" is not a tag`,
		sloppy + `:7: spec.signing: a signing identity is required`,
		sloppy + `:8: spec.confidential.tee: "sev" is not one of snp, tdx`,
		sloppy + `:9: spec.layer: "top" is not one of base, framework, app`,
		sloppy + `:10: spec.gpuClasses[0]: unknown GPU class "B200"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestLayers(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "keys"), 0o755)
	good, _ := os.ReadFile("../../images/keys/platform.pub")
	os.WriteFile(filepath.Join(dir, "keys", "platform.pub"), good, 0o644)
	doc := func(name, layer, base string) string {
		b := ""
		if base != "" {
			b = "\n  base: " + base
		}
		return "apiVersion: gantry.dev/v1alpha1\nkind: Image\nmetadata: {name: " + name + "}\nspec:\n  repository: r.example.com/" + name +
			"\n  tags: [\"1\"]\n  signing: {keys: [keys/platform.pub]}\n  layer: " + layer + b + "\n  gpuClasses: [L4]\n"
	}
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(doc("a", "app", "b")), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(doc("b", "app", "a")), 0o644)
	_, err := imagecat.Load(dir, classes(t))
	if err == nil || !strings.Contains(err.Error(), `spec.base: "b" is a app image: a app image builds on a lower layer`) {
		t.Fatalf("a cycle of app images: %v", err)
	}
}

func mustRead(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzParse: any bytes give an image or an error, never a panic.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../images/*.yaml")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Add([]byte("spec: {tags: [\"[\"], signing: {keyless: {issuer: x, subject: \"(\"}}}"))
	c, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		img, _, err := imagecat.Parse("fuzz.yaml", data, c)
		if (img == nil) == (err == nil) {
			t.Fatalf("image %v and error %v", img, err)
		}
	})
}

// TestReload: an edit is picked up; a broken edit keeps the catalog in force
// and says where; trusted keys survive reloads.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "keys"), 0o755)
	for _, f := range []string{"cuda.yaml", "keys/platform.pub"} {
		b, _ := os.ReadFile(filepath.Join("../../images", f))
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	c, err := imagecat.Load(dir, classes(t))
	if err != nil {
		t.Fatal(err)
	}
	c.Trust("dev", c.List()[0].Keys[0])
	if err := c.Reload(); err != imagecat.ErrUnchanged {
		t.Fatalf("reload without changes: %v", err)
	}
	path := filepath.Join(dir, "cuda.yaml")
	doc := mustRead(t, path)
	os.WriteFile(path, []byte(strings.Replace(doc, `tags: ["12.8.1-runtime-ubuntu24.04"]`, `tags: ["12.8.1-runtime-ubuntu24.04", "12.9.0-runtime-ubuntu24.04"]`, 1)), 0o644)
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e, _, err := c.Resolve("cuda:12.9.0-runtime-ubuntu24.04")
	if err != nil || len(e.KeyNames) != 2 || e.KeyNames[1] != "dev" {
		t.Fatalf("after the edit: %v, keys %v", err, e.KeyNames)
	}
	os.WriteFile(path, []byte(strings.Replace(doc, "layer: base", "layer: basement", 1)), 0o644)
	if err := c.Reload(); err == nil || !strings.Contains(err.Error(), path+`:20: spec.layer: "basement" is not one of base, framework, app`) {
		t.Fatalf("a broken edit: %v", err)
	}
	if _, _, err := c.Resolve("cuda:12.9.0-runtime-ubuntu24.04"); err != nil {
		t.Errorf("the catalog in force was lost: %v", err)
	}
}
