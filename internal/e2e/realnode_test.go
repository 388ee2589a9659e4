package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// realNode returns Gantry on the cluster with the real node pulling the
// catalog's images from Gantry's local signed registry; without a real node
// it skips (and fails in CI, which can run one).
func realNode(t *testing.T) *gantryServer {
	t.Helper()
	g := start(t, storetest.SQLitePath(t), true)
	_, err := cluster.RealNode()
	clustertest.NeedRealNode(t, "the real node", err)
	if err := cluster.MirrorRegistries(g.Images.Verifier.Mirrors()); err != nil {
		t.Fatal(err)
	}
	return g
}

// cpuJob launches the cpu-job template for team with params, as ada.
func (g *gantryServer) cpuJob(team string, params model.Parameters) model.Workload {
	g.t.Helper()
	s, w := g.launch(model.LaunchRequest{Template: "cpu-job", Team: team, Parameters: &params})
	if s != 201 {
		g.t.Fatalf("launch of cpu-job %v: %d", params, s)
	}
	return w
}

// TestCPUJobRunsForReal: the cpu-job template's CPU-only launch runs in a
// real container on the cluster's CPU node, from the catalog's image as the
// launch verified it (signed, pinned by digest, pulled from the registry):
// its output is the container's own through the logs API, a script that
// exits 3 leaves the workload Failed with exit code 3 and the end of its log in the reason, one over its memory
// limit Failed OOMKilled, and the price is per core-hour.
func TestCPUJobRunsForReal(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go
	holdRealNode(t, 1)
	g := realNode(t)
	run := func(script, memory string) model.Workload {
		t.Helper()
		params := model.Parameters{"script": script, "cpu": "1"}
		if memory != "" {
			params["memory"] = memory
		}
		w := g.cpuJob("realnode", params)
		if w.Gpu.Class != "CPU" || w.Gpu.Count != 0 || w.PricePerHour != 0.05 {
			t.Fatalf("launched %s", asJSON(w))
		}
		return w
	}
	logs := func(id string) string {
		r := servertest.Must(g.api.GetWorkloadLogsWithResponse(t.Context(), id, nil))(t)
		return string(r.Body)
	}

	// The estimate weighs the real node's CPU: a CPU node exists and has
	// the core (it starts now, or — another test's pod still on the node —
	// waits for room; never "no CPU node" nor "never").
	params := model.Parameters{"script": "true", "cpu": "1"}
	one := model.LaunchRequest{Template: "cpu-job", Team: "realnode", Parameters: &params}
	est := servertest.Must(g.api.EstimateWorkloadWithResponse(t.Context(), nil, one))(t)
	if e := servertest.Deref(est.JSON200); est.StatusCode() != 200 || !e.Known || strings.Contains(servertest.Deref(e.Why), "never") ||
		!e.StartsNow && !strings.Contains(servertest.Deref(e.Why), "waiting for room") {
		t.Errorf("the estimate of a one-core job on the real node: %d %s", est.StatusCode(), est.Body)
	}

	ok := run(`echo "6*7 = $((6*7)) in $(hostname)"`, "")
	w := g.waitStatusWithin(3*time.Minute, ok.Id, "Succeeded", "Failed") // on a cold run, the image's first use on the node
	if w.Status != "Succeeded" || servertest.Deref(w.ExitCode) != 0 {
		t.Fatalf("the script ended %s (exit code %v): %s", w.Status, w.ExitCode, asJSON(w))
	}
	if pods := podsOf(t, "realnode", ok.Id); len(pods) != 1 || pods[0].Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("pods %v, want one on %s", len(pods), devcluster.RealNodeName)
	}
	waitfor.Until(t, 30*time.Second, "the container's own output", func() error {
		if got := logs(ok.Id); !strings.Contains(got, "6*7 = 42 in cpu-job-"+ok.Id) {
			return fmt.Errorf("logs %q", got)
		}
		return nil
	})

	failed := run("echo about to fail; exit 3", "")
	w = g.waitStatus(failed.Id, "Failed", "Succeeded")
	if w.Status != "Failed" || servertest.Deref(w.ExitCode) != 3 || !strings.Contains(servertest.Deref(w.Reason), "its container exited with code 3: about to fail") {
		t.Fatalf("exit 3 ended %s (exit code %v, %s)", w.Status, w.ExitCode, servertest.Deref(w.Reason))
	}

	oom := run("head -c 300m /dev/zero | tail", "128Mi")
	w = g.waitStatus(oom.Id, "Failed", "Succeeded")
	if w.Status != "Failed" || !strings.Contains(servertest.Deref(w.Reason), "OOMKilled: the container used more memory than its limit of 128Mi: launch it again with more memory") {
		t.Fatalf("over its memory it ended %s: %q", w.Status, servertest.Deref(w.Reason))
	}
}

// TestCPUCoresQuota: team onecore's quota.cores (one core) holds on the
// real node through Kueue, which counts the pods' CPU: the estimate says a
// two-core launch can never start and, while one job holds the core, that
// the next one queues; that next one waits in Kueue's queue with Kueue's
// reason and runs on the real node once the first is stopped.
func TestCPUCoresQuota(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go
	holdRealNode(t, 1)
	g := realNode(t)
	estimate := func(cpu string) model.Estimate {
		t.Helper()
		params := model.Parameters{"script": "true", "cpu": cpu}
		r := servertest.Must(g.api.EstimateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: "cpu-job", Team: "onecore", Parameters: &params}))(t)
		if r.StatusCode() != 200 {
			t.Fatalf("estimate: %d %s", r.StatusCode(), r.Body)
		}
		return servertest.Deref(r.JSON200)
	}
	if e := estimate("2"); e.StartsNow || !strings.Contains(servertest.Deref(e.Why), "more than the team's quota of cores (1;") {
		t.Errorf("the estimate of two cores under a quota of one: %s", asJSON(e))
	}

	// It ends at once when stopped (a shell as PID 1 ignores SIGTERM).
	first := g.cpuJob("onecore", model.Parameters{"script": "trap 'exit 0' TERM; sleep 600 & wait", "cpu": "1"})
	g.waitStatus(first.Id, "Running")
	if pods := podsOf(t, "onecore", first.Id); len(pods) != 1 || pods[0].Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("pods %v, want one on %s", len(pods), devcluster.RealNodeName)
	}
	waitfor.Until(t, 30*time.Second, "the estimate to see the core in use", func() error {
		if e := estimate("1"); e.StartsNow || !strings.Contains(servertest.Deref(e.Why), "queued: it needs 1 cores and the team's quota of 1 cores has 0 left") || e.QuotaUsed != 1 {
			return fmt.Errorf("%s", asJSON(e))
		}
		return nil
	})

	second := g.cpuJob("onecore", model.Parameters{"script": "echo second", "cpu": "1"})
	waitfor.Until(t, 60*time.Second, "the second job queued by Kueue for want of quota", func() error {
		if w := g.workload(second.Id); w.Status != "Queued" || !strings.Contains(servertest.Deref(w.Reason), "insufficient unused quota") {
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		return nil
	})
	if pods := podsOf(t, "onecore", second.Id); len(pods) != 0 {
		t.Fatalf("the queued job has %d pods", len(pods))
	}
	if s, _ := g.stop(first.Id); s != 200 {
		t.Fatalf("stop: %d", s)
	}
	if w := g.waitStatus(second.Id, "Succeeded", "Failed"); w.Status != "Succeeded" {
		t.Fatalf("the second job ended %s (%s)", w.Status, servertest.Deref(w.Reason))
	}
	if pods := podsOf(t, "onecore", second.Id); len(pods) != 1 || pods[0].Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("pods %v, want one on %s", len(pods), devcluster.RealNodeName)
	}
}

// TestCPUNotebookRunsCode: the cpu-notebook template's notebook — Debian's
// Jupyter, built from Debian's packages and published by the local signed
// registry — runs on the real node and is opened through Gantry's proxy at
// /w/{id}/ as its owner: a kernel started over the Jupyter API runs
// print(6*7) over its websocket and answers 42; a file written to the home
// volume is there again after the notebook is stopped and started.
func TestCPUNotebookRunsCode(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go
	holdRealNode(t, 1)
	g := notebookGantry(t)
	ctx := t.Context()
	tok := g.Token("alice")
	alice := servertest.Client(g.URL, tok)
	r := servertest.Must(alice.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "cpu-notebook", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d %s", r.StatusCode(), r.Body)
	}
	w := servertest.Deref(r.JSON201)
	base := g.URL + servertest.Deref(w.Url) // /w/{id}/
	// app calls the notebook's Jupyter API through Gantry as alice.
	app := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
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
	up := func(what string) {
		t.Helper()
		waitfor.Until(t, 3*time.Minute, what, func() error {
			if s, body := app("GET", "api", ""); s != 200 || !strings.Contains(body, `"version": "6.4`) && !strings.Contains(body, `"version":"6.4`) {
				return fmt.Errorf("%d %.200s (workload %s)", s, body, servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(ctx, w.Id))(t).JSON200).Status)
			}
			return nil
		})
	}
	up("Jupyter answering through /w/" + w.Id + "/")

	s, body := app("POST", "api/kernels", `{"name": "python3"}`)
	var kernel struct{ ID string }
	if err := json.Unmarshal([]byte(body), &kernel); s != 201 || err != nil || kernel.ID == "" {
		t.Fatalf("start a kernel: %d %s", s, body)
	}
	if got := servertest.RunCell(t, strings.Replace(base, "http://", "ws://", 1)+"api/kernels/"+kernel.ID+"/channels?session_id=e2e", tok, "print(6*7)"); got != "42\n" {
		t.Fatalf("print(6*7) printed %q", got)
	}

	if s, body := app("PUT", "api/contents/kept.txt", `{"type": "file", "format": "text", "content": "written before the stop"}`); s != 201 && s != 200 {
		t.Fatalf("write a file: %d %s", s, body)
	}
	if r := servertest.Must(alice.StopWorkloadWithResponse(ctx, w.Id))(t); r.StatusCode() != 200 {
		t.Fatalf("stop: %d %s", r.StatusCode(), r.Body)
	}
	waitfor.Until(t, 2*time.Minute, "the notebook stopped and its pod gone", func() error {
		if got := servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(ctx, w.Id))(t).JSON200).Status; got != "Stopped" {
			return fmt.Errorf("it is %s", got)
		}
		if pods := podsOf(t, "vision", w.Id); len(pods) > 0 {
			return fmt.Errorf("%d pods", len(pods))
		}
		return nil
	})
	if r := servertest.Must(alice.StartWorkloadWithResponse(ctx, w.Id))(t); r.StatusCode() != 200 {
		t.Fatalf("start: %d %s", r.StatusCode(), r.Body)
	}
	up("Jupyter answering again after the start")
	if s, body := app("GET", "api/contents/kept.txt?content=1", ""); s != 200 || !strings.Contains(body, "written before the stop") {
		t.Fatalf("the file after a stop and a start: %d %.300s", s, body)
	}
	if r := servertest.Must(alice.DeleteWorkloadWithResponse(ctx, w.Id))(t); r.StatusCode() >= 300 {
		t.Errorf("delete: %d %s", r.StatusCode(), r.Body)
	}
}

// TestPortalCPUNotebook: in Chromium, alice launches the CPU notebook from
// the portal (its one choice, CPU only, priced per hour), follows Open to
// /w/{id}/ — Debian's Jupyter on the real node, through Gantry's proxy —
// opens a new notebook, and a cell's print(6*7) shows 42 (the kernel's
// websocket through the proxy, from the browser).
func TestPortalCPUNotebook(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go
	holdRealNode(t, 1)
	g := notebookGantry(t)
	ctx := servertest.Browser(t, 4*time.Minute)
	pg := servertest.NewPage(t, ctx, 3*time.Minute)
	step, js, poll := pg.Do, pg.JS, pg.Poll

	pg.SignIn(g.URL+"/launch/cpu-notebook", "alice", "launch")
	poll("the CPU-only choice", `document.getElementById('f-class').value === '(cpu)' && document.getElementById('f-count').closest('.field').hidden`)
	poll("the estimate", `document.getElementById('estimate').textContent.includes('per hour') && document.getElementById('estimate').textContent.includes('CPU-only')`)
	step("submit, land on the workload's page", chromedp.Click(chromedp.ID("submit")), chromedp.WaitVisible(chromedp.ID("w-status")))
	id := strings.TrimPrefix(js(`location.pathname`), "/workloads/")
	t.Cleanup(func() {
		alice := servertest.Client(g.URL, g.Token("alice"))
		servertest.Must(alice.DeleteWorkloadWithResponse(context.Background(), id))(t)
	})
	poll("Open, once it runs", `!!document.getElementById('open')`)
	// Open goes to a new tab (target=_blank): the test follows its address here.
	href := js(`document.getElementById('open').getAttribute('href')`)
	if href != "/w/"+id+"/" {
		t.Fatalf("Open links to %q", href)
	}
	// Running is the pod's; Jupyter answers a moment later.
	tok := g.Token("alice")
	waitfor.Until(t, 2*time.Minute, "Jupyter answering through "+href, func() error {
		req, _ := http.NewRequest("GET", g.URL+href+"api", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	})
	step("open the notebook's app", chromedp.Navigate(g.URL+href))
	poll("Jupyter's file list", `!!document.getElementById('notebook_list')`)
	// A new notebook, as New → Python 3 makes one (through the contents API).
	path, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch('api/contents', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({type: 'notebook'})}).then(r => r.json()).then(j => j.path)`, chromedp.EvalAwaitPromise))
	if err != nil || path == "" {
		t.Fatalf("a new notebook: %q %v", path, err)
	}
	step("open it", chromedp.Navigate(g.URL+href+"notebooks/"+path))
	poll("its kernel connected", `!!(window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel && Jupyter.notebook.kernel.is_connected())`)
	step("run print(6*7)", chromedp.Evaluate[chromedp.Void](`(() => { const c = Jupyter.notebook.get_cell(0); c.set_text('print(6*7)'); c.execute(); })()`))
	poll("42 under the cell", `(() => { const o = document.querySelector('.output_subarea'); return !!o && o.textContent.trim() === '42'; })()`)
	screenshot(t, ctx, "cpu-notebook")
}

// notebookGantry is appGantry with Debian's Jupyter image.
func notebookGantry(t *testing.T) *servertest.Gantry {
	t.Helper()
	return appGantry(t, nil, "jupyter:6.4-debian12")
}

// appGantry is Gantry on the cluster whose /w/{id}/ proxy reaches the real
// node's pods (appDial: endpoints) and whose local registry the real node pulls
// from, with the real images named (name:tag) built, its configuration
// changed by edit; without the images or the real node it skips (and fails
// in CI, which builds and runs both).
func appGantry(t *testing.T, edit func(*config.Config), images ...string) *servertest.Gantry {
	t.Helper()
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	_, err := cluster.RealNode()
	clustertest.NeedRealNode(t, "the real node", err) // first: the images are built where it can run
	for _, img := range images {
		name, tag, _ := strings.Cut(img, ":")
		_, err := os.Stat(filepath.Join(devregistry.ImagesDir(), name, tag, "layer.json"))
		clustertest.NeedRealNode(t, "the image "+img+" (deploy/images/build.sh, as root; .ci/test runs it)", err)
	}
	ns := "gantry-e2e-" + workload.NewID()
	grantLease(t, ns)
	// The real node's pods report their progress to this Gantry through a
	// forwarder on the host's side of the node's veth pair.
	var gantryAddr atomic.Value
	gantryAddr.Store("")
	fwd, stop, err := cluster.Forward(func() string { return gantryAddr.Load().(string) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	g := servertest.WithOverrides(t, server.Overrides{}, func(c *config.Config) {
		c.AppDial = config.AppDialEndpoints // as the chart's appDial sets it
		c.Database.DSN = config.Secret(storetest.SQLitePath(t))
		c.PolicyDir = testPolicy(t)
		c.ReconcileInterval = config.Duration(time.Second)
		c.Namespace = ns
		c.Kubeconfig = gantryKubeconfig
		c.Runs.ReportURL = "http://" + fwd
		if edit != nil {
			edit(c)
		}
	})
	gantryAddr.Store(strings.TrimPrefix(g.URL, "http://"))
	if err := cluster.MirrorRegistries(g.Images.Verifier.Mirrors()); err != nil {
		t.Fatal(err)
	}
	return g
}

// cpuTrainRun launches the cpu-train job for steps steps of 0.2 s on the
// real node as alice, holding a slot there until the test ends; edit (nil:
// none) changes Gantry's configuration.
func cpuTrainRun(t *testing.T, steps int, edit func(*config.Config)) (*servertest.Gantry, *client.ClientWithResponses, string) {
	t.Helper()
	return cpuTrain(t, 1, steps, edit)
}

// cpuTrain is cpuTrainRun holding slots slots of the real node.
func cpuTrain(t *testing.T, slots, steps int, edit func(*config.Config)) (*servertest.Gantry, *client.ClientWithResponses, string) {
	t.Helper()
	holdRealNode(t, slots)
	g := appGantry(t, edit, "pytorch-cpu:1.13-debian12")
	alice := servertest.Client(g.URL, g.Token("alice"))
	params := model.Parameters{"steps": steps, "stepDelay": "0.2"}
	return g, alice, launchAs(t, alice, model.LaunchRequest{Template: "cpu-train", Team: "vision", Parameters: &params}).Id
}

// TestCPUTrainingResumes: the cpu-train template's job — Debian's CPU
// PyTorch training a small network on the real node — logs its loss through
// the logs API and checkpoints to its volume; its process SIGKILLed mid-run, the
// Job's next pod resumes from the newest checkpoint on the same volume and
// finishes at the same total steps, and the workload Succeeded.
func TestCPUTrainingResumes(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go

	const steps = 150 // about 30 s of steps
	g, alice, id := cpuTrainRun(t, steps, nil)
	ctx := t.Context()
	logs := func() string {
		return string(servertest.Must(alice.GetWorkloadLogsWithResponse(ctx, id, nil))(t).Body)
	}
	status := func() model.Workload {
		return servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(ctx, id))(t).JSON200)
	}
	// The whole log from its start, in one read: the start, the metrics
	// lines and the first checkpoint. (Once under CI load, with three
	// cluster packages at a time, a read returned only the last two lines;
	// a read is retried until the deadline rather than failing at once.
	// On a cold run, the first use of the PyTorch image, its pod Running
	// with no line logged after 3 minutes: the image unpacked and PyTorch
	// read from disk for the first time, the cores shared.)
	var first string
	waitfor.Until(t, 6*time.Minute, "the job's own log from its start to the first checkpoint", func() error {
		first = logs()
		for _, want := range []string{"starting at step 0 of 150", `"loss": `, `"step_time_ms": `, "checkpoint step 50:"} {
			if !strings.Contains(first, want) {
				w := status()
				return fmt.Errorf("%s (%s), no %q in the log (%d lines, the last %q)", w.Status, servertest.Deref(w.Reason), want, strings.Count(first, "\n"), lastLines(first, 3))
			}
		}
		return nil
	})
	pods := podsOf(t, "vision", id)
	if len(pods) != 1 || pods[0].Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("pods %d, want one on %s", len(pods), devcluster.RealNodeName)
	}
	killed := pods[0].Name
	// SIGKILL, as a lost node or the OOM killer ends it: no SIGTERM, so no
	// checkpoint at the step at hand (TestCPUTrainingMovedOffFailedGPU
	// has that path); the run's own process, found by its workload's id.
	var pids []string
	for _, pid := range processes("python3", "/opt/gantry/train.py") {
		if env, err := os.ReadFile("/proc/" + pid + "/environ"); err == nil && strings.Contains("\x00"+string(env), "\x00GANTRY_WORKLOAD_ID="+id+"\x00") {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("train.py processes of %s on this machine: %v", id, pids)
	}
	pid, _ := strconv.Atoi(pids[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var w model.Workload
	waitfor.Until(t, 4*time.Minute, "the job to resume and finish", func() error {
		if w = status(); w.Status != "Succeeded" {
			if w.Status == "Failed" {
				t.Fatalf("it failed: %s; log %q", servertest.Deref(w.Reason), logs())
			}
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		return nil
	})
	// The newest pod's log: resumed from a checkpoint at or after step 50
	// (as far as the first pod got before it was killed), its steps from
	// there to 150 and no further.
	// (Read until whole, as the first: under CI load a read once returned
	// only the log's last three lines.)
	var second string
	waitfor.Until(t, time.Minute, "the resumed run's log from its start", func() error {
		if second = logs(); !strings.Contains(second, "resumed from step ") {
			return fmt.Errorf("no resume in the log (%d lines, the last %q)", strings.Count(second, "\n"), lastLines(second, 3))
		}
		return nil
	})
	at := strings.Index(second, "resumed from step ")
	var from int
	if _, err := fmt.Sscanf(second[at:], "resumed from step %d", &from); err != nil || from < 50 || from >= steps || from%50 != 0 {
		t.Fatalf("resumed from step %d (%v): %q", from, err, second)
	}
	if strings.Contains(second, "starting at step 0") || !strings.Contains(second, fmt.Sprintf(`{"step": %d, "total_steps": 150`, from+10)) ||
		!strings.Contains(second, "finished 150/150 steps") || strings.Contains(second, `{"step": 160`) {
		t.Fatalf("the resumed run's log: %q", second)
	}
	if pods := podsOf(t, "vision", id); !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name != killed }) {
		t.Errorf("no pod but the killed one, %s: the Job did not start another", killed)
	}
	// The same log through the CLI, as its owner reads it.
	cli := exec.CommandContext(ctx, servertest.Binary(t), "logs", id, "--tail", "5")
	cli.Env = append(os.Environ(), "GANTRY_SERVER="+g.URL, "GANTRY_TOKEN="+g.Token("alice"), "HOME="+t.TempDir())
	if out, err := cli.CombinedOutput(); err != nil || !strings.Contains(string(out), "finished 150/150 steps") {
		t.Errorf("gantry logs %s: %v\n%s", id, err, out)
	}
	if servertest.Deref(w.ExitCode) != 0 {
		t.Errorf("exit code %v", w.ExitCode)
	}
	// The run reported its progress with its pod's token (gantry.run in
	// the image): both runs, the restart and the checkpoint it resumed
	// from, its loss and pace.
	p := servertest.Must(alice.GetWorkloadProgressWithResponse(ctx, id, nil))(t)
	pr := servertest.Deref(p.JSON200)
	if p.StatusCode() != 200 || !pr.Reported || servertest.Deref(pr.Step) != steps || servertest.Deref(pr.TotalSteps) != steps ||
		servertest.Deref(pr.Fraction) != 1 || servertest.Deref(pr.Restarts) != 1 || servertest.Deref(pr.ResumedFrom) != int64(from) ||
		servertest.Deref(pr.StepsPerSecond) <= 0 || servertest.Deref(pr.RemainingSeconds) != 0 {
		t.Fatalf("progress: %d %s", p.StatusCode(), p.Body)
	}
	if m := servertest.Deref(pr.Metrics); m["loss"] <= 0 || m["samples_per_s"] <= 0 {
		t.Errorf("metrics %v", m)
	}
	if series := servertest.Deref(pr.Series); len(series) < steps/10 || series[len(series)-1].Step != steps {
		t.Errorf("%d reports in the series, want at least %d ending at step %d", len(series), steps/10, steps)
	}
	// The same reports as time series beside the GPU series: every report
	// that carried a loss behind the loss series' points.
	withLoss := 0
	for _, r := range servertest.Deref(pr.Series) {
		if _, ok := servertest.Deref(r.Metrics)["loss"]; ok {
			withLoss++
		}
	}
	since := servertest.Deref(pr.FirstReportedAt).Add(-time.Minute)
	ms := servertest.Deref(servertest.Must(alice.GetWorkloadMetricsWithResponse(ctx, id, &model.GetWorkloadMetricsParams{From: &since, Step: new("1m"), Series: new("run:loss")}))(t).JSON200)
	inSeries := 0
	for _, s := range ms.Run {
		for _, pt := range s.Points {
			inSeries += pt.N
		}
	}
	if len(ms.Run) != 1 || ms.Run[0].Metric != "loss" || inSeries != withLoss || withLoss == 0 {
		t.Errorf("the run's loss as a series from %s: %d series of %d reports, want one of the %d reports with a loss: %s; the reports: %s", since, len(ms.Run), inSeries, withLoss, asJSON(ms), asJSON(pr.Series))
	}
	// The workload itself carries its progress (no series), in a page too.
	if got := servertest.Deref(status().Progress); servertest.Deref(got.Step) != steps || got.Series != nil {
		t.Errorf("the workload's progress: %s", asJSON(got))
	}
	page := servertest.Deref(servertest.Must(alice.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Team: new("vision"), Ended: new(true)}))(t).JSON200)
	if i := slices.IndexFunc(page.Items, func(x model.Workload) bool { return x.Id == id }); i < 0 || servertest.Deref(page.Items[i].Progress).Step == nil {
		t.Errorf("the workload in a page: found at %d, without its progress", i)
	}
}

// launchAs launches req with the client (a person's), and deletes the
// workload when the test ends.
func launchAs(t *testing.T, c *client.ClientWithResponses, req model.LaunchRequest) model.Workload {
	t.Helper()
	r := createWorkload(t, c, req)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d %s", r.StatusCode(), r.Body)
	}
	w := servertest.Deref(r.JSON201)
	t.Cleanup(func() { servertest.Must(c.DeleteWorkloadWithResponse(context.Background(), w.Id))(t) })
	return w
}

// templateWith is a templates directory of its own holding the catalog's
// template file with old changed to new (a shorter timeout for a test).
func templateWith(t *testing.T, file, old, new string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../templates", file))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(b), old, new, 1)
	if changed == string(b) {
		t.Fatalf("%s has no %q to change", file, old)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// lastLines is the last n lines of s, for failure messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// progressOf is the run id's progress as alice reads it.
func progressOf(t *testing.T, alice *client.ClientWithResponses, id string) model.Progress {
	t.Helper()
	return servertest.Deref(servertest.Must(alice.GetWorkloadProgressWithResponse(t.Context(), id, nil))(t).JSON200)
}

// pastFirstCheckpoint waits for the cpu-train run id (of team vision) to
// report a step past its first checkpoint, every steps in, with steps done
// since that a move or an eviction would lose; it returns that step and the
// run's one pod, a Job's.
func pastFirstCheckpoint(t *testing.T, alice *client.ClientWithResponses, id string, every int64) (int64, corev1.Pod) {
	t.Helper()
	var at int64
	waitfor.Until(t, 5*time.Minute, "the run past its first checkpoint", func() error {
		if at = servertest.Deref(progressOf(t, alice, id).Step); at < every+20 {
			return fmt.Errorf("at step %d", at)
		}
		return nil
	})
	pods := podsOf(t, "vision", id)
	if len(pods) != 1 || len(pods[0].OwnerReferences) != 1 || pods[0].OwnerReferences[0].Kind != "Job" {
		t.Fatalf("pods %d, want one of a Job", len(pods))
	}
	return at, pods[0]
}

// finishedAfterResume waits for the cpu-train run id to resume and finish
// (Succeeded; Failed fails the test) and reads its progress: the furthest
// step its first run reported, the checkpoint the second resumed from, and
// where in the series the second run's first report is (-1: none).
func finishedAfterResume(t *testing.T, alice *client.ClientWithResponses, id string) (w model.Workload, pr model.Progress, reached, from int64, resumedAt int) {
	t.Helper()
	waitfor.Until(t, 4*time.Minute, "the job to resume and finish", func() error {
		w = servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(t.Context(), id))(t).JSON200)
		if w.Status == "Failed" {
			t.Fatalf("it failed: %s", servertest.Deref(w.Reason))
		}
		if w.Status != "Succeeded" {
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		return nil
	})
	pr = progressOf(t, alice, id)
	resumedAt = -1
	for i, r := range servertest.Deref(pr.Series) {
		if r.ResumedFrom != nil {
			resumedAt = i
			break
		}
		reached = max(reached, r.Step)
	}
	return w, pr, reached, servertest.Deref(pr.ResumedFrom), resumedAt
}

// resumedWithNoStepLost waits for the cpu-train run id, interrupted (how:
// "evicted", "stopped") at step at or later, to resume and finish at steps,
// restarted once from a checkpoint at or after at, with none of the steps
// its first run reported lost (its SIGTERM checkpoint).
func resumedWithNoStepLost(t *testing.T, alice *client.ClientWithResponses, id string, steps, at int64, how string) (w model.Workload, reached, from int64) {
	t.Helper()
	w, pr, reached, from, resumedAt := finishedAfterResume(t, alice, id)
	if resumedAt < 0 || servertest.Deref(pr.Restarts) != 1 || from < at || from >= steps || servertest.Deref(pr.Step) != steps {
		t.Fatalf("progress: restarts %d, resumed from %d (%s at step %d or later), step %d; log %q", servertest.Deref(pr.Restarts), from, how, at, servertest.Deref(pr.Step),
			string(servertest.Must(alice.GetWorkloadLogsWithResponse(t.Context(), id, nil))(t).Body))
	}
	if reached < at || reached > from {
		t.Errorf("the first run reached step %d (%d when %s), the second resumed from %d: %d steps lost, want none (the SIGTERM checkpoint)", reached, at, how, from, max(0, reached-from))
	}
	return w, reached, from
}

// TestCPUTrainingMovedOffFailedGPU: the whole quarantine on the real node
// (a kubelet on containerd), its GPU the one part simulated — the real node
// has none, so an agent's reports for it come from the test: a double-bit
// ECC error on the GPU the cpu-train job holds (real PyTorch, checkpointing
// every 50 steps to its volume), mid-run. Gantry taints the node and
// requeues the Job through Kueue; the suspension's SIGTERM has the run
// checkpoint at the step at hand, and with no other node for it the Job
// waits. The agent then reports the GPU healthy (as after a driver reload);
// after telemetry.quarantineClean the preflight check runs on the node as a
// real pod and passes, Gantry takes its own taint off (audited) and leaves
// the node's own, and the Job resumes there from its checkpoint: no step
// it reported lost (the Faults issue's target: at most one checkpoint
// interval), none of its retries used, and its move says so.
func TestCPUTrainingMovedOffFailedGPU(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go

	// A minute of steps: the resumed run lasts long enough (about 40 s) for
	// the quarantine's passes, 5 s apart, to see it running and reporting.
	const steps, every = 300, 50
	g, alice, id := cpuTrain(t, 2, steps, func(c *config.Config) { // both slots: the quarantine keeps any other test's pods off the node
		c.Telemetry.QuarantineClean = config.Duration(time.Minute) // the least it takes
		// The check's stand-in: gantry-agent check reads GPUs through NVML,
		// and the real node has none. What is real is the pod on the node.
		c.Telemetry.PreflightImage = "registry.gantry.internal/library/pytorch-cpu:1.13-debian12"
		c.Telemetry.PreflightCommand = []string{"python3", "-c", `print('{"checked": "the real node has no GPU: a stand-in for gantry-agent check"}')`}
	})
	ctx := t.Context()
	atFault, pod := pastFirstCheckpoint(t, alice, id, every)
	node := pod.Spec.NodeName
	t.Cleanup(func() { release(node) }) // on any failure before Gantry released it
	token := agentToken(t, "gantry-system", "gantry-agent", node, "gantry")
	dev := telemetry.Device{GPU: "GPU-" + node + "-" + id, Index: 0, Model: "NVIDIA H100 80GB HBM3"}
	report := func(ctx context.Context, dbe uint64, on *corev1.Pod) error {
		gpus := []telemetry.GPUState{{Device: dev, MemoryMiB: 81559}}
		gpus[0].ECC.VolatileDBE = dbe
		b := telemetry.Batch{Node: node, GPUs: gpus}
		if on != nil {
			b.Readings = []telemetry.Reading{{Time: time.Now().UTC(), Device: dev, Pod: telemetry.PodRef{Namespace: on.Namespace, Name: on.Name, Container: "main"},
				Share: 1, Attribution: "exclusive", Values: telemetry.Values{telemetry.SMActive: 0.5}}}
		}
		status, body, err := pushBatch(ctx, g.URL, token, b)
		if err == nil && status != 202 {
			err = fmt.Errorf("%d %s", status, body)
		}
		if err != nil {
			return fmt.Errorf("the agent's report (double-bit errors %d): %w", dbe, err)
		}
		return nil
	}
	for _, dbe := range []uint64{0, 1} {
		if err := report(ctx, dbe, &pod); err != nil {
			t.Fatal(err)
		}
	}
	faulted := time.Now() //clock:allow the test measures wall time
	quarantined := func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == nodes.QuarantineTaint })
	}
	waitfor.Until(t, time.Minute, "the real node quarantined", func() error {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && !quarantined(n) {
			err = fmt.Errorf("taints %v", n.Spec.Taints)
		}
		return err
	})
	toTaint := time.Since(faulted)
	waitfor.Until(t, 2*time.Minute, "the job's first pod gone, the Job queued again", func() error {
		w := servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(ctx, id))(t).JSON200)
		ms := servertest.Deref(w.Moves)
		if len(ms) != 1 || ms[0].Phase != model.Moving || slices.ContainsFunc(podsOf(t, "vision", id), func(p corev1.Pod) bool { return p.Name == pod.Name }) {
			return fmt.Errorf("%s (%s), moves %s", w.Status, servertest.Deref(w.Reason), asJSON(ms))
		}
		return nil
	})
	// Healthy again, the agent reporting as it does, every 10 s, until the
	// test ends.
	healthy := time.Now() //clock:allow the test measures wall time
	if err := report(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Pointer[error] // the goroutine's last failed report
	stopped := make(chan struct{})
	t.Cleanup(func() { <-stopped }) // ctx ends first
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := report(ctx, 0, nil); err != nil && ctx.Err() == nil {
					failed.Store(&err)
				}
			}
		}
	}()
	waitfor.Until(t, 4*time.Minute, "the node released after its preflight check", func() error {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if quarantined(n) {
			return fmt.Errorf("quarantined %v after it turned healthy", time.Since(healthy).Round(time.Second))
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == devcluster.RealNodeLabel }) {
			t.Fatalf("the node's own taint %s went with Gantry's: %v", devcluster.RealNodeLabel, n.Spec.Taints)
		}
		return nil
	})
	released := time.Since(healthy)
	if err := failed.Load(); err != nil {
		t.Errorf("while the node was quarantined: %v", *err)
	}
	if released < time.Minute {
		t.Errorf("released %v after the GPU turned healthy, before telemetry.quarantineClean (1m)", released)
	}
	// Resumed while it runs (a move whose run ends first ends too).
	var mv model.WorkloadMove
	waitfor.Until(t, 3*time.Minute, "the move resumed, saying from which step", func() error {
		w := servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(ctx, id))(t).JSON200)
		if ms := servertest.Deref(w.Moves); len(ms) == 1 {
			mv = ms[0]
		}
		if mv.Phase != model.Resumed {
			return fmt.Errorf("%s (%s), moves %s", w.Status, servertest.Deref(w.Reason), asJSON(w.Moves))
		}
		return nil
	})
	_, reached, from := resumedWithNoStepLost(t, alice, id, steps, atFault, "moved")
	want := fmt.Sprintf("running again on node %s (no longer quarantined), resumed from step %d", node, from) // under 1,000 steps: no thousands separator
	if servertest.Deref(mv.ResumedOn) != node || servertest.Deref(mv.ResumedFrom) != from || !strings.HasPrefix(mv.Notice, "moved off node "+node+": GPU 0 1 uncorrectable (double-bit) ECC errors") ||
		!strings.HasSuffix(mv.Notice, want) {
		t.Errorf("the move: %s; want its notice to end %q", asJSON(mv), want)
	}
	j, err := cluster.Client.BatchV1().Jobs(pod.Namespace).Get(ctx, pod.OwnerReferences[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 0 || j.Status.Succeeded != 1 {
		t.Errorf("the Job: %d failed, %d succeeded; want the move to use none of its retries", j.Status.Failed, j.Status.Succeeded)
	}
	var audited []string
	if err := g.Store.Audit.EachAudit(ctx, func(r audit.Record) error {
		if r.Actor == "gantry" && r.Source == "quarantine" {
			audited = append(audited, r.Action+" "+r.Object)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"quarantine node nodes/" + node, "move workload /api/v1/workloads/" + id, "release node nodes/" + node}; !slices.Equal(audited, want) {
		t.Errorf("audited %q, want %q", audited, want)
	}
	t.Logf("a double-bit error at step %d or later: tainted after %v; released %v after the GPU turned healthy (quarantineClean 1m, then the preflight pod); the first run reached step %d, the second resumed from %d",
		atFault, toTaint.Round(100*time.Millisecond), released.Round(time.Second), reached, from)
}

// TestCPUTrainingEvictedFromSpot: the cpu-train job made a spot one
// (scheduling.spot: its Job's pod failure policy ignores disruptions) and
// evicted mid-run through the Eviction API, as a drained node's or a
// reclaimed spot machine's pods are: the real process gets SIGTERM, writes
// a checkpoint at the step at hand and exits; the Job starts another pod,
// which resumes from that checkpoint on the same volume and finishes. No
// step it reported is lost, none of the Job's retries is used, and Gantry
// counts the eviction against the template's spot requeues.
func TestCPUTrainingEvictedFromSpot(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go

	const steps, every = 300, 50
	dir := templateWith(t, "cpu-train.yaml", "    priority: normal", "    priority: normal\n    spot: true")
	_, alice, id := cpuTrainRun(t, steps, func(c *config.Config) { c.TemplatesDir = dir })
	ctx := t.Context()
	atEviction, first := pastFirstCheckpoint(t, alice, id, every)
	if err := cluster.Client.CoreV1().Pods(first.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: first.Name, Namespace: first.Namespace}}); err != nil {
		t.Fatal(err)
	}
	w, reached, from := resumedWithNoStepLost(t, alice, id, steps, atEviction, "evicted")
	if n := servertest.Deref(w.SpotEvictions); n != 1 {
		t.Errorf("spot evictions counted: %d, want 1", n)
	}
	j, err := cluster.Client.BatchV1().Jobs(first.Namespace).Get(ctx, first.OwnerReferences[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 0 || j.Status.Succeeded != 1 {
		t.Errorf("the Job: %d failed, %d succeeded; want the eviction to use none of its retries", j.Status.Failed, j.Status.Succeeded)
	}
	t.Logf("evicted at step %d or later; the first run reached %d, the second resumed from %d", atEviction, reached, from)
}

// TestCPUTrainingStoppedAndStarted: the cpu-train job stopped by its owner
// mid-run through Gantry's API and started again: the stop ends its real
// process with SIGTERM, which checkpoints at the step at hand on the job's
// volume; Gantry keeps the volume while it is Stopped. The team's budget is
// spent by then (a cent, require-approval), so the start waits
// for a team-admin's approval, with no pod, the volume kept; approved, the
// run resumes from that checkpoint — no step it reported lost — and
// finishes at the same total steps, as one workload with one restart.
func TestCPUTrainingStoppedAndStarted(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go

	const steps, every = 200, 50
	// A core at $360 an hour (a tenth of a cent a second) spends the
	// team's cent of a budget in its first seconds (spend is counted in
	// cents).
	b, err := os.ReadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	classes := filepath.Join(t.TempDir(), "gpu-classes.yaml")
	dear := bytes.Replace(b, []byte("price: {onDemand: 0.05, currency: USD}"), []byte("price: {onDemand: 360, currency: USD}"), 1)
	if bytes.Equal(dear, b) {
		t.Fatal("templates/gpu-classes.yaml has no CPU price of $0.05 to change")
	}
	if err := os.WriteFile(classes, dear, 0o644); err != nil {
		t.Fatal(err)
	}
	g, alice, id := cpuTrainRun(t, steps, func(c *config.Config) {
		c.GPUClassesFile = classes
		c.PolicyDir = policyWith(t, "  vision:\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    quota: {gpus: {\"*\": 1000}}\n"+
			"    budget: {amount: 0.01, atLimit: require-approval}\n")
	})
	ctx := t.Context()
	atStop, first := pastFirstCheckpoint(t, alice, id, every)
	waitfor.Until(t, time.Minute, "the team's budget spent", func() error {
		b := servertest.Deref(servertest.Must(alice.ListBudgetsWithResponse(ctx, &model.ListBudgetsParams{Team: new("vision")}))(t).JSON200)
		if len(b.Items) != 1 || b.Items[0].State != model.BudgetStateExceeded {
			return fmt.Errorf("budgets %s", asJSON(b.Items))
		}
		return nil
	})
	if r := servertest.Must(alice.StopWorkloadWithResponse(ctx, id))(t); r.StatusCode() != 200 {
		t.Fatalf("stop: %d %s", r.StatusCode(), r.Body)
	}
	waitfor.Until(t, 2*time.Minute, "the job Stopped, its pod gone", func() error {
		w := servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(ctx, id))(t).JSON200)
		if n := len(podsOf(t, "vision", id)); w.Status != "Stopped" || n > 0 {
			return fmt.Errorf("%s (%s), %d pods", w.Status, servertest.Deref(w.Reason), n)
		}
		return nil
	})
	r := servertest.Must(alice.StartWorkloadWithResponse(ctx, id))(t)
	if w := servertest.Deref(r.JSON200); r.StatusCode() != 200 || w.Status != "PendingApproval" || !strings.Contains(servertest.Deref(w.Reason), "approval") {
		t.Fatalf("start with the budget spent: %d %s", r.StatusCode(), r.Body)
	}
	// Nothing started until approved: the Job suspended as the stop left
	// it, no pod, its volume kept.
	j, err := cluster.Client.BatchV1().Jobs(first.Namespace).Get(ctx, first.OwnerReferences[0].Name, metav1.GetOptions{})
	if err != nil || j.Spec.Suspend == nil || !*j.Spec.Suspend {
		t.Fatalf("the Job while its start waits for approval: %v (suspend %v)", err, j.Spec.Suspend)
	}
	claims, err := cluster.Client.CoreV1().PersistentVolumeClaims(first.Namespace).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
	if n := len(podsOf(t, "vision", id)); err != nil || n != 0 || len(claims.Items) == 0 {
		t.Fatalf("while the start waits for approval: %d pods, %d volume claims (%v); want none and its checkpoints' claim", n, len(claims.Items), err)
	}
	lee := servertest.Client(g.URL, g.Token("lee")) // a team-admin of vision
	if r := servertest.Must(lee.ApproveWorkloadWithResponse(ctx, id, model.DecisionRequest{Reason: "finish the run"}))(t); r.StatusCode() != 200 {
		t.Fatalf("approve: %d %s", r.StatusCode(), r.Body)
	}
	_, reached, from := resumedWithNoStepLost(t, alice, id, steps, atStop, "stopped")
	if pods := podsOf(t, "vision", id); slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == first.Name }) {
		t.Errorf("the stopped run's pod %s is still there", first.Name)
	}
	t.Logf("stopped at step %d or later; the first run reached %d, the one started after its approval resumed from %d", atStop, reached, from)
}

// TestMaxRuntimeKillsContainer: a CPU job past its template's max runtime
// is stopped by Kubernetes (the Job's active deadline, from
// lifecycle.maxRuntime): its real process on the node is gone and the
// workload is Failed, saying it reached its max runtime.
func TestMaxRuntimeKillsContainer(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go
	holdRealNode(t, 1)
	dir := templateWith(t, "cpu-job.yaml", "maxRuntime: 1h", "maxRuntime: 1m")
	g := appGantry(t, func(c *config.Config) { c.TemplatesDir = dir })
	ctx := t.Context()
	alice := servertest.Client(g.URL, g.Token("alice"))
	// A sleep this test alone runs, to find its process on the node.
	secs := 600 + time.Now().UnixNano()%300
	params := model.Parameters{"script": fmt.Sprintf("echo started; exec sleep %d", secs)}
	id := launchAs(t, alice, model.LaunchRequest{Template: "cpu-job", Team: "vision", Parameters: &params}).Id
	waitfor.Until(t, 2*time.Minute, "the container's sleep running on this machine", func() error {
		if pids := processes("sleep", fmt.Sprint(secs)); len(pids) == 0 {
			return fmt.Errorf("no process sleep %d", secs)
		}
		return nil
	})
	var w model.Workload
	waitfor.Until(t, 3*time.Minute, "the job stopped at its max runtime", func() error {
		if w = servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(ctx, id))(t).JSON200); w.Status != "Failed" {
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		return nil
	})
	if !strings.Contains(servertest.Deref(w.Reason), "max runtime of 1m and was stopped") {
		t.Errorf("reason %q", servertest.Deref(w.Reason))
	}
	// The deadline counts from the Job's start (its pod's image pull and
	// start included), so the workload ended at least a minute after it
	// was created, whatever part of that it spent Running.
	if w.EndedAt == nil || w.EndedAt.Sub(w.CreatedAt) < 59*time.Second {
		t.Errorf("it ended at %v, created at %v: before its max runtime", w.EndedAt, w.CreatedAt)
	}
	waitfor.Until(t, time.Minute, "the container's process killed", func() error {
		if pids := processes("sleep", fmt.Sprint(secs)); len(pids) > 0 {
			return fmt.Errorf("sleep %d still runs: pids %v", secs, pids)
		}
		return nil
	})
}

// processes are the pids on this machine whose command line is args.
func processes(args ...string) []string {
	want := strings.Join(args, "\x00") + "\x00"
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		if b, err := os.ReadFile(f); err == nil && string(b) == want {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

// TestCPUInferenceService: the cpu-inference template's OpenAI-style server
// runs on the real node and answers at its workload's endpoint (dialled as
// Gantry's proxy dials, through the Service's endpoints): its model listed,
// a chat completion with usage counts, the same answer for the same prompt,
// a streamed completion ending in [DONE], and a clear 400 for a bad request.
func TestCPUInferenceService(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go
	holdRealNode(t, 1)
	g := appGantry(t, nil, "llm-server:0.1-debian12")
	ctx := t.Context()
	alice := servertest.Client(g.URL, g.Token("alice"))
	w := launchAs(t, alice, model.LaunchRequest{Template: "cpu-inference", Team: "vision"})
	base := servertest.Deref(w.Endpoint)
	if !strings.HasSuffix(base, ":8000") {
		t.Fatalf("endpoint %q", base)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: cluster.DialService}, Timeout: 30 * time.Second}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitfor.Until(t, 3*time.Minute, "the server answering at "+base, func() error {
		if s, body := call("GET", "/v1/models", ""); s != 200 || !strings.Contains(body, `"id": "gantry/markov-tiny"`) {
			return fmt.Errorf("%d %.200s", s, body)
		}
		return nil
	})
	chat := `{"model": "gantry/markov-tiny", "messages": [{"role": "user", "content": "what does the cluster do"}], "max_tokens": 12}`
	s, body := call("POST", "/v1/chat/completions", chat)
	var out struct {
		Object  string
		Choices []struct {
			Message struct{ Role, Content string }
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(body), &out); s != 200 || err != nil || out.Object != "chat.completion" || len(out.Choices) != 1 ||
		out.Choices[0].Message.Role != "assistant" || out.Choices[0].Message.Content == "" || out.Usage.PromptTokens != 5 ||
		out.Usage.CompletionTokens < 1 || out.Usage.CompletionTokens > 12 {
		t.Fatalf("chat completion: %d %s", s, body)
	}
	if _, again := call("POST", "/v1/chat/completions", chat); !strings.Contains(again, fmt.Sprintf("%q", out.Choices[0].Message.Content)) {
		t.Errorf("the same prompt answered %s, then %s", body, again)
	}
	s, body = call("POST", "/v1/completions", `{"prompt": "the node", "max_tokens": 4, "stream": true}`)
	if s != 200 || strings.Count(body, "data: {") != 4 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("streamed completion: %d %q", s, body)
	}
	if s, body = call("POST", "/v1/completions", `{"prompt": "x", "max_tokens": 0}`); s != 400 || !strings.Contains(body, "max_tokens: want an integer from 1 to 512") {
		t.Errorf("a bad request: %d %s", s, body)
	}
	if pods := podsOf(t, "vision", w.Id); len(pods) != 1 || pods[0].Spec.NodeName != devcluster.RealNodeName {
		t.Errorf("pods %d, want one on %s", len(pods), devcluster.RealNodeName)
	}
}

// TestCPUNotebookIdleCulled: the idle culler judges a CPU-only notebook on
// the real node by its people's use as Gantry's proxy sees it: a kernel
// executing a cell that prints nothing for longer than the idle timeout
// keeps it; once the cell is done, a connected tab with no activity (its
// socket open, pings answered) does not, and the notebook is stopped as
// idle.
func TestCPUNotebookIdleCulled(t *testing.T) {
	t.Parallel() // the real node's tests: see gates_test.go
	holdRealNode(t, 1)
	const timeout = time.Minute
	dir := templateWith(t, "cpu-notebook.yaml", "idleTimeout: 1h", "idleTimeout: 1m")
	g := appGantry(t, func(c *config.Config) { c.TemplatesDir = dir }, "jupyter:6.4-debian12")
	ctx := t.Context()
	tok := g.Token("alice")
	alice := servertest.Client(g.URL, tok)
	id := launchAs(t, alice, model.LaunchRequest{Template: "cpu-notebook", Team: "vision"}).Id
	base := g.URL + "/w/" + id + "/"
	status := func() model.Workload {
		return servertest.Deref(servertest.Must(alice.GetWorkloadWithResponse(ctx, id))(t).JSON200)
	}
	var kernel struct{ ID string }
	waitfor.Until(t, 3*time.Minute, "a kernel started through /w/"+id+"/", func() error {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"api/kernels", strings.NewReader(`{"name": "python3"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 201 || json.Unmarshal(body, &kernel) != nil || kernel.ID == "" {
			return fmt.Errorf("%d %.200s (%s)", resp.StatusCode, body, status().Status)
		}
		return nil
	})
	ws := servertest.DialKernel(t, strings.Replace(base, "http://", "ws://", 1)+"api/kernels/"+kernel.ID+"/channels?session_id=idle", tok)
	defer ws.Close()
	// A cell that runs past the idle timeout and prints nothing until it ends.
	code := fmt.Sprintf("import time; time.sleep(%d); print('slept')", int((timeout + 30*time.Second).Seconds()))
	if err := servertest.SendCell(ws, "sleep-1", code); err != nil {
		t.Fatal(err)
	}
	// The tab: it reads every message (answering the server's pings) and
	// sends nothing more.
	var printed atomic.Value
	printed.Store("")
	done, busy, answered := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		var out strings.Builder
		for {
			var in struct {
				Header struct {
					MsgType string `json:"msg_type"`
				} `json:"header"`
				ParentHeader struct {
					MsgID string `json:"msg_id"`
				} `json:"parent_header"`
				Content struct {
					Text           string `json:"text"`
					ExecutionState string `json:"execution_state"`
				} `json:"content"`
			}
			if err := websocket.JSON.Receive(ws, &in); err != nil {
				return // the socket closed: the notebook stopped, or the test ended
			}
			if in.ParentHeader.MsgID == "info-1" && in.Header.MsgType == "status" && in.Content.ExecutionState == "idle" {
				close(answered) // the control request, answered while the cell runs
			}
			if in.ParentHeader.MsgID != "sleep-1" {
				continue
			}
			switch {
			case in.Header.MsgType == "stream":
				out.WriteString(in.Content.Text)
				printed.Store(out.String())
			case in.Header.MsgType == "status" && in.Content.ExecutionState == "busy":
				close(busy)
			case in.Header.MsgType == "status" && in.Content.ExecutionState == "idle":
				close(done)
			}
		}
	}()
	// While the cell runs, a request on the control channel (what Notebook
	// sends whenever a tab connects): the kernel answers it at once, busy
	// then idle on it, and that idle is not the cell's.
	waitfor.Until(t, time.Minute, "the cell's kernel to say busy", func() error {
		select {
		case <-busy:
			return nil
		default:
			return errors.New("not yet")
		}
	})
	// What the idle culler asks a notebook's app when no socket shows use
	// (interactive.Kernels): Jupyter's own list of kernels, read as a tab's
	// background read, which is not use. Logged, not asserted: Notebook
	// 6's server follows a kernel's state on a subscription of its own,
	// which can miss a new kernel's first messages (it was seen listing a
	// kernel running this cell as "starting"), and takes the last status
	// for the state whatever request it was about.
	kernelState := func() string {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"api/kernels", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Sec-Fetch-Mode", "cors")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var kernels []struct {
			ID             string `json:"id"`
			ExecutionState string `json:"execution_state"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&kernels); err != nil {
			t.Fatalf("GET api/kernels: %d, %v", resp.StatusCode, err)
		}
		for _, k := range kernels {
			if k.ID == kernel.ID {
				return k.ExecutionState
			}
		}
		return "(not listed)"
	}
	t.Logf("while its cell runs, Jupyter lists the kernel as %q", kernelState())
	if err := websocket.JSON.Send(ws, map[string]any{
		"header":        map[string]any{"msg_id": "info-1", "username": "e2e", "session": "e2e", "msg_type": "kernel_info_request", "version": "5.3"},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "channel": "control", "buffers": []any{}, "content": map[string]any{},
	}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the kernel to answer the control request (busy, then idle on it) while the cell runs", func() error {
		select {
		case <-answered:
			return nil
		case <-done:
			t.Fatal("the cell ended before the control request was answered")
		default:
		}
		return errors.New("not yet")
	})
	// What the sockets showed keeps this notebook; the list is for a cell
	// left with none.
	t.Logf("after the control request, Jupyter lists the kernel as %q", kernelState())
	waitfor.Until(t, timeout+2*time.Minute, "the silent cell to finish, its notebook kept while it ran", func() error {
		if w := status(); w.Status != "Running" {
			t.Fatalf("while its kernel was busy the notebook was %s: %s", w.Status, servertest.Deref(w.Reason))
		}
		select {
		case <-done:
			return nil
		default:
			return errors.New("the cell still runs")
		}
	})
	if got := printed.Load().(string); got != "slept\n" {
		t.Fatalf("the cell printed %q", got)
	}
	var w model.Workload
	waitfor.Until(t, timeout+2*time.Minute, "the notebook stopped as idle, its tab open and quiet", func() error {
		if w = status(); w.Status != "IdleStopped" {
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		return nil
	})
	if reason := servertest.Deref(w.Reason); !strings.Contains(reason, "nobody used it") || !strings.Contains(reason, "1m0s") {
		t.Errorf("reason %q", reason)
	}
}
