package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/config"
)

// TestTrialVerbs: gantry trial starts one (its runs listed), gantry trials
// lists it and shows its table, gantry get says a run is the trial's, and
// a bad request is refused with its fields named.
func TestTrialVerbs(t *testing.T) {
	g := startGantry(t, func(c *config.Config) { c.Runs.ReportURL = "http://gantry.gantry-system.svc:8080" })
	t.Setenv("GANTRY_TOKEN", g.Token("lee"))
	t.Setenv("GANTRY_SERVER", g.URL)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cli := func(args ...string) (code int, out, errOut string) {
		var o, e bytes.Buffer
		code = run(context.Background(), args, &o, &e)
		return code, o.String(), e.String()
	}
	code, out, errOut := cli("trial", "pytorch-train", "--team", "vision", "--classes", "H100-80GB,A100-80GB", "--gpus", "1,2", "--steps", "100", "--max-runtime", "20m", "--deadline", "8h")
	m := regexp.MustCompile(`^trial ([a-z0-9]+) of pytorch-train in team vision: 4 runs, each stopped at step 100 or after 20m0s\n  H100-80GB × 1: ([a-z0-9]+)\n`).FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "  A100-80GB × 2: ") {
		t.Fatalf("trial: %d %q %q", code, out, errOut)
	}
	id, run := m[1], m[2]
	if code, out, _ := cli("trials"); code != 0 || !regexp.MustCompile(`(?m)^`+id+`\s+vision\s+pytorch-train\s+4\s+100\s`).MatchString(out) {
		t.Fatalf("trials: %d %q", code, out)
	}
	code, out, _ = cli("trials", id)
	if code != 0 || !strings.Contains(out, "trial "+id+" of pytorch-train in team vision (measuring): each run capped at step 100, 20m0s") ||
		!regexp.MustCompile(`(?m)^\s+H100-80GB × 2\s+Pending\s+0\s+-`).MatchString(out) || !strings.Contains(out, "waiting for the runs' progress reports") {
		t.Fatalf("trials ID: %d %q", code, out)
	}
	if code, out, _ := cli("get", run); code != 0 || !strings.Contains(out, "trial:    "+id+" (gantry trials "+id+")") {
		t.Fatalf("get a trial's run: %d %q", code, out)
	}
	code, out, errOut = cli("trial", "pytorch-train", "--team", "vision", "--classes", "H100-80GB,L4", "--steps", "100")
	if code == 0 || !strings.Contains(errOut, "classes[1]: L4 × 1 GPUs (gpus[0]):") {
		t.Fatalf("a class the template does not offer: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli("trial", "pytorch-train", "--team", "vision", "--classes", "H100-80GB", "--steps", "100", "--gpus", "1,x"); code != 2 || !strings.Contains(errOut, `--gpus "1,x": want positive numbers`) {
		t.Fatalf("a bad --gpus: %d %q", code, errOut)
	}
	// MIG slices beside the whole GPU: a run of each, named by its profile.
	code, out, errOut = cli("trial", "batch-inference", "--team", "vision", "--classes", "H100-80GB", "--mig", "3g.40gb, 7g.80gb", "--steps", "50", "--set", "input=p.jsonl")
	if code != 0 || !regexp.MustCompile(`: 3 runs, each stopped at step 50 .*\n  H100-80GB × 1: [a-z0-9]+\n  H100-80GB 3g.40gb: [a-z0-9]+\n  H100-80GB 7g.80gb: [a-z0-9]+\n`).MatchString(out) {
		t.Fatalf("a trial of MIG slices: %d %q %q", code, out, errOut)
	}
	// A profile the template does not allow refuses the trial, named.
	code, out, errOut = cli("trial", "batch-inference", "--team", "vision", "--classes", "H100-80GB", "--mig", "1g.10gb", "--steps", "50", "--set", "input=p.jsonl")
	if code == 0 || !strings.Contains(errOut, "migProfiles[0]: H100-80GB with 1g.10gb (classes[0]):") {
		t.Fatalf("a profile the template does not allow: %d %q %q", code, out, errOut)
	}
}
