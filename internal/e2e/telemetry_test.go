package e2e_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/node/devagent"
	"github.com/gantryhq/gantry/internal/replay"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// agentToken makes a ServiceAccount token for audience, bound to a pod of
// account sa on node (created here, as the DaemonSet's pod would be), as
// the kubelet projects it into the agent's pod.
func agentToken(t *testing.T, ns, sa, node, audience string) string {
	t.Helper()
	ctx := context.Background()
	c := cluster.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-"},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "agent", Image: "gantry-agent"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
	exp := int64(600)
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: &exp,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// push posts a batch with a bearer token straight to Gantry (not through
// the test's front, which signs requests in as a person).
func push(t *testing.T, g *gantryServer, token string, b telemetry.Batch) (int, string) {
	t.Helper()
	body, _ := json.Marshal(b)
	req, _ := http.NewRequest("POST", g.URL+"/api/v1/telemetry", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// TestTelemetryPush: an agent's projected token is checked with a
// TokenReview by the real API server — only the agent's ServiceAccount, only
// for its own node, only for pods on that node — and what it pushed comes
// back as the workload's series, to its team, and on the node's page.
func TestTelemetryPush(t *testing.T) {
	g := start(t, filepath.Join(t.TempDir(), "g.db"), true)
	var w wl
	if s := g.post("/api/v1/workloads", map[string]any{"template": "vllm-inference", "team": "vision"}, &w); s != 201 {
		t.Fatalf("launch: %d", s)
	}
	g.waitStatus(w.ID, "Running")
	pods := podsOf(t, "vision", w.ID)
	if len(pods) != 1 {
		t.Fatalf("pods: %d", len(pods))
	}
	pod, node := pods[0], pods[0].Spec.NodeName
	var other string // another GPU node
	nodes, err := cluster.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "nvidia.com/gpu.present=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Name != node {
			other = n.Name
			break
		}
	}
	now := time.Now().UTC().Truncate(time.Second)
	batch := func(on string, podName string) telemetry.Batch {
		b := telemetry.Batch{Node: on, Agent: "e2e", GPUs: []telemetry.GPUState{{Device: telemetry.Device{GPU: "GPU-e2e-0", Index: 0, Model: "NVIDIA H100 80GB HBM3"}, MemoryMiB: 81559}}}
		for i := 0; i < 6; i++ {
			v := telemetry.NoValues()
			v[telemetry.SMActive], v[telemetry.FBUsed] = 0.1*float64(i+1), 30000
			b.Readings = append(b.Readings, telemetry.Reading{Time: now.Add(time.Duration(i-6) * 10 * time.Second), Device: telemetry.Device{GPU: "GPU-e2e-0", Index: 0},
				Pod: telemetry.PodRef{Namespace: "gantry-vision", Name: podName, Container: "main"}, Share: 1, Attribution: "exclusive", Values: v})
		}
		return b
	}
	const agentNS, agentSA = "gantry-system", "gantry-agent"
	token := agentToken(t, agentNS, agentSA, node, "gantry")

	for _, tc := range []struct {
		name   string
		token  string
		batch  telemetry.Batch
		status int
		says   string
	}{
		{"no token", "", batch(node, pod.Name), 401, ""},
		{"not a token", "garbage", batch(node, pod.Name), 401, ""},
		{"another audience", agentToken(t, agentNS, agentSA, node, "kubernetes"), batch(node, pod.Name), 401, ""},
		{"another ServiceAccount", agentToken(t, agentNS, "default", node, "gantry"), batch(node, pod.Name), 403, "may not push"},
		{"another node's batch", token, batch(other, pod.Name), 403, other},
		{"a pod of another node, from the agent on that node", agentToken(t, agentNS, agentSA, other, "gantry"), batch(other, pod.Name), 422, "readings[0].pod"},
		{"the agent of the pod's node", token, batch(node, pod.Name), 202, `"accepted":6`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := push(t, g, tc.token, tc.batch)
			if status != tc.status || !strings.Contains(body, tc.says) {
				t.Fatalf("%d %s; want %d saying %q", status, body, tc.status, tc.says)
			}
		})
	}

	// The owner's team reads the series back.
	var series struct {
		Source string
		Series []struct {
			Metric, Dcgm string
			Pod          struct{ Pod string }
			Points       []struct {
				Avg, Max float64
				N        int
			}
		}
	}
	q := fmt.Sprintf("/api/v1/workloads/%s/metrics?from=%s&to=%s&step=1m&series=sm_active,DCGM_FI_DEV_FB_USED",
		w.ID, now.Add(-2*time.Minute).Format(time.RFC3339), now.Format(time.RFC3339))
	resp, err := http.Get(g.url + q)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&series)
	resp.Body.Close()
	if resp.StatusCode != 200 || series.Source != "gantry" || len(series.Series) != 2 {
		t.Fatalf("metrics: %d %+v", resp.StatusCode, series)
	}
	var n int
	maxSM := 0.0
	for _, s := range series.Series {
		if s.Pod.Pod != pod.Name {
			t.Fatalf("series of pod %q, want %q", s.Pod.Pod, pod.Name)
		}
		for _, p := range s.Points {
			if s.Metric == "sm_active" {
				n += p.N
				maxSM = max(maxSM, p.Max)
			}
		}
	}
	if n != 6 || maxSM < 0.59 || maxSM > 0.61 {
		t.Fatalf("sm_active: %d samples, max %v; want the 6 pushed, max 0.6", n, maxSM)
	}

	// The node's page: the GPU, its use by the workload.
	var nd struct {
		Name    string
		Healthy bool
		Gpus    []struct{ Gpu string }
		Devices []struct{ Workload string }
	}
	resp, err = http.Get(g.url + "/api/v1/nodes/" + node)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&nd)
	resp.Body.Close()
	if resp.StatusCode != 200 || !nd.Healthy || len(nd.Gpus) != 1 || len(nd.Devices) != 1 || nd.Devices[0].Workload != w.ID {
		t.Fatalf("node %s: %d %+v", node, resp.StatusCode, nd)
	}

	// A critical XID marks the GPU unhealthy and leaves a warning on the pod.
	b := batch(node, pod.Name)
	b.Readings = b.Readings[5:]
	b.Events = []telemetry.Event{{Time: now, GPU: "GPU-e2e-0", XID: 79, Detail: "GPU has fallen off the bus"}}
	if status, body := push(t, g, token, b); status != 202 {
		t.Fatalf("push with an XID: %d %s", status, body)
	}
	waitfor.Until(t, 30*time.Second, "a GPUUnhealthy event on the workload's pod", func() error {
		evs, err := cluster.Client.CoreV1().Events("gantry-vision").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name + ",reason=GPUUnhealthy"})
		if err != nil {
			return err
		}
		if len(evs.Items) == 0 || !strings.Contains(evs.Items[0].Message, "XID 79") {
			return fmt.Errorf("events: %d", len(evs.Items))
		}
		return nil
	})
}

// TestLiveSeries: as in gantry dev, the simulated agents of the local
// cluster's GPU nodes replay a profile on each GPU workload's devices and
// push into Gantry; the workload's series come back through the API, for a
// whole GPU and for a MIG instance.
func TestLiveSeries(t *testing.T) {
	g := start(t, filepath.Join(t.TempDir(), "g.db"), true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	launch := func(template, profile string) (wl, corev1.Pod) {
		var w wl
		if s := g.post("/api/v1/workloads", map[string]any{"template": template, "team": "vision"}, &w); s != 201 {
			t.Fatalf("launch %s: %d", template, s)
		}
		g.waitStatus(w.ID, "Running")
		pod := podsOf(t, "vision", w.ID)[0]
		// The profile the simulated GPU plays (gantry dev's default is a pod of the GenAI trace).
		pod.Annotations[devagent.ProfileAnnotation] = profile
		if _, err := cluster.Client.CoreV1().Pods(pod.Namespace).Update(ctx, &pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return w, pod
	}
	service, _ := launch("vllm-inference", "compute-bound")
	notebook, _ := launch("jupyter-notebook", "near-oom")
	go devagent.Run(ctx, devagent.Options{Client: cluster.Client, Interval: time.Second, Sink: devagent.SinkFunc(func(ctx context.Context, b telemetry.Batch) error {
		_, err := g.Telemetry.Ingest(ctx, b.Node, b)
		return err
	})})
	type series struct {
		Metric string
		Device struct {
			Gpu string
			Mig *struct{ Profile string }
		}
		Points []struct {
			Avg float64
			N   int
		}
	}
	read := func(id, metrics string) ([]series, error) {
		resp, err := http.Get(g.url + "/api/v1/workloads/" + id + "/metrics?step=10s&from=" + time.Now().Add(-5*time.Minute).UTC().Format(time.RFC3339) + "&series=" + metrics)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var out struct{ Series []series }
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return nil, fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		return out.Series, err
	}
	waitfor.Until(t, 60*time.Second, "the service's SM activity through the API", func() error {
		ss, err := read(service.ID, "sm_active")
		if err != nil {
			return err
		}
		if len(ss) != 1 || ss[0].Device.Mig != nil || len(ss[0].Points) == 0 || ss[0].Points[len(ss[0].Points)-1].Avg < 0.85 {
			return fmt.Errorf("series %+v", ss)
		}
		return nil
	})
	waitfor.Until(t, 60*time.Second, "the notebook's MIG memory through the API", func() error {
		ss, err := read(notebook.ID, "fb_used,fb_total")
		if err != nil {
			return err
		}
		if len(ss) != 2 || ss[0].Device.Mig == nil || ss[0].Device.Mig.Profile != notebook.Gpu.MigProfile || len(ss[0].Points) == 0 || len(ss[1].Points) == 0 {
			return fmt.Errorf("series %+v (want MIG %s)", ss, notebook.Gpu.MigProfile)
		}
		used, total := ss[0].Points[len(ss[0].Points)-1].Avg, ss[1].Points[len(ss[1].Points)-1].Avg
		if ss[0].Metric != "fb_used" || used/total < 0.95 {
			return fmt.Errorf("fb_used %v of %v", used, total)
		}
		return nil
	})
}

// TestUnhealthyGPUCordonsTheNode: with telemetry.cordon on, a GPU that
// turns unhealthy (a double-bit ECC error) cordons its node and labels it,
// and the node's page says why.
func TestUnhealthyGPUCordonsTheNode(t *testing.T) {
	g := start(t, filepath.Join(t.TempDir(), "g.db"), true, func(c *config.Config) { c.Telemetry.Cordon = true })
	ctx := context.Background()
	const node = "l4-spot-0"
	t.Cleanup(func() {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			n.Spec.Unschedulable = false
			delete(n.Labels, nodes.UnhealthyLabel)
			cluster.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		}
	})
	token := agentToken(t, "gantry-system", "gantry-agent", node, "gantry")
	gpus := []telemetry.GPUState{{Device: telemetry.Device{GPU: "GPU-l4-spot-0-0", Index: 0, Model: "NVIDIA L4"}, MemoryMiB: 23034}}
	if s, body := push(t, g, token, telemetry.Batch{Node: node, GPUs: gpus}); s != 202 {
		t.Fatalf("healthy: %d %s", s, body)
	}
	gpus[0].ECC.VolatileDBE = 1
	if s, body := push(t, g, token, telemetry.Batch{Node: node, GPUs: gpus}); s != 202 {
		t.Fatalf("a double-bit error: %d %s", s, body)
	}
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable || n.Labels[nodes.UnhealthyLabel] != "true" {
		t.Fatalf("node %s: unschedulable %v, labels %v", node, n.Spec.Unschedulable, n.Labels)
	}
	var page struct {
		Healthy bool
		Gpus    []struct {
			Healthy bool
			Reason  string
		}
	}
	resp, err := http.Get(g.url + "/api/v1/nodes/" + node)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if page.Healthy || len(page.Gpus) != 1 || page.Gpus[0].Healthy || !strings.Contains(page.Gpus[0].Reason, "double-bit") {
		t.Fatalf("node page: %+v", page)
	}
}

// TestAdviceThroughTheAPI: a workload whose GPU played the input-starved
// profile for 40 minutes (pushed by its node's agent) gets that finding
// through the API, with its evidence and the series that prove it.
func TestAdviceThroughTheAPI(t *testing.T) {
	g := start(t, filepath.Join(t.TempDir(), "g.db"), true)
	ctx := context.Background()
	var w wl
	if s := g.post("/api/v1/workloads", map[string]any{"template": "vllm-inference", "team": "vision"}, &w); s != 201 {
		t.Fatalf("launch: %d", s)
	}
	g.waitStatus(w.ID, "Running")
	pod := podsOf(t, "vision", w.ID)[0]
	// It has run for an hour: the record is moved back in time (the
	// samples below are the last 40 minutes of it; no API changes when a
	// workload was created, so the test writes the database).
	db, err := sql.Open("sqlite", string(g.Config.Database.DSN))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE workloads SET created_at = created_at - ? WHERE id = ?`, time.Hour.Microseconds(), w.ID); err != nil {
		t.Fatal(err)
	}
	db.Close()
	node := replay.NewNode([]replay.GPU{{UUID: "GPU-advice-0", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}})
	prof, _ := replay.Lookup("input-starved", "")
	now := time.Now().UTC().Truncate(time.Second)
	start := now.Add(-40 * time.Minute)
	node.Play("GPU-advice-0", prof, start, 1)
	b := telemetry.Batch{Node: pod.Spec.NodeName}
	for at := start; at.Before(now); at = at.Add(10 * time.Second) {
		ss, _ := node.Sample(ctx, at)
		for _, s := range ss {
			b.Readings = append(b.Readings, telemetry.Reading{Time: at, Device: s.Device, Pod: telemetry.PodRef{Namespace: pod.Namespace, Name: pod.Name, Container: "main"},
				Share: 1, Attribution: "exclusive", Values: s.Values})
		}
	}
	token := agentToken(t, "gantry-system", "gantry-agent", pod.Spec.NodeName, "gantry")
	if s, body := push(t, g, token, b); s != 202 {
		t.Fatalf("push: %d %s", s, body)
	}
	var report struct {
		Findings []struct {
			Kind      string
			Reason    string
			Evidence  []struct{ Metric string }
			SeriesURL string
		}
	}
	resp, err := http.Get(g.url + "/api/v1/workloads/" + w.ID + "/advice")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&report)
	resp.Body.Close()
	var found bool
	for _, f := range report.Findings {
		if f.Kind == "input-starved" {
			found = true
			if len(f.Evidence) == 0 || !strings.Contains(f.SeriesURL, "/api/v1/workloads/"+w.ID+"/metrics?") || !strings.Contains(f.Reason, "data loader") {
				t.Fatalf("finding: %+v", f)
			}
			// The evidence link answers with the series.
			r, err := http.Get(g.url + f.SeriesURL)
			if err != nil {
				t.Fatal(err)
			}
			var m struct{ Series []struct{ Metric string } }
			json.NewDecoder(r.Body).Decode(&m)
			r.Body.Close()
			if r.StatusCode != 200 || len(m.Series) == 0 {
				t.Fatalf("evidence %s: %d %+v", f.SeriesURL, r.StatusCode, m)
			}
		}
	}
	if resp.StatusCode != 200 || !found {
		t.Fatalf("advice: %d %+v", resp.StatusCode, report)
	}
}

// TestApplyRightSize: a notebook on 3g.40gb that used 8 GiB at 10 % for two
// and a half hours is told to move to 1g.10gb — on its page, in its team's
// advice, in the template's rollup — and one call relaunches it there and
// stops the old one.
func TestApplyRightSize(t *testing.T) {
	g := start(t, filepath.Join(t.TempDir(), "g.db"), true)
	var w wl
	if s := g.post("/api/v1/workloads", map[string]any{"template": "jupyter-notebook", "team": "vision", "gpu": map[string]any{"migProfile": "3g.40gb"}}, &w); s != 201 {
		t.Fatalf("launch: %d", s)
	}
	g.waitStatus(w.ID, "Running")
	pod := podsOf(t, "vision", w.ID)[0]
	db, err := sql.Open("sqlite", string(g.Config.Database.DSN))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE workloads SET created_at = created_at - ? WHERE id = ?`, (3 * time.Hour).Microseconds(), w.ID); err != nil {
		t.Fatal(err)
	}
	db.Close()
	now := time.Now().UTC().Truncate(time.Second)
	dev := telemetry.Device{GPU: "GPU-rs-0", Index: 0, Model: "NVIDIA H100 80GB HBM3", MIG: &telemetry.MIGInstance{UUID: "MIG-rs-0", Profile: "3g.40gb", InstanceID: 2}}
	b := telemetry.Batch{Node: pod.Spec.NodeName}
	for at := now.Add(-150 * time.Minute); at.Before(now); at = at.Add(30 * time.Second) {
		v := telemetry.NoValues()
		v[telemetry.GPUUtil], v[telemetry.SMActive], v[telemetry.FBUsed], v[telemetry.FBTotal], v[telemetry.DRAMActive], v[telemetry.TensorActive] = 10, 0.1, 8000, 40960, 0.05, 0.05
		b.Readings = append(b.Readings, telemetry.Reading{Time: at, Device: dev, Pod: telemetry.PodRef{Namespace: pod.Namespace, Name: pod.Name, Container: "notebook"}, Share: 1, Values: v})
	}
	token := agentToken(t, "gantry-system", "gantry-agent", pod.Spec.NodeName, "gantry")
	if s, body := push(t, g, token, b); s != 202 {
		t.Fatalf("push: %d %s", s, body)
	}
	type finding struct {
		Kind       string
		MonthlyUSD float64
		Recommend  *struct{ Profile string }
	}
	getJSON := func(path string, out any) int {
		resp, err := http.Get(g.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(out)
		return resp.StatusCode
	}
	var report struct{ Findings []finding }
	if s := getJSON("/api/v1/workloads/"+w.ID+"/advice", &report); s != 200 {
		t.Fatalf("advice: %d", s)
	}
	over := func(fs []finding) *finding {
		for i := range fs {
			if fs[i].Kind == "over-provisioned" {
				return &fs[i]
			}
		}
		return nil
	}
	if f := over(report.Findings); f == nil || f.Recommend == nil || f.Recommend.Profile != "1g.10gb" || f.MonthlyUSD <= 0 {
		t.Fatalf("advice: %+v", report.Findings)
	}
	var team struct {
		Items []struct {
			Workload string
			Finding  finding
		}
	}
	if s := getJSON("/api/v1/advice?team=vision", &team); s != 200 || len(team.Items) == 0 {
		t.Fatalf("team advice: %d %+v", s, team)
	}
	var rollup struct {
		Measured    int
		Recommended string
	}
	if s := getJSON("/api/v1/templates/jupyter-notebook/advice", &rollup); s != 200 || rollup.Measured != 1 || rollup.Recommended != "1g.10gb" {
		t.Fatalf("template advice: %d %+v", s, rollup)
	}
	var applied struct {
		Workload struct {
			ID  string
			Gpu struct{ MigProfile string }
		}
		Applied finding
	}
	if s := g.post("/api/v1/workloads/"+w.ID+"/advice/apply", map[string]any{"kind": "over-provisioned"}, &applied); s != 201 {
		t.Fatalf("apply: %d", s)
	}
	if applied.Workload.ID == w.ID || applied.Workload.Gpu.MigProfile != "1g.10gb" || applied.Applied.Kind != "over-provisioned" {
		t.Fatalf("applied: %+v", applied)
	}
	if old := g.get(w.ID); old.Status != "Stopped" {
		t.Fatalf("the old notebook is %s, want Stopped", old.Status)
	}
	// A second apply (a double click) relaunches nothing more.
	if s := g.post("/api/v1/workloads/"+w.ID+"/advice/apply", map[string]any{"kind": "over-provisioned"}, nil); s != 409 {
		t.Fatalf("a second apply: %d, want 409", s)
	}
	g.waitStatus(applied.Workload.ID, "Running")
}
