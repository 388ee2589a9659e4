package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/auditlog"
	"github.com/gantryhq/gantry/internal/store/storetest"
)

func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// copyTemplates copies the starter catalog into a fresh directory.
func copyTemplates(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, _ := os.ReadDir("../../templates")
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join("../../templates", e.Name()))
		os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644)
	}
	return dir
}

func TestValidate(t *testing.T) {
	code, out, _ := cli(t, "templates", "validate", "--images", "../../images", "../../templates")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d templates valid (5 GPU classes, %d catalog images)", starterTemplates(t), catalogImages(t))) {
		t.Fatalf("exit %d: %s", code, out)
	}
	dir := copyTemplates(t)
	broken := filepath.Join(dir, "vllm-inference.yaml")
	b, _ := os.ReadFile(broken)
	s := strings.Replace(string(b), "count: {min: 1, max: 8, default: 1}", "count: {min: 1, max: 8, default: 1, maximum: 9}", 1)
	s = strings.Replace(s, "classes: [H100-80GB, H200-141GB, A100-80GB, L4]", "classes: [H100-80GB, B200]", 1)
	os.WriteFile(broken, []byte(s), 0o644)
	unapproved := filepath.Join(dir, "pytorch-train.yaml")
	b, _ = os.ReadFile(unapproved)
	os.WriteFile(unapproved, []byte(strings.Replace(string(b), "image: pytorch:25.01-py3", "image: pytorch:latest", 1)), 0o644)
	code, _, errs := cli(t, "templates", "validate", "--images", "../../images", dir)
	if code != 1 {
		t.Fatalf("exit %d for a broken template", code)
	}
	for _, want := range []string{
		broken + `:11: spec.gpu.classes[1]: unknown GPU class "B200"`,
		broken + `:13: spec.gpu.count.maximum: unknown field "maximum"`,
		unapproved + `:11: spec.image: tag "latest" of image "pytorch" is not approved (allowed: 25.01-py3)`,
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("missing %q in:\n%s", want, errs)
		}
	}
}

func TestRender(t *testing.T) {
	code, out, errs := cli(t, "templates", "render", "vllm-inference", "--dir", "../../templates", "--images", "../../images", "--set", "model=mistral-7b", "--count", "2", "--team", "nlp")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"kind: Deployment", "- mistral-7b", "image: registry.gantry.internal/vllm/vllm-openai:v0.8.4", "a launch verifies its signature", "--tensor-parallel-size=2", "nvidia.com/gpu: \"2\"", "namespace: gantry-nlp"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	code, _, errs = cli(t, "templates", "render", "vllm-inference", "--dir", "../../templates", "--images", "../../images", "--set", "maxModelLen=huge", "--set", "colour=red")
	if code != 1 || !strings.Contains(errs, `parameters.maxModelLen: "huge" is not an integer`) || !strings.Contains(errs, "parameters.colour") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if code, _, _ := cli(t, "templates", "render"); code != 2 {
		t.Fatalf("missing name: exit %d, want 2", code)
	}
}

func TestApply(t *testing.T) {
	t.Setenv("GANTRY_GPU_CLASSES_FILE", "../../templates/gpu-classes.yaml")
	t.Setenv("GANTRY_IMAGES_DIR", "../../images")
	db := storetest.SQLitePath(t)
	dir := copyTemplates(t)

	code, out, errs := cli(t, "templates", "apply", "-f", dir, "--db", db, "--dry-run")
	n := starterTemplates(t)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("dry run: %d to create, 0 to update, 0 to delete, 0 unchanged; nothing changed", n)) {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = cli(t, "templates", "apply", "-f", dir, "--db", db)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("applied: %d to create", n)) || !strings.Contains(out, "+  name: vllm-inference") {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	code, out, _ = cli(t, "templates", "apply", "-f", dir, "--db", db)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("0 to create, 0 to update, 0 to delete, %d unchanged", n)) {
		t.Fatalf("re-apply: exit %d\n%s", code, out)
	}

	// A change shows as a diff; a removed file is pruned only when asked.
	f := filepath.Join(dir, "pytorch-train.yaml")
	b, _ := os.ReadFile(f)
	os.WriteFile(f, bytes.Replace(b, []byte("maxRuntime: 72h"), []byte("maxRuntime: 48h"), 1), 0o644)
	os.Remove(filepath.Join(dir, "dev-environment.yaml"))
	code, out, _ = cli(t, "templates", "apply", "-f", dir, "--db", db)
	if code != 0 || !strings.Contains(out, "-    maxRuntime: 72h") || !strings.Contains(out, "+    maxRuntime: 48h") ||
		!strings.Contains(out, fmt.Sprintf("0 to create, 1 to update, 0 to delete, %d unchanged (pytorch-train@2)", n-2)) {
		t.Fatalf("update: exit %d\n%s", code, out)
	}
	code, out, _ = cli(t, "templates", "apply", "-f", dir, "--db", db, "--prune")
	if code != 0 || !strings.Contains(out, "delete    dev-environment") || !strings.Contains(out, "1 to delete") {
		t.Fatalf("prune: exit %d\n%s", code, out)
	}

	// A broken file fails the whole apply and changes nothing.
	b, _ = os.ReadFile(f)
	os.WriteFile(f, bytes.Replace(b, []byte("maxRuntime: 48h"), []byte("maxRuntime: 24h"), 1), 0o644)
	os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("apiVersion: gantry.dev/v1alpha1\nkind: Template\nmetadata: {name: broken}\n"), 0o644)
	code, _, errs = cli(t, "templates", "apply", "-f", dir, "--db", db)
	if code != 1 || !strings.Contains(errs, "broken.yaml:3: metadata.title: is required") {
		t.Fatalf("broken apply: exit %d\n%s", code, errs)
	}
	os.Remove(filepath.Join(dir, "broken.yaml"))
	code, out, _ = cli(t, "templates", "apply", "-f", dir, "--db", db, "--dry-run")
	if code != 0 || !strings.Contains(out, "1 to update") {
		t.Fatalf("the failed apply changed something: %s", out)
	}
}

func TestServeRefusesBadConfig(t *testing.T) {
	code, _, errs := cli(t, "serve", "--listen", "0.0.0.0:8080", "--log-level", "chatty")
	if code != 1 || !strings.Contains(errs, "not a loopback address") || !strings.Contains(errs, `log.level: "chatty"`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if code, _, _ := cli(t, "bogus"); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

func TestAuditVerify(t *testing.T) {
	db := storetest.SQLitePath(t)
	st, err := store.Open(context.Background(), store.SQLite, db)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := auditlog.New(st).AppendAudit(context.Background(), audit.Record{At: time.Now(), Actor: "a", Action: "POST /x", Decision: audit.Allow, Status: 201}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	code, out, _ := cli(t, "audit", "verify", "--db", db)
	if code != 0 || !strings.Contains(out, "audit log intact: 3 records") {
		t.Fatalf("exit %d: %s", code, out)
	}
	raw, _ := sql.Open("sqlite", "file:"+db)
	raw.Exec(`UPDATE audit SET actor = 'mallory' WHERE seq = 2`)
	raw.Close()
	code, out, errs := cli(t, "audit", "verify", "--db", db)
	if code != 1 || !strings.Contains(out, "record 2: its fields do not match its hash") || !strings.Contains(errs, "tampered") {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
}

// starterTemplates counts the templates in templates/ (every YAML file but the
// GPU classes), from this package's directory.
func starterTemplates(t *testing.T) int { return starterTemplatesIn(t, "../../templates") }

func starterTemplatesIn(t *testing.T, dir string) int {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return len(files) - 3 // the GPU classes, the node groups and the clusters are not templates
}

func catalogImages(t *testing.T) int {
	files, err := filepath.Glob("../../images/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return len(files)
}
