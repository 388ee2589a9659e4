package api_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/servertest"
)

// TestPythonClient runs the Python client's tests (api/python/tests, with
// python3 -m unittest) and the notebook example of docs/python.md against a
// real Gantry serving on the embedded defaults, signed in with lee's
// personal access token. Without python3 it is skipped, except in CI.
func TestPythonClient(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is needed for the Python client's tests (.ci/test installs it)")
		}
		t.Skip("no python3")
	}
	g := servertest.New(t)
	env := append(os.Environ(), "GANTRY_SERVER="+g.URL, "GANTRY_TOKEN="+g.Token("lee"), "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1")
	for _, args := range [][]string{
		{"-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v"},
		{"examples/notebook.py"},
	} {
		cmd := exec.Command(python, args...)
		cmd.Dir, cmd.Env = "python", env
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
