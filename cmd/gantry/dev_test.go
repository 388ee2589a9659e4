package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestDev runs `gantry dev` as a newcomer would (from the repository), launches
// a notebook through the API, sees it Running on the MIG node with kubectl, and
// stops it with a cancel, as Ctrl-C does: the cluster is removed.
func TestDev(t *testing.T) {
	if os.Getenv("GANTRY_TEST_CLUSTER") == "" && os.Getenv("CI") == "" {
		t.Skip("GANTRY_TEST_CLUSTER is not set: the local cluster test is skipped (make test runs it)")
	}
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) }) // gantry dev moves to the repository root
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	done, finished := make(chan int, 1), make(chan struct{})
	var stderr strings.Builder
	go func() {
		defer close(finished)
		done <- run(ctx, []string{"dev", "--listen", "127.0.0.1:0"}, outW, &stderr)
		outW.Close()
	}()
	// However the test ends (a failure included), gantry dev is stopped as
	// Ctrl-C stops it, and removes its cluster: not left running after the
	// test binary exits.
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(90 * time.Second):
			t.Error("gantry dev did not stop within 90 s of the cancel: its cluster may be left running")
		}
	})
	var url, kubectl, tok string
	var realNode bool // gantry dev says the CPU node is real
	sc := bufio.NewScanner(outR)
	urlRE := regexp.MustCompile(`Gantry is running at (http://\S+)`)
	tokRE := regexp.MustCompile(`export GANTRY_TOKEN=(gnt_\S+)`)
	for sc.Scan() {
		line := sc.Text()
		if m := urlRE.FindStringSubmatch(line); m != nil {
			url = m[1]
		}
		if m := tokRE.FindStringSubmatch(line); m != nil {
			tok = m[1]
		}
		if strings.Contains(line, "/kubectl --kubeconfig") {
			kubectl = strings.TrimSpace(line)
		}
		if strings.Contains(line, "open a real Jupyter notebook there") {
			realNode = true
		}
		if strings.HasPrefix(line, "Stop with Ctrl-C") {
			break
		}
	}
	go io.Copy(io.Discard, outR)
	if url == "" || kubectl == "" || tok == "" {
		cancel()
		t.Fatalf("gantry dev printed no URL, token or kubectl line; stderr:\n%s", stderr.String())
	}
	// Unauthenticated: refused. With the printed token (alice, team vision): launched.
	resp, err := http.Post(url+"/api/v1/workloads", "application/json", strings.NewReader(`{"template":"jupyter-notebook","team":"vision"}`))
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("launch without credentials: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodPost, url+"/api/v1/workloads", strings.NewReader(`{"template":"jupyter-notebook","team":"vision"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var launched struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&launched)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("launch: %d", resp.StatusCode)
	}
	fields := strings.Fields(kubectl) // <bin>/kubectl --kubeconfig <file> get nodes ...
	kubeconfig := fields[2]
	var node string
	waitfor.Until(t, 60*time.Second, "the notebook's pod to run", func() error {
		out, _ := execOutput(fields[0], "--kubeconfig", kubeconfig, "get", "pods", "-n", "gantry-vision", "-o", "jsonpath={.items[0].status.phase}/{.items[0].spec.nodeName}")
		if !strings.HasPrefix(out, "Running/") {
			return fmt.Errorf("pod: %q", out)
		}
		node = strings.TrimPrefix(out, "Running/")
		return nil
	})
	if node != "h100-mig-0" {
		t.Errorf("notebook ran on %q, want the MIG node h100-mig-0", node)
	}
	// Its simulated MIG instance's series, live through the API.
	waitfor.Until(t, 90*time.Second, "the notebook's GPU series through the API", func() error {
		req, _ := http.NewRequest(http.MethodGet, url+"/api/v1/workloads/"+launched.ID+"/metrics?step=10s&series=fb_used,gpu_util", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var m struct {
			Series []struct {
				Metric string
				Device struct{ Mig *struct{ Profile string } }
				Points []struct{ N int }
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("%d %v", resp.StatusCode, err)
		}
		if len(m.Series) != 2 || m.Series[0].Device.Mig == nil || len(m.Series[0].Points) == 0 {
			return fmt.Errorf("series: %+v", m.Series)
		}
		return nil
	})
	// The CLI against it, as a person would use it after `make dev`.
	t.Setenv("GANTRY_SERVER", url)
	t.Setenv("GANTRY_TOKEN", tok)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cli := func(args ...string) (int, string, string) {
		var o, e strings.Builder
		code := run(context.Background(), args, &o, &e)
		return code, o.String(), e.String()
	}
	code, out, errOut := cli("launch", "pytorch-train", "--team", "vision", "--gpu", "H100-80GB:1", "--wait", "--timeout", "90s")
	// Progress: a line per state seen (not a terminal: no spinner), ending
	// Running. A waiting state may be over before the first poll on a fast
	// cluster, so it is not required; every line is a state.
	if code != 0 || !regexp.MustCompile(`(?m)^ +\d+s  (Running|Succeeded)$`).MatchString(errOut) ||
		!regexp.MustCompile(`^(launched .*\n)?( +\d+s  (Pending|Queued|Scheduled|Running|Succeeded)(: .+)?\n)+$`).MatchString(errOut) {
		t.Errorf("launch --wait: %d %q %q", code, out, errOut)
	}
	waitfor.Until(t, 60*time.Second, "gantry top to show the notebook's GPU use", func() error {
		code, out, errOut := cli("top", "--team", "vision", "-o", "json")
		var rows []struct {
			ID          string
			Measured    bool
			MemTotalMiB float64
		}
		if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil {
			return fmt.Errorf("top: %d %v %q", code, err, errOut)
		}
		for _, r := range rows {
			if r.ID == launched.ID && r.Measured && r.MemTotalMiB > 0 {
				return nil
			}
		}
		return fmt.Errorf("top: %s", out)
	})
	if code, out, errOut := cli("logs", launched.ID, "--tail", "5"); code != 0 || !strings.Contains(out, "simulated container") {
		t.Errorf("logs: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli("stop", launched.ID); code != 0 || out != launched.ID+": Stopped\n" {
		t.Errorf("stop: %d %q %q", code, out, errOut)
	}
	// A trial on two classes: the simulated runs report at the per-class
	// model's pace (package devrun: 0.4 s a step on an H100, 1 s on an
	// A100), each is stopped at its 15th step, and one is the cheapest.
	// (The model's steps vary by up to 3 %: the median is within 5 %.)
	code, out, errOut = cli("trial", "pytorch-train", "--team", "vision", "--classes", "H100-80GB,A100-80GB", "--steps", "15", "--wait", "--timeout", "150s")
	stepTime := func(class string) float64 {
		m := regexp.MustCompile(`(?m)^\*?\s+` + class + ` × 1\s+Stopped\s+15\s+([0-9.]+) `).FindStringSubmatch(out)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	if h, a := stepTime("H100-80GB"), stepTime("A100-80GB"); code != 0 || math.Abs(h-0.403) > 0.02 || math.Abs(a-1) > 0.05 ||
		!strings.Contains(out, "is the cheapest of 2 measured choices: the full run (10000 steps)") {
		t.Errorf("trial --wait: %d (H100 %v s a step, A100 %v)\n%s\n%s", code, h, a, out, errOut)
	}
	// A node appears for a launch: a service takes the reserved H100
	// machine whole, and the next H100 launch (borrowing from the cohort)
	// runs on a machine Karpenter boots in the on-demand group.
	code, out, errOut = cli("launch", "vllm-inference", "--team", "vision", "--gpu", "H100-80GB:8", "--wait", "--timeout", "90s", "-o", "json")
	var reserved struct{ ID string }
	if err := json.Unmarshal([]byte(out), &reserved); code != 0 || err != nil {
		t.Fatalf("the reserved machine's service: %d %q %q", code, out, errOut)
	}
	// It is billed at the reserved machine's price ($38 a machine-hour for
	// its 8 GPUs), not the class's on-demand $6.9 a GPU-hour.
	waitfor.Until(t, 30*time.Second, "the service priced at its node group's price", func() error {
		_, out, _ := cli("get", reserved.ID, "-o", "json")
		var w struct {
			NodeGroup    string
			PricePerHour float64
		}
		if err := json.Unmarshal([]byte(out), &w); err != nil || w.NodeGroup != "h100-reserved" || w.PricePerHour != 38 {
			return fmt.Errorf("%q: %v", out, err)
		}
		return nil
	})
	code, out, errOut = cli("launch", "vllm-inference", "--team", "vision", "--gpu", "H100-80GB:2", "--wait", "--timeout", "120s")
	if code != 0 {
		t.Fatalf("a launch beyond the reserved machine: %d %q %q", code, out, errOut)
	}
	waitfor.Until(t, 30*time.Second, "the second service on an on-demand machine", func() error {
		out, _ := execOutput(fields[0], "--kubeconfig", kubeconfig, "get", "nodes", "-l", "gantry.dev/node-group=h100-on-demand", "-o", "jsonpath={.items[*].metadata.name}")
		if out == "" {
			return fmt.Errorf("no machine in h100-on-demand")
		}
		pods, _ := execOutput(fields[0], "--kubeconfig", kubeconfig, "get", "pods", "-n", "gantry-vision", "-o", "jsonpath={.items[*].spec.nodeName}")
		for _, n := range strings.Fields(out) {
			if strings.Contains(pods, n) {
				return nil
			}
		}
		return fmt.Errorf("pods on %q, on-demand machines %q", pods, out)
	})
	// A newcomer's first real notebook: the catalog's CPU notebook on the
	// real node, through /w/{id}/, runs code.
	if realNode {
		cpuNotebookRunsCode(t, url, tok)
	} else if why := devcluster.CanRunRealNode(); devcluster.RealNodeRequired(why) {
		t.Errorf("gantry dev started no real node on a machine that can run one; stderr:\n%s", stderr.String())
	} else {
		t.Logf("no real node here (%v): the CPU notebook is not tried", why)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("gantry dev exited %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("gantry dev did not stop within a minute of the cancel")
	}
	if _, err := os.Stat(filepath.Dir(kubeconfig)); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory %s is still there", filepath.Dir(kubeconfig))
	}
}

// cpuNotebookRunsCode launches the catalog's CPU notebook as the printed
// token's owner, waits for Debian's Jupyter to answer through Gantry's
// /w/{id}/, starts a kernel and runs print(6*7) over its websocket.
func cpuNotebookRunsCode(t *testing.T, url, tok string) {
	t.Helper()
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	s, body := call("POST", "/api/v1/workloads", `{"template":"cpu-notebook","team":"vision"}`)
	var w struct{ ID, URL string }
	if err := json.Unmarshal([]byte(body), &w); s != 201 || err != nil || w.URL == "" {
		t.Fatalf("launch cpu-notebook: %d %s", s, body)
	}
	waitfor.Until(t, 4*time.Minute, "Jupyter answering through "+w.URL, func() error {
		if s, body := call("GET", w.URL+"api", ""); s != 200 || !strings.Contains(body, `"version"`) {
			return fmt.Errorf("%d %.200s", s, body)
		}
		return nil
	})
	s, body = call("POST", w.URL+"api/kernels", `{"name": "python3"}`)
	var kernel struct{ ID string }
	if err := json.Unmarshal([]byte(body), &kernel); s != 201 || err != nil || kernel.ID == "" {
		t.Fatalf("start a kernel: %d %s", s, body)
	}
	ws := strings.Replace(url, "http://", "ws://", 1) + w.URL + "api/kernels/" + kernel.ID + "/channels?session_id=dev"
	if got := servertest.RunCell(t, ws, tok, "print(6*7)"); got != "42\n" {
		t.Fatalf("print(6*7) printed %q", got)
	}
	if s, body := call("DELETE", "/api/v1/workloads/"+w.ID, ""); s >= 300 {
		t.Errorf("delete the notebook: %d %s", s, body)
	}
}
