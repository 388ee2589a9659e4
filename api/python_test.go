package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/servertest"
)

// TestPythonClient installs the Python client as a user would (pip install
// ./api/python, with no package index: it builds with the standard library
// only), then runs its tests (api/python/tests, with python3 -m unittest) and
// the notebook example of docs/python.md against the installed package and a
// real Gantry serving on the embedded defaults, signed in with lee's
// personal access token. Without python3 and pip it is skipped, except in CI.
func TestPythonClient(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is needed for the Python client's tests (.ci/test installs it)")
		}
		t.Skip("no python3")
	}
	if err := exec.Command(python, "-m", "pip", "--version").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("pip is needed to install the Python client (.ci/test installs python3-pip)")
		}
		t.Skip("no pip")
	}
	site, work := t.TempDir(), t.TempDir()
	install := exec.Command(python, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--target", site, "./python")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("pip install ./api/python: %v\n%s", err, out)
	}
	// The tests and the example run from a directory without the sources, so
	// that they import the installed package.
	if err := os.CopyFS(filepath.Join(work, "tests"), os.DirFS("python/tests")); err != nil {
		t.Fatal(err)
	}
	example, _ := filepath.Abs("python/examples/notebook.py")
	spec, _ := filepath.Abs("../openapi.yaml")
	g := servertest.New(t)
	env := append(os.Environ(), "GANTRY_SERVER="+g.URL, "GANTRY_TOKEN="+g.Token("lee"), "GANTRY_PLATFORM_TOKEN="+g.Token("ada"), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1", "GANTRY_OPENAPI="+spec)
	where := exec.Command(python, "-c", "import gantry; print(gantry.__file__)")
	where.Dir, where.Env = work, env
	if out, err := where.Output(); err != nil || !strings.HasPrefix(string(out), site) {
		t.Fatalf("import gantry: %v %s, want the package installed under %s", err, out, site)
	}
	for _, args := range [][]string{
		{"-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v"},
		{example},
	} {
		cmd := exec.Command(python, args...)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3 %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "-m" && (!strings.Contains(string(out), "OK") || strings.Contains(string(out), "skipped")) {
			t.Fatalf("python3 %s: not every test ran and passed:\n%s", strings.Join(args, " "), out)
		}
		t.Logf("python3 %s:\n%s", strings.Join(args, " "), out)
	}
}
