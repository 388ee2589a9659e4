package devcluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestToolModulesAligned: every package that both Gantry's server and the
// local cluster's tools (the binaries deploy/cluster/go.mod builds, Helm's
// too) compile comes from the same module version in both modules. Both are
// built without cgo and with -trimpath, so the Go build cache then compiles
// the shared packages — the Kubernetes libraries, gRPC, protobuf — once,
// which a cold CI run needs (docs/ci.md). A bump on one side fails here
// until the other follows; the message says what to run. The version compared is both the
// one required (which the Go build cache's key holds) and, where the module
// is replaced, the replacement's (the code compiled).
func TestToolModulesAligned(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gantry := listDeps(t, root, "./cmd/gantry", "./cmd/gantry-images")
	tools := listDeps(t, filepath.Join(root, "deploy", "cluster"), "tool")
	shared, behind := 0, map[string]bool{}
	for pkg, v := range gantry {
		w, ok := tools[pkg]
		if !ok || v.path == "" {
			continue
		}
		shared++
		if v != w {
			behind[v.path+" "+v.String()+" (Gantry) vs "+w.String()+" (deploy/cluster)"] = true
		}
	}
	if len(behind) > 0 {
		var lines []string
		for l := range behind {
			lines = append(lines, l)
		}
		sort.Strings(lines)
		t.Errorf("modules whose packages both Gantry and deploy/cluster build differ in version, so they compile twice: "+
			"`go get module@version` on the side behind (in the root or in deploy/cluster; for a module deploy/cluster replaces, "+
			"go mod edit -require=module@version there), then go mod tidy in both:\n%s",
			strings.Join(lines, "\n"))
	}
	// About 740 packages outside the standard library are shared today: a
	// handful would mean the lists above went wrong, not that all is well.
	if shared < 500 {
		t.Errorf("only %d packages are shared between Gantry and deploy/cluster: want the Kubernetes libraries among them", shared)
	}
}

// moduleVersion is where a package comes from: its module's path, the
// version required and, if the module is replaced, the replacement's path
// and version.
type moduleVersion struct{ path, version, replacedBy string }

func (m moduleVersion) String() string {
	if m.replacedBy != "" {
		return m.version + " => " + m.replacedBy
	}
	return m.version
}

// listDeps returns each package that pkgs import, directly or not, built
// without cgo in dir's module, with the module it comes from: empty for the
// standard library.
func listDeps(t *testing.T, dir string, pkgs ...string) map[string]moduleVersion {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}} {{.Version}}{{with .Replace}} {{.Path}}@{{.Version}}{{end}}{{end}}"}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list in %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("go list in %s: %v", dir, err)
	}
	deps := map[string]moduleVersion{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		switch len(f) {
		case 1:
			deps[f[0]] = moduleVersion{}
		case 3:
			deps[f[0]] = moduleVersion{path: f[1], version: f[2]}
		case 4:
			m := moduleVersion{path: f[1], version: f[2], replacedBy: f[3]}
			if m.replacedBy == m.path+"@"+m.version {
				m.replacedBy = "" // replaced by itself: the same code under the same key
			}
			deps[f[0]] = m
		case 2: // a package of the main module: a path, no version
			deps[f[0]] = moduleVersion{path: f[1]}
		}
	}
	return deps
}
