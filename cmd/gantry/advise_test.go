package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdviseReplay: the command replays the training trace and writes one
// decision per line with the trace's own Unix times, and the score.
func TestAdviseReplay(t *testing.T) {
	out := filepath.Join(t.TempDir(), "decisions.jsonl")
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"advise", "replay", "--format", "alibaba-genai", "--dir", "../../internal/advice/testdata/genai-train",
		"--gpu-class", "H100-80GB", "--gpu-classes", "../../templates/gpu-classes.yaml", "-o", out, "--score"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "right-sizing: GPU share saved") || !strings.Contains(stdout.String(), "  30:  264.1 h   344   176") {
		t.Fatalf("score:\n%s", stdout.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var d struct {
			Pod     string
			T       int64
			Action  string
			Profile string
		}
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil || d.Pod == "" || d.T < 1662858720 || (d.Action != "resize" && d.Action != "stop") || (d.Action == "resize") != (d.Profile != "") {
			t.Fatalf("line %d: %s (%v)", n+1, sc.Text(), err)
		}
		n++
	}
	if n < 100 {
		t.Fatalf("%d decisions", n)
	}
	if code := run(context.Background(), []string{"advise", "replay", "--dir", "nowhere", "--gpu-classes", "../../templates/gpu-classes.yaml"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "nowhere") {
		t.Fatalf("a missing trace: exit %d, %s", code, stderr.String())
	}
}
