package security

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Set by TestMain: the repository root (gantry serve runs there, so that
// templates/, policy/ and images/ are the embedded defaults' relative paths)
// and the gantry binary built from it.
var (
	repoRoot string
	binary   string
)

// TestMain builds the development binary once for every test.
func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	root, err := findRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "security tests:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "gantry-security-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "security tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	repoRoot, binary = root, filepath.Join(dir, "gantry")
	build := exec.Command("go", "build", "-tags", "dev", "-o", binary, "./cmd/gantry")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "security tests: go build -tags dev ./cmd/gantry: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// findRoot is the directory of the main module's go.mod.
func findRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module (go env GOMOD = %q)", mod)
	}
	return filepath.Dir(mod), nil
}
