// Package e2e_test launches workloads through Gantry's HTTP API onto the local
// cluster (real kube-apiserver, scheduler and controller manager; kwok nodes)
// and checks what the cluster and the API report.
package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

var cluster *devcluster.Cluster

// TestMain starts the local cluster once for the package. Its tests run in
// three groups at once (gates_test.go), each test with its own database and
// Lease; teams (and their namespaces) are a test's own or shared (vision),
// and every server's quota sync writes every team's Kueue objects from its
// policy, which agree:
//   - the tests of the simulated fleet, one at a time (alone);
//   - the slowest tests that run Gantry as a separate process (the chart's
//     images, the rolling upgrade, kill -9 mid-launch, the two replicas),
//     which spend most of their time waiting on the processes they start,
//     two at a time (beside);
//   - the real node's tests (a shell job, notebooks, training resumed, max
//     runtime, inference, idle culling), which mostly wait on real containers
//     on a node of their own, two at a time (one core of the real node each:
//     holdRealNode; Gantry as a pod there, with its database beside it and a
//     notebook, takes both), the longest of those waiting first.
//
// The gates, not -parallel, say how many run at once: a test waiting at a
// gate holds a -parallel slot, so TestMain raises it above the number of
// tests. The tests that give team vision quotas or a budget of its own
// (TestApprovalsAndBudgets, TestPortalTeamView) stay serial: Go runs them
// before the parallel tests start.
func TestMain(m *testing.M) {
	flag.Parse()
	if p := flag.Lookup("test.parallel"); p != nil && p.Value.String() != "" {
		if n, _ := strconv.Atoi(p.Value.String()); n < 100 {
			_ = p.Value.Set("100")
		}
	}
	clustertest.Main(servertest.RemovingBinary(m), "e2e", &cluster, chartHooks)
}

// gantryServer is Gantry as `gantry serve --kubeconfig` runs it, in process,
// started by the one harness (servertest) on the production constructor.
type gantryServer struct {
	t   testing.TB
	url string                      // a front that signs every request in as ada, a platform admin
	api *client.ClientWithResponses // the typed client, signed in as ada
	*servertest.Gantry
}

// start runs Gantry on the database at dbPath, against the local cluster when
// withCluster is set. Its loops run as in production (one second apart), under
// a Lease of its own so that several test servers on one cluster all lead.
func start(t testing.TB, dbPath string, withCluster bool, edit ...func(*config.Config)) *gantryServer {
	t.Helper()
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	g := servertest.New(t, func(c *config.Config) {
		c.Database.DSN = config.Secret(dbPath)
		c.PolicyDir = testPolicy(t)
		c.Confidential.KBSURL = "https://kbs.gantry-system.svc:8080"
		c.ReconcileInterval = config.Duration(time.Second)
		c.LogDrain = config.Duration(2 * time.Second) // simulated pods print nothing as they stop
		c.Namespace = "gantry-e2e-" + workload.NewID()
		// Many test servers share the cluster: watching all its pods each
		// slowed the suite (BenchmarkSustainedLaunch turns them on).
		c.CapacityInformers = false
		if withCluster {
			c.Kubeconfig = gantryKubeconfig // as the Helm chart's ServiceAccount
		}
		for _, e := range edit {
			e(c)
		}
		if withCluster {
			grantLease(t, c.Namespace)
		}
	})
	// The test's clients stand for a signed-in platform admin: a front adds
	// ada's personal access token to every request.
	target, _ := url.Parse(g.URL)
	tok := g.Token("ada")
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // stream logs as they come
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+tok)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	if withCluster {
		t.Cleanup(func() { deleteLeftovers(t, g) }) // before g stops
	}
	return &gantryServer{t: t, url: front.URL, api: servertest.Client(g.URL, tok), Gantry: g}
}

// deleteDeploymentsAtEnd deletes, as a test ends, the Deployments Gantry
// made in the namespaces of teams, for a test whose Gantry runs as processes
// that are gone by then (deleteLeftovers asks an in-process one): their
// pods hold GPUs that the tests running beside it launch onto. Call it
// before starting them, so that it runs after they stop.
func deleteDeploymentsAtEnd(t testing.TB, teams ...string) {
	t.Cleanup(func() {
		for _, team := range teams {
			err := cluster.Client.AppsV1().Deployments("gantry-"+team).DeleteCollection(context.Background(), metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: "gantry.dev/workload-id"})
			if err != nil {
				t.Logf("team %s's Deployments left on the cluster: %v", team, err)
			}
		}
	})
}

// deleteLeftovers deletes, as a test ends, the workloads its Gantry still
// has: the suite's tests share one cluster, and a service or notebook left
// running holds its GPUs (the cluster has 16 whole H100s) from the tests
// after it, whose launches then wait, Unschedulable.
func deleteLeftovers(t testing.TB, g *servertest.Gantry) {
	ctx := context.Background()
	c := servertest.Client(g.URL, g.Token("ada"))
	var cursor *string
	for {
		r, err := c.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Ended: new(false), Limit: new(100), Cursor: cursor})
		if err != nil {
			t.Logf("the test's workloads were not listed to be deleted: %v", err)
			return
		}
		if r.JSON200 == nil {
			t.Logf("the test's workloads were not listed to be deleted: %d %s", r.StatusCode(), r.Body)
			return
		}
		for _, w := range r.JSON200.Items {
			d, err := c.DeleteWorkloadWithResponse(ctx, w.Id)
			if err != nil {
				t.Logf("workload %s left on the cluster: %v", w.Id, err)
			} else if d.StatusCode() != 204 && d.StatusCode() != 404 {
				t.Logf("workload %s left on the cluster: %d %s", w.Id, d.StatusCode(), d.Body)
			}
		}
		if cursor = r.JSON200.NextCursor; cursor == nil {
			return
		}
	}
}

// asJSON is v as JSON, for failure messages (the generated types' optional
// fields are pointers, which %+v prints as addresses).
func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// fieldErrors are a typed answer's problem's field errors.
func fieldErrors(p *model.Problem) []model.FieldError {
	if p == nil {
		return nil
	}
	return servertest.Deref(p.Errors)
}

// launch launches req as ada and returns the answer's status and workload
// (what a 201 carries).
func (g *gantryServer) launch(req model.LaunchRequest) (int, model.Workload) {
	g.t.Helper()
	r := createWorkload(g.t, g.api, req)
	if r.StatusCode() >= 300 {
		g.t.Logf("launch %s: %d %s", asJSON(req), r.StatusCode(), r.Body)
	}
	return r.StatusCode(), servertest.Deref(r.JSON201)
}

// createWorkload sends the launch req with c, as a client should: under an
// Idempotency-Key, sent again while Gantry answers 503 (try again later: an
// image registry that did not answer in time on a loaded machine) for up to
// two minutes. Any other answer is returned.
func createWorkload(t testing.TB, c *client.ClientWithResponses, req model.LaunchRequest) *client.CreateWorkloadResponse {
	t.Helper()
	key := rand.Text()
	var r *client.CreateWorkloadResponse
	waitfor.Until(t, 2*time.Minute, "a launch answered other than 503", func() error {
		r = servertest.Must(c.CreateWorkloadWithResponse(context.Background(), &model.CreateWorkloadParams{IdempotencyKey: &key}, req))(t)
		if r.StatusCode() == http.StatusServiceUnavailable {
			return fmt.Errorf("503 %s", r.Body)
		}
		return nil
	})
	return r
}

// workload reads a workload as ada.
func (g *gantryServer) workload(id string) model.Workload {
	g.t.Helper()
	return servertest.Deref(servertest.Must(g.api.GetWorkloadWithResponse(context.Background(), id))(g.t).JSON200)
}

// stop stops a workload as ada and returns the status and the workload.
func (g *gantryServer) stop(id string) (int, model.Workload) {
	g.t.Helper()
	r := servertest.Must(g.api.StopWorkloadWithResponse(context.Background(), id))(g.t)
	return r.StatusCode(), servertest.Deref(r.JSON200)
}

// startAgain starts a stopped workload as ada and returns the status and
// the workload.
func (g *gantryServer) startAgain(id string) (int, model.Workload) {
	g.t.Helper()
	r := servertest.Must(g.api.StartWorkloadWithResponse(context.Background(), id))(g.t)
	return r.StatusCode(), servertest.Deref(r.JSON200)
}

// events is the cluster's events about a workload, as the API lists them,
// for a failure's message.
func (g *gantryServer) events(id string) string {
	r, err := g.api.ListWorkloadEventsWithResponse(context.Background(), id)
	if err != nil {
		return err.Error()
	}
	return string(r.Body)
}

// waitStatus waits until the API reports one of the statuses.
func (g *gantryServer) waitStatus(id string, want ...model.WorkloadStatus) model.Workload {
	g.t.Helper()
	return g.waitStatusWithin(90*time.Second, id, want...)
}

// waitStatusWithin is waitStatus with a wait of its own (the first
// container of an image on a cold real node: its layers unpacked first).
func (g *gantryServer) waitStatusWithin(d time.Duration, id string, want ...model.WorkloadStatus) model.Workload {
	g.t.Helper()
	var w model.Workload
	var holders string   // who holds the GPUs, while it waits for some
	var listed time.Time // when holders was listed: at most every 10 s
	waitfor.Until(g.t, d, fmt.Sprintf("workload %s to be %v", id, want), func() error {
		if w = g.workload(id); slices.Contains(want, w.Status) {
			return nil
		}
		reason := servertest.Deref(w.Reason)
		if strings.Contains(reason, "Insufficient nvidia.com/gpu") {
			// Who holds the GPUs (a cold CI run once found both H100
			// nodes full for 15 minutes, and eight tests failed on it).
			if time.Since(listed) > 10*time.Second {
				holders, listed = gpuHolders(), time.Now()
			}
			reason += "; " + holders
		}
		return fmt.Errorf("it is %s (%s)", w.Status, reason)
	})
	return w
}

// gpuHolders says which live pods hold GPUs, by node: namespace/name, how
// many and for how long.
func gpuHolders() string {
	list, err := cluster.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName!="})
	if err != nil {
		return "GPU holders not listed: " + err.Error()
	}
	by := map[string][]string{}
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var n int64
		for _, c := range p.Spec.Containers {
			if q, ok := c.Resources.Limits["nvidia.com/gpu"]; ok {
				n += q.Value()
			}
		}
		if n > 0 {
			by[p.Spec.NodeName] = append(by[p.Spec.NodeName], fmt.Sprintf("%s/%s (%d, %s old, %s)", p.Namespace, p.Name, n,
				time.Since(p.CreationTimestamp.Time).Round(time.Second), p.Status.Phase))
		}
	}
	var b strings.Builder
	b.WriteString("GPUs held:")
	for _, node := range slices.Sorted(maps.Keys(by)) {
		fmt.Fprintf(&b, " %s: %s;", node, strings.Join(by[node], ", "))
	}
	return b.String()
}

func podsOf(t testing.TB, team, id string) []corev1.Pod {
	t.Helper()
	list, err := cluster.Client.CoreV1().Pods("gantry-"+team).List(context.Background(), metav1.ListOptions{LabelSelector: "gantry.dev/workload-id=" + id})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func nodeProduct(t *testing.T, name string) (string, corev1.ResourceList) {
	t.Helper()
	n, err := cluster.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels["nvidia.com/gpu.product"], n.Status.Allocatable
}

// TestStarterTemplatesRun: every starter template launches through the API and
// reaches Running (services, notebooks) or Succeeded (jobs) on a node of the
// chosen GPU class, with the GPU resource it asked for.
func TestStarterTemplatesRun(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	classes, _ := gpu.LoadFile("../../templates/gpu-classes.yaml")
	tests := []struct {
		template string
		params   *model.Parameters
		gpu      *model.GPUChoice
		final    model.WorkloadStatus
		resource string
	}{
		{"pytorch-train", &model.Parameters{"epochs": 1}, &model.GPUChoice{Count: new(2)}, "Succeeded", "nvidia.com/gpu"},
		{"jupyter-notebook", nil, nil, "Running", "nvidia.com/mig-1g.10gb"},
		{"vllm-inference", nil, &model.GPUChoice{Class: new("H200-141GB"), Count: new(2)}, "Running", "nvidia.com/gpu"},
		{"batch-inference", &model.Parameters{"input": "prompts.jsonl"}, &model.GPUChoice{Class: new("H100-80GB"), MigProfile: new("3g.40gb")}, "Succeeded", "nvidia.com/mig-3g.40gb"},
		{"dev-environment", nil, nil, "Running", "nvidia.com/gpu"},
		{"confidential-inference", nil, nil, "Running", "nvidia.com/pgpu"},
	}
	for _, tc := range tests {
		t.Run(tc.template, func(t *testing.T) {
			s, w := g.launch(model.LaunchRequest{Template: tc.template, Team: "vision", Gpu: tc.gpu, Parameters: tc.params})
			if s != 201 {
				t.Fatalf("launch: %d", s)
			}
			if !w.Applied {
				t.Fatalf("not applied: %s", asJSON(w))
			}
			w = g.waitStatus(w.Id, tc.final)
			// Its history: a job that ended says when it ran and how
			// it ended; a live one has started and not ended.
			h := w
			if h.StartedAt == nil || h.Attempts != 1 {
				t.Fatalf("history: %s\nthe cluster's events: %s", asJSON(h), g.events(w.Id))
			}
			if tc.final == "Succeeded" && (h.EndedAt == nil || h.EndedAt.Before(*h.StartedAt) || h.ExitCode == nil || *h.ExitCode != 0 ||
				h.RanSeconds != math.Round(h.EndedAt.Sub(*h.StartedAt).Seconds())) {
				t.Errorf("history of a job that succeeded: started %v, ended %v, exit %v, ran %vs", h.StartedAt, h.EndedAt, h.ExitCode, h.RanSeconds)
			}
			if tc.final == "Running" && (h.EndedAt != nil || h.ExitCode != nil) {
				t.Errorf("history of a running workload: ended %v, exit %v", h.EndedAt, h.ExitCode)
			}
			pods := podsOf(t, "vision", w.Id)
			if len(pods) == 0 {
				t.Fatal("no pods")
			}
			p := pods[0]
			product, alloc := nodeProduct(t, p.Spec.NodeName)
			class, _ := classes.Get(w.Gpu.Class)
			if class.Name == "" || !slices.Contains(class.Products, product) {
				t.Errorf("ran on %s (%s), want a %s node", p.Spec.NodeName, product, w.Gpu.Class)
			}
			req := p.Spec.Containers[0].Resources.Requests[corev1.ResourceName(tc.resource)]
			if req.Value() != int64(w.Gpu.Count) {
				t.Errorf("requests %s=%s, want %d", tc.resource, req.String(), w.Gpu.Count)
			}
			if have := alloc[corev1.ResourceName(tc.resource)]; have.Value() == 0 {
				t.Errorf("node %s has no %s", p.Spec.NodeName, tc.resource)
			}
			if strings.HasPrefix(tc.resource, "nvidia.com/mig-") && !strings.HasPrefix(p.Spec.NodeName, "h100-mig-") {
				t.Errorf("MIG request ran on %s, want the MIG node", p.Spec.NodeName)
			}
		})
	}
}

// TestConfidentialLaunch: a confidential launch is admitted by the real API
// server with its RuntimeClass (which adds the Kata VM's overhead and its TEE's
// node selector), runs on the CC node of that TEE with passed-through GPUs;
// a confidential request for a non-confidential image is refused.
func TestConfidentialLaunch(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	s, w := g.launch(model.LaunchRequest{Template: "confidential-inference", Team: "vision"})
	if s != 201 || servertest.Deref(w.Tee) != model.WorkloadTeeSnp {
		t.Fatalf("launch: %d %s", s, asJSON(w))
	}
	g.waitStatus(w.Id, "Running")
	p := podsOf(t, "vision", w.Id)[0]
	if p.Spec.NodeName != "h100-cc-snp-0" {
		t.Errorf("ran on %s, want the SEV-SNP CC node", p.Spec.NodeName)
	}
	if rc := p.Spec.RuntimeClassName; rc == nil || *rc != "kata-qemu-nvidia-gpu-snp" {
		t.Errorf("runtime class %v", rc)
	}
	if p.Spec.Overhead.Cpu().MilliValue() != 250 || p.Spec.NodeSelector["feature.node.kubernetes.io/cpu-security.sev.snp.enabled"] != "true" {
		t.Errorf("the RuntimeClass admission did not apply: overhead %v, node selector %v", p.Spec.Overhead, p.Spec.NodeSelector)
	}
	if p.Annotations["io.katacontainers.config.runtime.cc_init_data"] == "" || !strings.Contains(p.Spec.Containers[0].Image, "@sha256:") {
		t.Errorf("annotations %v, image %s", p.Annotations, p.Spec.Containers[0].Image)
	}
	r := servertest.Must(g.api.CreateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: "vllm-inference", Team: "vision", Confidential: new(true), Gpu: &model.GPUChoice{Class: new("H200-141GB")}}))(t)
	if errs := fieldErrors(r.ApplicationproblemJSONDefault); r.StatusCode() != 422 ||
		len(errs) != 1 || errs[0].Field != "confidential" || !strings.Contains(errs[0].Detail, "is not a confidential image") {
		t.Errorf("confidential request, plain image: %d %s", r.StatusCode(), r.Body)
	}
}

// TestOversizedRefused: more GPUs than any node has could never start: the
// launch is refused at once, naming gpu.count and the most one machine of
// the class's node groups has (it used to be accepted and stay Pending).
func TestOversizedRefused(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	ctx := t.Context()
	// A template that allows 16 GPUs; no node has more than 8.
	doc := templateFile(t, "../../templates/pytorch-train.yaml")
	doc.Metadata.Name = "big-train"
	doc.Spec.Gpu.Count.Min, doc.Spec.Gpu.Count.Max, doc.Spec.Gpu.Count.Default = 1, 16, 16
	if s := servertest.Must(g.api.CreateTemplateWithResponse(ctx, doc))(t).StatusCode(); s != 201 {
		t.Fatalf("create template: %d", s)
	}
	r := servertest.Must(g.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "big-train", Team: "nlp"}))(t)
	if errs := fieldErrors(r.ApplicationproblemJSONDefault); r.StatusCode() != 422 ||
		len(errs) != 1 || errs[0].Field != "gpu.count" || !strings.Contains(errs[0].Detail, "the largest machine in its node groups has 8 (h100-on-demand: 2 × 8, h100-reserved: 1 × 8)") {
		t.Fatalf("16 GPUs where nodes have 8: %d %s", r.StatusCode(), r.Body)
	}
	// A MIG profile no node of the class offers (the A100-40GB node runs
	// whole GPUs): refused, naming gpu.migProfile.
	r = servertest.Must(g.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "jupyter-notebook", Team: "vision", Gpu: &model.GPUChoice{Class: new("A100-40GB"), MigProfile: new("1g.10gb")}}))(t)
	if errs := fieldErrors(r.ApplicationproblemJSONDefault); r.StatusCode() != 422 ||
		len(errs) != 1 || errs[0].Field != "gpu.migProfile" || !strings.Contains(errs[0].Detail, "no node of A100-40GB (1 in all) offers MIG profile 1g.10gb") {
		t.Fatalf("a MIG profile no node offers: %d %s", r.StatusCode(), r.Body)
	}
	// A launch that fits the fleet but not now is accepted with the
	// estimate's verdict as a warning: the A100-80GB node's eight GPUs
	// are taken by the first (a service: it keeps them).
	eight := model.LaunchRequest{Template: "vllm-inference", Team: "vision", Gpu: &model.GPUChoice{Class: new("A100-80GB"), Count: new(8)}}
	s, first := g.launch(eight)
	if s != 201 || len(servertest.Deref(first.Warnings)) != 0 {
		t.Fatalf("the first eight: %d %s", s, asJSON(first))
	}
	g.waitStatus(first.Id, "Running")
	t.Cleanup(func() { g.stop(first.Id) })
	s, second := g.launch(eight)
	t.Cleanup(func() { g.stop(second.Id) })
	if warnings := servertest.Deref(second.Warnings); s != 201 || len(warnings) != 1 || !strings.HasPrefix(warnings[0], "it does not start now: ") || !strings.Contains(warnings[0], "A100-80GB") {
		t.Fatalf("the second eight: %d %s", s, asJSON(second))
	}
}

// TestStopStartDelete: stopping a service scales it to zero and keeps its
// objects (no late report revives it), starting brings it back at the same
// endpoint, and deleting removes everything.
func TestStopStartDelete(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	ctx := context.Background()
	s, w := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "ops"})
	if s != 201 {
		t.Fatalf("launch: %d", s)
	}
	if servertest.Deref(w.Endpoint) != "http://"+w.Name+".gantry-ops.svc.cluster.local:8000" {
		t.Errorf("endpoint %q", servertest.Deref(w.Endpoint))
	}
	g.waitStatus(w.Id, "Running")
	events := servertest.Must(g.api.ListWorkloadEventsWithResponse(ctx, w.Id))(t)
	scheduled := false
	for _, e := range servertest.Deref(events.JSON200).Items {
		if e.Reason == "Scheduled" && strings.HasPrefix(e.Object, "Pod/"+w.Name) {
			scheduled = true
		}
	}
	if !scheduled {
		t.Errorf("no Scheduled event for the pod in %s", events.Body)
	}
	if s, w = g.stop(w.Id); s != 200 || w.Status != "Stopped" || !slices.Equal(servertest.Deref(w.Actions), []model.WorkloadActions{"start", "delete"}) {
		t.Fatalf("stop: %d %s", s, asJSON(w))
	}
	waitNoPods(t, "ops", w.Id)
	dep, err := cluster.Client.AppsV1().Deployments("gantry-ops").Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil || *dep.Spec.Replicas != 0 {
		t.Fatalf("stopped service's Deployment: %v, want it kept at 0 replicas", err)
	}
	if got := g.workload(w.Id); got.Status != "Stopped" {
		t.Fatalf("status %s after stop (the watch must not revive it)", got.Status)
	}
	endpoint := servertest.Deref(w.Endpoint)
	if s, w = g.startAgain(w.Id); s != 200 || w.Status != "Pending" {
		t.Fatalf("start: %d %s", s, asJSON(w))
	}
	if w = g.waitStatus(w.Id, "Running"); servertest.Deref(w.Endpoint) != endpoint {
		t.Fatalf("endpoint after start %q, want %q", servertest.Deref(w.Endpoint), endpoint)
	}
	if s := servertest.Must(g.api.DeleteWorkloadWithResponse(ctx, w.Id))(t).StatusCode(); s != 204 {
		t.Fatalf("delete: %d", s)
	}
	g.waitNoObjects(t, "ops", w.Id)
	if got := g.workload(w.Id); got.Status != "Deleted" {
		t.Fatalf("status %s after delete", got.Status)
	}
	if s, _ := g.startAgain(w.Id); s != 409 {
		t.Fatalf("start after delete: %d, want 409", s)
	}
}

// TestNotebookKeepsItsVolume: a notebook stopped and started again keeps its
// home volume (the same claim, bound to the same volume) and its endpoint; a
// notebook past its max runtime is stopped by the lifecycle loop, with the
// reason on the record, and keeps its volume too.
func TestNotebookKeepsItsVolume(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	ctx := context.Background()
	s, w := g.launch(model.LaunchRequest{Template: "jupyter-notebook", Team: "nb"})
	if s != 201 {
		t.Fatalf("launch: %d", s)
	}
	g.waitStatus(w.Id, "Running")
	claim := func() corev1.PersistentVolumeClaim {
		t.Helper()
		list, err := cluster.Client.CoreV1().PersistentVolumeClaims("gantry-nb").List(ctx, metav1.ListOptions{LabelSelector: "gantry.dev/workload-id=" + w.Id})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("%d claims (%v), want the notebook's home", len(list.Items), err)
		}
		return list.Items[0]
	}
	home := claim()
	if home.Spec.VolumeName == "" {
		t.Fatalf("home claim %s is not bound", home.Name)
	}
	for round := range 2 {
		if round == 0 {
			if s, w = g.stop(w.Id); s != 200 || w.Status != "Stopped" {
				t.Fatalf("stop: %d %s", s, asJSON(w))
			}
		} else {
			// Past its max runtime: the lifecycle loop stops it.
			if _, err := g.Store.UpdateWorkload(ctx, w.Id, func(old workload.Workload) (workload.Workload, error) {
				old.ExpiresAt = time.Now().Add(-time.Second)
				return old, nil
			}); err != nil {
				t.Fatal(err)
			}
			w = g.waitStatus(w.Id, "Stopped")
			if !strings.Contains(servertest.Deref(w.Reason), "max runtime") {
				t.Fatalf("stopped without saying why: %s", asJSON(w))
			}
		}
		waitNoPods(t, "nb", w.Id)
		if got := claim(); got.UID != home.UID || got.Spec.VolumeName != home.Spec.VolumeName {
			t.Fatalf("round %d: home claim %s (%s → %s) after stop, want %s (%s → %s)", round, got.Name, got.UID, got.Spec.VolumeName, home.Name, home.UID, home.Spec.VolumeName)
		}
		if s, w = g.startAgain(w.Id); s != 200 {
			t.Fatalf("start: %d %s", s, asJSON(w))
		}
		g.waitStatus(w.Id, "Running")
		// Its pod, once the StatefulSet has made it. (Running can come a
		// moment before: under CI load the leader's informer may still hold
		// the stopped pod, Running, when the start is recorded — see
		// docs/reliability.md.)
		waitfor.Until(t, time.Minute, "its pod mounting "+home.Name, func() error {
			if pods := podsOf(t, "nb", w.Id); len(pods) != 1 || !mountsClaim(pods[0], home.Name) {
				return fmt.Errorf("round %d: after start, %d pods, want one mounting %s", round, len(pods), home.Name)
			}
			return nil
		})
		if got := claim(); got.UID != home.UID {
			t.Fatalf("round %d: a new home claim after start", round)
		}
	}
}

func mountsClaim(p corev1.Pod, claim string) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
	}
	return false
}

// waitNoPods waits until a workload has no pod left.
func waitNoPods(t *testing.T, team, id string) {
	t.Helper()
	waitfor.Until(t, 90*time.Second, "no pods of "+id, func() error {
		if n := len(podsOf(t, team, id)); n > 0 {
			return fmt.Errorf("%d pods left", n)
		}
		return nil
	})
}

// waitNoObjects waits until no object of the workload is left in the cluster.
func (g *gantryServer) waitNoObjects(t *testing.T, team, id string) {
	t.Helper()
	ctx := context.Background()
	ns := "gantry-" + team
	sel := metav1.ListOptions{LabelSelector: "gantry.dev/workload-id=" + id}
	waitfor.Until(t, 90*time.Second, "no objects of "+id, func() error {
		deps, _ := cluster.Client.AppsV1().Deployments(ns).List(ctx, sel)
		sets, _ := cluster.Client.AppsV1().StatefulSets(ns).List(ctx, sel)
		svcs, _ := cluster.Client.CoreV1().Services(ns).List(ctx, sel)
		pvcs, _ := cluster.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
		pods, _ := cluster.Client.CoreV1().Pods(ns).List(ctx, sel)
		if left := len(deps.Items) + len(sets.Items) + len(svcs.Items) + len(pvcs.Items) + len(pods.Items); left > 0 {
			return fmt.Errorf("%d objects left", left)
		}
		return nil
	})
}

// TestIdempotencyKey: the same key launches once.
func TestIdempotencyKey(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	key := &model.CreateWorkloadParams{IdempotencyKey: new("launch-42")}
	var ids []string
	for i, want := range []int{201, 200, 200} {
		r := servertest.Must(g.api.CreateWorkloadWithResponse(t.Context(), key, model.LaunchRequest{Template: "dev-environment", Team: "idem"}))(t)
		if r.StatusCode() != want {
			t.Fatalf("request %d: %d, want %d", i, r.StatusCode(), want)
		}
		w := r.JSON201 // the launch; a replay answers 200 with the same workload
		if w == nil {
			w = r.JSON200
		}
		ids = append(ids, servertest.Deref(w).Id)
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("ids %v", ids)
	}
	sets, _ := cluster.Client.AppsV1().StatefulSets("gantry-idem").List(context.Background(), metav1.ListOptions{})
	if len(sets.Items) != 1 {
		t.Fatalf("%d statefulsets, want 1", len(sets.Items))
	}
}

// TestCrashBetweenRecordAndApply: a launch recorded by a Gantry that died before
// applying it is applied exactly once by the next Gantry's reconciler.
func TestCrashBetweenRecordAndApply(t *testing.T) {
	alone(t)
	db := storetest.SQLitePath(t)
	first := start(t, db, false) // records, cannot apply: the "crash" window
	s, w := first.launch(model.LaunchRequest{Template: "dev-environment", Team: "crash"})
	if s != 201 || w.Applied {
		t.Fatalf("launch: %d %s", s, asJSON(w))
	}
	second := start(t, db, true) // its lifecycle loop applies what it finds
	second.waitStatus(w.Id, "Running")
	if n, err := second.Workloads.Reconcile(context.Background()); err != nil || n != 0 { // a further pass applies nothing again
		t.Fatalf("a further reconcile applied %d (%v), want 0", n, err)
	}
	if got := second.workload(w.Id); !got.Applied {
		t.Fatalf("running but not recorded as applied: %s", asJSON(got))
	}
	sets, err := cluster.Client.AppsV1().StatefulSets("gantry-crash").List(context.Background(), metav1.ListOptions{LabelSelector: "gantry.dev/workload-id=" + w.Id})
	if err != nil || len(sets.Items) != 1 {
		t.Fatalf("%d statefulsets, want exactly 1 (%v)", len(sets.Items), err)
	}
	list := servertest.Deref(servertest.Must(second.api.ListWorkloadsWithResponse(t.Context(), &model.ListWorkloadsParams{Team: new("crash")}))(t).JSON200)
	if len(list.Items) != 1 {
		t.Fatalf("%d workloads, want 1", len(list.Items))
	}
}

// TestClusterAway: with its kubeconfig missing Gantry still serves, /readyz
// says the cluster is not ready, launches are accepted and kept, and they are
// applied once the kubeconfig (and so the cluster) is there.
func TestClusterAway(t *testing.T) {
	alone(t)
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g := start(t, storetest.SQLitePath(t), true, func(c *config.Config) { c.Kubeconfig = kubeconfig })

	s, w := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "away"})
	if s != 201 {
		t.Fatalf("launch while the cluster is away: %d", s)
	}
	if w.Applied || w.Status != "Pending" || !strings.Contains(servertest.Deref(w.Reason), "waiting for the Kubernetes API server") {
		t.Fatalf("%s", asJSON(w))
	}
	ready := servertest.Must(g.api.GetReadyWithResponse(t.Context()))(t)
	if ready.StatusCode() != 503 || servertest.Deref(ready.JSON503).Status != model.NotReady || !strings.Contains(string(ready.Body), "kubernetes") {
		t.Fatalf("/readyz with the cluster away: %d %s", ready.StatusCode(), ready.Body)
	}
	if _, err := g.Workloads.Reconcile(context.Background()); err == nil {
		t.Fatal("reconcile with the cluster away reported no problem")
	}

	data, err := os.ReadFile(gantryKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The lifecycle loop picks the kubeconfig up and applies the launch.
	// Running can be seen before the apply's own record says applied (its
	// pods run once the Deployment is made, while the rest is applied):
	// both must come.
	g.waitStatus(w.Id, "Running")
	var got model.Workload
	waitfor.Until(t, time.Minute, "the launch recorded as applied", func() error {
		if got = g.workload(w.Id); !got.Applied {
			return fmt.Errorf("%s, not applied yet", got.Status)
		}
		return nil
	})
	if got.Status != "Running" || servertest.Deref(got.Reason) != "" {
		t.Fatalf("once the cluster is back: %s", asJSON(got))
	}
	deps, _ := cluster.Client.AppsV1().Deployments("gantry-away").List(context.Background(), metav1.ListOptions{})
	if len(deps.Items) != 1 {
		t.Fatalf("%d deployments, want 1", len(deps.Items))
	}
}

// TestOrphans: objects with Gantry's labels but no live record are reported,
// and removed when asked.
func TestOrphans(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	s, w := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "orphan"})
	if s != 201 {
		t.Fatalf("launch: %d", s)
	}
	// Another Gantry (a fresh database) knows nothing of it.
	other := start(t, storetest.SQLitePath(t), true)
	// The objects as kube.Cluster.Managed lists them from the API server —
	// of this test's namespace only: the suite's other tests run
	// beside this one on the same cluster, and to a fresh Gantry their
	// objects are orphans too (removing them stopped another test's
	// notebook just after its start, twice in CI).
	k, err := kube.New(cluster.Config(), kube.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs := inNamespace{k, "gantry-orphan"}
	found, err := other.Workloads.Converge(context.Background(), objs, false)
	if err != nil {
		t.Fatal(err)
	}
	var mine []workload.Convergence
	for _, a := range found {
		if a.Object.WorkloadID == w.Id {
			mine = append(mine, a)
		}
	}
	if len(mine) != 1 || mine[0].Object.Kind != "Deployment" || mine[0].Object.Namespace != "gantry-orphan" || mine[0].Do != "delete" || mine[0].Done {
		t.Fatalf("orphans %+v, want the Deployment of %s reported, not removed", found, w.Id)
	}
	// The Gantry that owns it sees no orphan of its own.
	if mineToo, _ := g.Workloads.Converge(context.Background(), objs, false); containsWorkload(mineToo, w.Id) {
		t.Fatal("a live workload was reported as an orphan")
	}
	if _, err := other.Workloads.Converge(context.Background(), objs, true); err != nil {
		t.Fatal(err)
	}
	g.waitNoObjects(t, "orphan", w.Id)
}

// inNamespace lists the objects of one namespace.
type inNamespace struct {
	all       workload.Objects
	namespace string
}

func (n inNamespace) Managed(ctx context.Context) ([]workload.ObjectRef, error) {
	objs, err := n.all.Managed(ctx)
	return slices.DeleteFunc(objs, func(o workload.ObjectRef) bool { return o.Namespace != n.namespace }), err
}

func containsWorkload(actions []workload.Convergence, id string) bool {
	for _, a := range actions {
		if a.Object.WorkloadID == id {
			return true
		}
	}
	return false
}

// templateFile reads a template file as the API's TemplateDocument, strictly
// (a field the type lacks fails the test).
func templateFile(t testing.TB, path string) model.TemplateDocument {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc model.TemplateDocument
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		t.Fatalf("%s as a TemplateDocument: %v", path, err)
	}
	return doc
}

// TestLogs: a workload's log comes through the pods/log API (kwok answers for
// the kubelet), whole, its tail, or followed as a stream.
func TestLogs(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	s, w := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "logs"})
	if s != 201 {
		t.Fatalf("launch: %d", s)
	}
	g.waitStatus(w.Id, "Running")
	read := func(params *model.GetWorkloadLogsParams) (int, string) {
		r := servertest.Must(g.api.GetWorkloadLogsWithResponse(t.Context(), w.Id, params))(t)
		return r.StatusCode(), string(r.Body)
	}
	if s, body := read(nil); s != 200 || strings.Count(body, "\n") != 3 || !strings.Contains(body, "simulated container: ready") {
		t.Fatalf("%d %q", s, body)
	}
	if s, body := read(&model.GetWorkloadLogsParams{TailLines: new(1)}); s != 200 || body != "simulated container: ready\n" {
		t.Fatalf("tail: %d %q", s, body)
	}
	// Follow: the stream stays open after the last line. (Not
	// GetWorkloadLogsWithResponse: it would read the stream to its end.)
	follow := &model.GetWorkloadLogsParams{Follow: new(true)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := g.api.GetWorkloadLogs(ctx, w.Id, follow)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, rest := make(chan string, 1), make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		var all string
		for !strings.Contains(all, "ready") {
			n, err := resp.Body.Read(buf)
			all += string(buf[:n])
			if err != nil {
				break
			}
		}
		got <- all
		// Then the stream stays open until the workload ends.
		b, _ := io.ReadAll(resp.Body)
		rest <- string(b)
	}()
	select {
	case body := <-got:
		if !strings.Contains(body, "simulated container: ready") {
			t.Fatalf("followed %q", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no log lines within 30 s")
	}
	select {
	case body := <-rest:
		t.Fatalf("the followed log ended while the workload runs: %q", body)
	default:
	}
	// The workload ends: so does the follow, saying how.
	if s, _ := g.stop(w.Id); s != 200 {
		t.Fatalf("stop: %d", s)
	}
	select {
	case body := <-rest:
		if !strings.Contains(body, "[gantry] workload "+w.Id+" Stopped") {
			t.Fatalf("the end of the followed log: %q", body)
		}
	case <-time.After(30 * time.Second): // it reads on for logDrain — 2 s here; the default 35 s would not fit — unless the log ends first
		t.Fatal("the followed log did not end within 30 s of the stop: is logDrain (2 s) in force?")
	}
	cancel()
	// Following a workload that has ended reads its log and ends.
	done := make(chan int, 1)
	go func() {
		resp, err := g.api.GetWorkloadLogs(context.Background(), w.Id, follow)
		if err != nil {
			done <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case s := <-done:
		// Its pods are gone with the stop: the log, or a problem, at once.
		if s == 0 || s >= 500 {
			t.Fatalf("following a stopped workload: %d", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("following a stopped workload did not end")
	}

	// No log before there is a pod.
	first := start(t, storetest.SQLitePath(t), false)
	_, p := first.launch(model.LaunchRequest{Template: "vllm-inference", Team: "logs"})
	if s := servertest.Must(first.api.GetWorkloadLogsWithResponse(t.Context(), p.Id, nil))(t).StatusCode(); s != 409 {
		t.Fatalf("log of an unapplied workload: %d, want 409", s)
	}
}

// TestRejectedByAdmission: when the API server refuses a workload's objects (here
// a ValidatingAdmissionPolicy, as sites use), the launch answers 422 with the
// server's reason, and the workload is Failed with it.
func TestRejectedByAdmission(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	ctx := context.Background()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "freeze-services"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: new(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "GPU services are frozen in this namespace"}},
		},
	}
	if _, err := cluster.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "freeze-services"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "freeze-services",
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"gantry.dev/team": "frozen"},
			}},
		},
	}
	if _, err := cluster.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var p model.Problem
	// The admission policy takes a moment to load in the API server.
	waitfor.Until(t, 30*time.Second, "the admission policy to refuse a launch", func() error {
		r := servertest.Must(g.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "vllm-inference", Team: "frozen"}))(t)
		if r.StatusCode() != 422 {
			return fmt.Errorf("launch answered %d", r.StatusCode())
		}
		p = servertest.Deref(r.ApplicationproblemJSONDefault)
		return nil
	})
	if errs := servertest.Deref(p.Errors); p.Status != 422 || len(errs) == 0 || !strings.Contains(errs[0].Detail, "GPU services are frozen") ||
		!strings.HasPrefix(errs[0].Field, "objects.Deployment/vllm-inference-") {
		t.Fatalf("%s", asJSON(p))
	}
	list := servertest.Deref(servertest.Must(g.api.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Team: new("frozen"), Status: new(model.Failed)}))(t).JSON200)
	if len(list.Items) == 0 || !strings.Contains(servertest.Deref(list.Items[0].Reason), "GPU services are frozen") {
		t.Fatalf("failed workloads %s", asJSON(list.Items))
	}
}

// TestQuotaQueues: a team whose quota holds one H100 runs one service and
// queues the next — Queued through the API, with Kueue's reason and its
// place in the queue — and stopping the first lets the second run.
func TestQuotaQueues(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	launch := func() model.Workload {
		s, w := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "tight", Gpu: &model.GPUChoice{Class: new("H100-80GB"), Count: new(1)}})
		if s != 201 {
			t.Fatalf("launch: %d", s)
		}
		return w
	}
	first := launch()
	g.waitStatus(first.Id, "Running")
	second := launch()
	g.waitStatus(second.Id, "Queued")
	waitfor.Until(t, 30*time.Second, "Kueue's reason and the place in the queue", func() error {
		if w := g.workload(second.Id); w.Status != "Queued" || !strings.Contains(servertest.Deref(w.Reason), "position 1 in its team's queue") || !strings.Contains(servertest.Deref(w.Reason), "insufficient unused quota") {
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		return nil
	})
	if s, _ := g.stop(first.Id); s != 200 {
		t.Fatalf("stop: %d", s)
	}
	g.waitStatus(second.Id, "Running")
}

// testPolicy is policy/ with the starter roles and bindings, but every team
// may use every template and GPU class with room to spare, so that tests
// choose freely — except team tight, whose quota is one H100, and team
// onecore, whose CPU-only launches have one core.
func testPolicy(t testing.TB) string {
	t.Helper()
	return policyTeams(t, testTeams+
		"  onecore:\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    quota: {gpus: {\"*\": 1000}, cores: 1}\n")
}

// testTeams are testPolicy's teams in the fields every release reads (the
// rolling upgrade's previous release reads its policy strictly).
const testTeams = "teams:\n  \"*\":\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    quota: {gpus: {\"*\": 1000}}\n" +
	"  tight:\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    quota: {gpus: {H100-80GB: 1}}\n"

// policyTeams is policy/ with its teams section replaced by teams.
func policyTeams(t testing.TB, teams string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.conf", "roles.csv", "bindings.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../policy", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "bindings.yaml" {
			i := bytes.Index(b, []byte("\nteams:"))
			if i < 0 {
				t.Fatal("policy/bindings.yaml has no teams section")
			}
			b = append(b[:i+1], []byte(teams)...)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
