package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/internal/servertest"
)

// TestPythonClient installs the Python client as a user would (pip install
// ./api/python, with no package index: it builds with the standard library
// only), then runs its tests (api/python/tests, with python3 -m unittest) and
// the notebook example of docs/python.md against the installed package and a
// real Gantry serving on the embedded defaults, signed in with lee's
// personal access token, and the reporting snippet of docs/runs.md (a
// training Job's, to a recording server). Without python3 and pip it is
// skipped, except in CI.
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
	docSnippet(t, python, work, site)
}

// docSnippet runs the reporting snippet of docs/runs.md ("Reporting from
// Python") against the installed package, as a training Job would (its
// GANTRY_RUN_URL and token file), reporting to a server that records what
// it is sent: every tenth step of 300, with its loss, the token presented.
func docSnippet(t *testing.T, python, work, site string) {
	doc, err := os.ReadFile("../docs/runs.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(doc), "## Reporting from Python")
	_, block, ok := strings.Cut(after, "```python\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed || !strings.Contains(block, "run.report(") {
		t.Fatal("docs/runs.md: no python block under \"Reporting from Python\" that calls run.report")
	}
	var mu sync.Mutex
	var steps []int
	var losses []float64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reports []struct {
				Step       int                `json:"step"`
				TotalSteps int                `json:"totalSteps"`
				Metrics    map[string]float64 `json:"metrics"`
			} `json:"reports"`
		}
		if r.Header.Get("Authorization") != "Bearer run-token" || json.NewDecoder(r.Body).Decode(&body) != nil || len(body.Reports) != 1 || body.Reports[0].TotalSteps != 300 {
			http.Error(w, "not a report of the snippet's", http.StatusBadRequest)
			return
		}
		mu.Lock()
		steps = append(steps, body.Reports[0].Step)
		losses = append(losses, body.Reports[0].Metrics["loss"])
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("run-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", block)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1", "GANTRY_RUN_URL="+srv.URL+"/api/v1/workloads/nb/progress", "GANTRY_RUN_TOKEN_FILE="+tokenFile)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("docs/runs.md's snippet: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(steps) != 30 || steps[0] != 10 || steps[29] != 300 || losses[29] != 1.0/300 {
		t.Fatalf("docs/runs.md's snippet reported steps %v, losses %v; want every tenth of 300", steps, losses)
	}
}
