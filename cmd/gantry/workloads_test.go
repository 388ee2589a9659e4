package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
)

// TestWorkloadVerbs runs the CLI's workload verbs against the real server
// (no cluster: launches are recorded and rendered) signed in with a personal
// access token from $GANTRY_TOKEN: launch, ls, get, stop, start, estimate,
// cost; a field problem is one line naming the field; a refused decision
// says why; a usage error exits 2; --wait gives up with the state it saw.
func TestWorkloadVerbs(t *testing.T) {
	g := startGantry(t)
	t.Setenv("GANTRY_TOKEN", g.Token("lee")) // a team-admin of vision
	t.Setenv("GANTRY_SERVER", g.URL)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no credentials file of the machine's
	cli := func(args ...string) (code int, out, errOut string) {
		var o, e bytes.Buffer
		code = run(context.Background(), args, &o, &e)
		return code, o.String(), e.String()
	}

	// whoami answers with the token, as every verb does.
	if code, out, errOut := cli("whoami"); code != 0 || !strings.Contains(out, "dev-lee") || !strings.Contains(out, "server:  "+g.URL) {
		t.Fatalf("whoami with GANTRY_TOKEN: %d %q %q", code, out, errOut)
	}
	code, out, errOut := cli("launch", "dev-environment", "--team", "vision", "--gpu", "L4:1")
	m := regexp.MustCompile(`^launched ([a-z0-9]+) \(dev-environment-[a-z0-9]+\) in team vision: Pending`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("launch: %d %q %q", code, out, errOut)
	}
	id := m[1]
	if code, out, _ := cli("ls", "--team", "vision"); code != 0 || !strings.Contains(out, id) || !strings.HasPrefix(out, "ID ") {
		t.Fatalf("ls: %d %q", code, out)
	}
	// People by the names their provider gave, not issuer#subject.
	if code, out, _ := cli("ls", "--team", "vision", "-o", "wide"); code != 0 || !strings.Contains(out, "Lee Park") {
		t.Fatalf("ls -o wide names the owner: %d %q", code, out)
	}
	if code, out, _ := cli("get", id); code != 0 || !strings.Contains(out, "owner:    Lee Park (team lead, team vision) <lee@gantry.localhost> (") {
		t.Fatalf("get names the owner: %d %q", code, out)
	}
	code, out, _ = cli("get", id, "-o", "json")
	var w struct {
		ID, Status, Team string
		Gpu              struct{ Class string }
	}
	if json.Unmarshal([]byte(out), &w); code != 0 || w.ID != id || w.Gpu.Class != "L4" || w.Team != "vision" {
		t.Fatalf("get: %d %q", code, out)
	}
	if code, out, _ := cli("ls", "--ended"); code != 0 || strings.Contains(out, id) {
		t.Fatalf("ls --ended lists a live workload: %d %q", code, out)
	}
	if code, out, _ := cli("stop", id); code != 0 || out != id+": Stopped\n" {
		t.Fatalf("stop: %d %q", code, out)
	}
	// Its history: ended now, never ran (without a cluster), no exit code.
	if code, out, _ := cli("ls", "--ended", "-o", "wide"); code != 0 || !strings.Contains(out, "ATTEMPTS") ||
		!regexp.MustCompile(id+` .* Stopped .* - +- +0 +- *\n`).MatchString(out) {
		t.Fatalf("ls --ended -o wide: %d %q", code, out)
	}
	if code, out, _ := cli("get", id); code != 0 || !strings.Contains(out, "\nended:    ") || strings.Contains(out, "started:") || !strings.Contains(out, "\nnext:     gantry start|rm "+id+"\n") {
		t.Fatalf("get of a stopped workload: %d %q", code, out)
	}
	if code, out, _ := cli("start", id); code != 0 || !strings.HasPrefix(out, id+": Pending") {
		t.Fatalf("start: %d %q", code, out)
	}
	if code, out, _ := cli("estimate", "jupyter-notebook", "--team", "vision", "--min-memory", "30"); code != 0 ||
		!strings.HasPrefix(out, "H100-80GB × 1 1g.10gb: $0.99/h") || !strings.Contains(out, "3g.40gb") {
		t.Fatalf("estimate: %d %q", code, out)
	}
	// A CPU-only launch's estimate speaks of cores, not GPUs.
	if code, out, _ := cli("estimate", "cpu-job", "--team", "vision"); code != 0 || !strings.HasPrefix(out, "CPU only: $") || strings.Contains(out, "GPUs in use") {
		t.Fatalf("estimate of a CPU-only launch: %d %q", code, out)
	}
	if code, out, _ := cli("cost", "--by", "template"); code != 0 || !strings.HasPrefix(out, "TEMPLATE") || !strings.Contains(out, "total") {
		t.Fatalf("cost: %d %q", code, out)
	}
	if code, out, _ := cli("templates", "ls"); code != 0 || !strings.Contains(out, "jupyter-notebook") || !strings.HasPrefix(out, "NAME") {
		t.Fatalf("templates ls: %d %q", code, out)
	}
	if code, out, _ := cli("templates", "show", "gpu-vm"); code != 0 || !strings.Contains(out, `"workload": "vm"`) {
		t.Fatalf("templates show: %d %q", code, out)
	}
	if code, out, _ := cli("images", "ls"); code != 0 || !strings.HasPrefix(out, "NAME") || !regexp.MustCompile(`(?m)^cuda +registry\.gantry\.internal/nvidia/cuda +base +12\.8 .*key keys/platform\.pub$`).MatchString(out) {
		t.Fatalf("images ls: %d %q", code, out)
	}
	// Nothing runs without a cluster: top says so, and -o json is an empty list.
	if code, out, _ := cli("top", "--team", "vision"); code != 0 || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "no running workloads") {
		t.Fatalf("top: %d %q", code, out)
	}
	if code, out, _ := cli("top", "-o", "json"); code != 0 || out != "[]\n" {
		t.Fatalf("top -o json: %d %q", code, out)
	}
	if code, _, errOut := cli("top", "--watch", "10ms"); code != 2 || !strings.Contains(errOut, "at least 1s") {
		t.Fatalf("top --watch 10ms: %d %q", code, errOut)
	}
	if code, out, _ := cli("advice", id); code != 0 || !strings.HasPrefix(out, "KIND") {
		t.Fatalf("advice: %d %q", code, out)
	}
	if code, out, _ := cli("advice"); code != 0 || !strings.HasPrefix(out, "WORKLOAD") {
		t.Fatalf("team advice: %d %q", code, out)
	}
	if code, out, _ := cli("progress", id); code != 0 || !strings.HasPrefix(out, "no progress reported") {
		t.Fatalf("progress of a run that reported nothing: %d %q", code, out)
	}
	if code, out, _ := cli("keep", id); code != 0 || !strings.Contains(out, "kept going") {
		t.Fatalf("keep: %d %q", code, out)
	}
	// A field problem: the server's, one line naming the field.
	code, _, errOut = cli("launch", "dev-environment", "--team", "vision", "--gpu", "V100")
	if code != 1 || !regexp.MustCompile(`gpu\.class: .*V100`).MatchString(errOut) {
		t.Fatalf("a GPU class that does not exist: %d %q", code, errOut)
	}
	// Decisions: never on one's own launch; and one not held for approval
	// says so (as ada, a platform admin) — the server's reasons.
	code, _, errOut = cli("approve", id, "--reason", "ok")
	if code != 1 || !strings.Contains(errOut, "your own launch") {
		t.Fatalf("approve one's own: %d %q", code, errOut)
	}
	t.Setenv("GANTRY_TOKEN", g.Token("ada"))
	code, _, errOut = cli("deny", id, "--reason", "no")
	if code != 1 || !strings.Contains(errOut, "not waiting for approval") {
		t.Fatalf("deny: %d %q", code, errOut)
	}
	if code, _, _ := cli("launch", "dev-environment"); code != 2 {
		t.Fatalf("launch without --team: exit %d, want 2", code)
	}
	// Without a cluster nothing runs: --wait gives up, saying what it saw.
	code, _, errOut = cli("launch", "dev-environment", "--team", "vision", "--wait", "--timeout", "2s")
	if code != 1 || !strings.Contains(errOut, "still Pending after 2s") || !strings.Contains(errOut, "launched ") {
		t.Fatalf("launch --wait: %d %q", code, errOut)
	}
	// Tokens: a token cannot make tokens (sign in for that), and says so;
	// it lists the caller's; a token that is not there is not revoked.
	if code, _, errOut := cli("tokens", "create", "--name", "nb", "--team", "vision", "--read-only", "--days", "7"); code != 1 || !strings.Contains(errOut, "a token cannot make tokens") {
		t.Fatalf("tokens create with a token: %d %q", code, errOut)
	}
	if code, out, _ := cli("tokens", "ls"); code != 0 || !strings.Contains(out, `"items"`) {
		t.Fatalf("tokens ls: %d %q", code, out)
	}
	if code, _, errOut := cli("tokens", "revoke", "not a token"); code != 1 || !regexp.MustCompile(`\n  path\.id: .+\n`).MatchString(errOut) {
		t.Fatalf("tokens revoke: %d %q", code, errOut)
	}
	// No cluster: the log is not there, and the server says so.
	if code, _, errOut := cli("logs", id); code != 1 || !strings.Contains(errOut, "(409)") {
		t.Fatalf("logs: %d %q", code, errOut)
	}
	if code, out, _ := cli("events", id); code != 0 || !strings.HasPrefix(out, "TIME") {
		t.Fatalf("events: %d %q", code, out)
	}
	// Without credentials: one line that says how to sign in.
	t.Setenv("GANTRY_TOKEN", "")
	if code, _, errOut := cli("ls"); code != 1 || !strings.Contains(errOut, "GANTRY_TOKEN") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("not signed in: %d %q", code, errOut)
	}
}

// TestHelpEverywhere: every command and every group of the table answers
// -h with its usage and exit 0, starting nothing; every command has a
// summary, and a run or subcommands.
func TestHelpEverywhere(t *testing.T) {
	var paths [][]string
	for _, c := range commands {
		if len(c.subs) > 0 {
			paths = append(paths, []string{c.name})
		}
	}
	leaves("", commands, func(path string, c *command) {
		if c.summary == "" || c.run == nil {
			t.Errorf("gantry %s: a command needs a summary and a run", path)
		}
		if path != "version" && path != "completion" {
			paths = append(paths, strings.Fields(path))
		}
	})
	if len(paths) < 40 {
		t.Fatalf("%d commands: the table is not read", len(paths))
	}
	for _, args := range paths {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append(args, "-h"), &out, &errOut)
		help := out.String() + errOut.String()
		if code != 0 || help == "" || strings.Contains(errOut.String(), "unknown") || !strings.Contains(help, "gantry "+strings.Join(args, " ")) {
			t.Errorf("gantry %s -h: exit %d, %q %q", strings.Join(args, " "), code, out.String(), errOut.String())
		}
	}
}

// TestCompletion: bash accepts the script, which offers every command and a
// group's subcommands; zsh and fish scripts name them too; every command
// the usage lists is offered.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"completion", sh}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "estimate") || !strings.Contains(out.String(), "keygen") {
			t.Errorf("%s: %d %q", sh, code, errOut.String())
		}
	}
	var script bytes.Buffer
	run(context.Background(), []string{"completion", "fish"}, &script, io.Discard)
	for _, l := range strings.Split(usage(), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "gantry" && f[1] != "COMMAND" {
			if !strings.Contains(script.String(), "-a "+f[1]+"\n") {
				t.Errorf("usage lists %q, completion does not offer it", f[1])
			}
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return
	}
	var out bytes.Buffer
	run(context.Background(), []string{"completion", "bash"}, &out, io.Discard)
	cmd := exec.Command("bash", "-c", out.String()+"\nCOMP_WORDS=(gantry tok); COMP_CWORD=1; _gantry; echo ${COMPREPLY[@]}; COMP_WORDS=(gantry tokens r); COMP_CWORD=2; _gantry; echo ${COMPREPLY[@]}")
	got, err := cmd.CombinedOutput()
	if err != nil || string(got) != "tokens\nrevoke\n" {
		t.Errorf("bash completion: %q %v", got, err)
	}
}

// TestApplyThroughTheServer: `templates apply -f DIR` goes through the
// server by default: the dry run diffs against what it serves (the starter
// catalog: nothing to change) and writes no database; an edit is an update
// recorded as the person; a broken file names its file and line; --prune
// deletes what no file defines, all at once.
func TestApplyThroughTheServer(t *testing.T) {
	g := startGantry(t)
	t.Setenv("GANTRY_TOKEN", g.Token("pat")) // a platform engineer
	t.Setenv("GANTRY_SERVER", g.URL)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	starter := filepath.Join(repoRoot(t), "templates")
	work := t.TempDir()
	t.Chdir(work)
	dir := filepath.Join(work, "templates")
	if err := os.CopyFS(dir, os.DirFS(starter)); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := run(context.Background(), args, &o, &e)
		return code, o.String(), e.String()
	}
	files, err := filepath.Glob(filepath.Join(starter, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	templates := 0 // the starter templates (the directory also holds classes, groups and clusters)
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && bytes.Contains(data, []byte("\nkind: Template\n")) {
			templates++
		}
	}
	code, out, errOut := cli("templates", "apply", "-f", dir, "--dry-run")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("dry run against %s: 0 to create, 0 to update, 0 to delete, %d unchanged; nothing changed", g.URL, templates)) {
		t.Fatalf("dry run: %d %q %q", code, out, errOut)
	}
	if entries, _ := os.ReadDir(work); len(entries) != 1 {
		t.Fatalf("the dry run left files behind: %v", entries)
	}
	nb := filepath.Join(dir, "jupyter-notebook.yaml")
	data, _ := os.ReadFile(nb)
	os.WriteFile(nb, []byte(strings.Replace(string(data), "idleTimeout: 2h", "idleTimeout: 3h", 1)), 0o644)
	if code, out, _ := cli("templates", "apply", "-f", dir); code != 0 || !strings.Contains(out, "update    jupyter-notebook") || !strings.Contains(out, "applied to "+g.URL+": 0 to create, 1 to update") {
		t.Fatalf("apply: %d %q", code, out)
	}
	var v struct{ CreatedBy string }
	t.Setenv("GANTRY_TOKEN", g.Token("ada"))
	if code, out, _ := cli("templates", "show", "jupyter-notebook"); code != 0 || json.Unmarshal([]byte(out), &v) != nil || !strings.Contains(v.CreatedBy, "pat") {
		t.Fatalf("recorded as %q (%d)", v.CreatedBy, code)
	}
	t.Setenv("GANTRY_TOKEN", g.Token("pat"))
	os.WriteFile(nb, []byte(strings.Replace(string(data), "idleTimeout: 2h", "idleTimeout: soon", 1)), 0o644)
	if code, _, errOut := cli("templates", "apply", "-f", dir); code != 1 || !regexp.MustCompile(`jupyter-notebook\.yaml:\d+: spec\.lifecycle\.idleTimeout`).MatchString(errOut) {
		t.Fatalf("a broken file: %d %q", code, errOut)
	}
	os.WriteFile(nb, data, 0o644)
	os.Remove(filepath.Join(dir, "gpu-vm.yaml"))
	if code, out, _ := cli("templates", "apply", "-f", dir, "--prune"); code != 0 || !strings.Contains(out, "delete    gpu-vm") || !strings.Contains(out, "1 to update, 1 to delete") {
		t.Fatalf("prune: %d %q", code, out)
	}
	if code, _, errOut := cli("templates", "show", "gpu-vm"); code != 1 || !strings.Contains(errOut, "(404)") {
		t.Fatalf("the pruned template: %d %q", code, errOut)
	}
}

// repoRoot is the repository's root (the tests run in cmd/gantry).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}

func TestProgressLine(t *testing.T) {
	eta := time.Date(2026, 12, 3, 10, 42, 7, 0, time.Local)
	for _, tc := range []struct {
		p    model.Progress
		want string
	}{
		{model.Progress{Reported: true, Step: new(int64(120)), TotalSteps: new(int64(300)), Fraction: new(0.4), StepsPerSecond: new(2.1),
			RemainingSeconds: new(86.0), Eta: &eta}, "step 120 of 300 (40%), 2.1 steps/s, about 1m26s left (ETA 10:42:07)"},
		{model.Progress{Reported: true, Step: new(int64(7))}, "step 7"},
	} {
		if got := progressLine(tc.p); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
	for _, tc := range []struct {
		p    *model.Progress
		want string
	}{
		{nil, "-"},
		{&model.Progress{Reported: true, Step: new(int64(120)), Fraction: new(0.4), Eta: &eta}, "40% ETA 10:42"},
		{&model.Progress{Reported: true, Step: new(int64(300)), Fraction: new(1.0), Eta: &eta}, "100%"},
		{&model.Progress{Reported: true, Step: new(int64(7))}, "step 7"},
	} {
		if got := progressCell(tc.p); got != tc.want {
			t.Errorf("cell %q, want %q", got, tc.want)
		}
	}
}

// TestPrintTop: top's table carries each run's progress beside its GPU use.
func TestPrintTop(t *testing.T) {
	var b strings.Builder
	printTop(&b, []topRow{{ID: "w1", Name: "train", Team: "vision", GPU: "H100-80GB ×1", GPUUtil: 87, SMActive: 0.62, MemUsedMiB: 40960, MemTotalMiB: 81920, Measured: true,
		PricePerHour: 3.2, CostSoFar: 1.6, Progress: progressCell(&model.Progress{Reported: true, Step: new(int64(120)), Fraction: new(0.4)})}})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "PROGRESS") || !regexp.MustCompile(`^w1 +train +vision +H100-80GB ×1 +87% +62% +40\.0/80 GiB +40% +\$3\.20 +\$1\.60$`).MatchString(lines[1]) {
		t.Fatalf("top:\n%s", b.String())
	}
}

// TestFollowDeadlineMidRead: a --wait whose time runs out while a read is
// under way (a server slower than the wait) says the status last seen —
// here the launch's own — not that the server failed.
func TestFollowDeadlineMidRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // answers no read before the client gives up
	}))
	defer srv.Close()
	cl, err := client.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = follow(context.Background(), cl, model.Workload{Id: "abcd1234", Status: model.Pending}, 300*time.Millisecond, io.Discard)
	if err == nil || err.Error() != "workload abcd1234 still Pending after 300ms" {
		t.Errorf("got %v", err)
	}
}
