package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
)

// block is one fenced code block of a document: its language, where it
// starts (file:line) and its commands (continuation lines joined).
type block struct {
	lang, where string
	lines       []string
}

// docBlocks reads the sh and python blocks of README.md and docs/*.md.
func docBlocks(t *testing.T, root string) []block {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []block
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur *block
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case cur == nil && (line == "```sh" || line == "```python"):
				rel, _ := filepath.Rel(root, f)
				cur = &block{lang: strings.TrimPrefix(line, "```"), where: fmt.Sprintf("%s:%d", rel, n)}
			case cur != nil && line == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				if k := len(cur.lines); cur.lang == "sh" && k > 0 && strings.HasSuffix(cur.lines[k-1], "\\") {
					cur.lines[k-1] = strings.TrimSuffix(cur.lines[k-1], "\\") + strings.TrimSpace(line)
				} else {
					cur.lines = append(cur.lines, line)
				}
			}
		}
	}
	return out
}

// notHere are the commands a document shows that this test does not run,
// and why.
var notHere = map[string]string{
	"make":    "make dev and make test are what CI itself runs",
	"kubectl": "installing the chart: the chart's e2e (TestHelmChart) does it",
	"helm":    "installing the chart: the chart's e2e (TestHelmChart) does it",
}

// TestDocBlocks runs the command blocks of README.md and docs/*.md as a
// newcomer would paste them, against Gantry on the local cluster: every
// curl answers 2xx (curl --fail-with-body; pipefail, so jq's exit does not
// hide it), every gantry command exits 0, every Python block runs. A
// workload ID the text leaves as ID (or $ID) is the one launched last.
// Commands that install Gantry elsewhere (kubectl, helm) or are the README's
// two commands themselves (make) are listed, not run.
func TestDocBlocks(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	root, _ := filepath.Abs("../..")
	bin := servertest.Binary(t)
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGantryDocBlocksTestKeyAAAAAAAAAAAAAAAAAAAAAA newcomer@example\n"), 0o644)
	front := strings.TrimPrefix(g.url, "http://")
	env := append(os.Environ(), "HOME="+home, "GANTRY_SERVER="+g.Gantry.URL, "GANTRY_TOKEN="+g.Token("ada"),
		"PYTHONPATH="+filepath.Join(root, "api", "python"), "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	idRE := regexp.MustCompile(`/ID\b`)
	ran, id := 0, ""
	for _, b := range docBlocks(t, root) {
		if b.lang == "python" {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			cmd := exec.CommandContext(ctx, "python3", "-c", strings.Join(b.lines, "\n"))
			cmd.Dir, cmd.Env = root, env
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("%s: the Python block fails: %v\n%s", b.where, err, out)
			}
			ran++
			continue
		}
		for _, line := range b.lines {
			cmdline := strings.TrimSpace(line)
			if cmdline == "" || strings.HasPrefix(cmdline, "#") {
				continue
			}
			if why, skip := notHere[strings.Fields(cmdline)[0]]; skip {
				t.Logf("%s: not run here (%s): %s", b.where, why, cmdline)
				continue
			}
			cmdline = strings.NewReplacer("http://localhost:8080", g.url, "http://127.0.0.1:8080", g.url, "localhost:8080", front, "127.0.0.1:8080", front,
				"curl -s ", "curl -sS --fail-with-body ", "go run ./cmd/gantry ", bin+" ").Replace(cmdline)
			cmdline = idRE.ReplaceAllLiteralString(cmdline, "/"+id)
			follow := strings.Contains(cmdline, "follow=true")
			if follow {
				cmdline = strings.Replace(cmdline, "curl ", "curl --max-time 3 ", 1) // a notebook's log streams until Ctrl-C
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail\n"+cmdline)
			cmd.Dir, cmd.Env = root, append(env, "ID="+id)
			out, err := cmd.Output()
			cancel()
			var ee *exec.ExitError
			if err != nil && !(follow && errors.As(err, &ee) && ee.ExitCode() == 28) {
				stderr := ""
				if errors.As(err, &ee) {
					stderr = string(ee.Stderr)
				}
				t.Errorf("%s: %s\n  (run as %s with ID=%s)\n  fails: %v\n%s%s", b.where, line, cmdline, id, err, out, stderr)
				continue
			}
			ran++
			var w struct{ ID string }
			if json.Unmarshal(out, &w) == nil && w.ID != "" {
				id = w.ID
			}
		}
	}
	if ran < 20 {
		t.Errorf("ran %d commands: the documents' blocks were not found", ran)
	}
	t.Logf("ran %d commands and Python blocks from the documents", ran)
}
