package faultsuite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestAPIServerDownMidBurst: launches come before, during and after 60
// seconds in which the cluster's control plane is down. Those made while
// it is down are accepted (201, Pending, the reason saying why) and
// applied once it answers again; at the end every launch is one workload,
// applied once as one Job, and running or run to its end, and no Job
// belongs to no workload.
func TestAPIServerDownMidBurst(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	ctx := context.Background()
	ns := "gantry-faults-" + workload.NewID()
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := servertest.WithOverrides(t, server.Overrides{Identify: admin}, func(c *config.Config) {
		c.Kubeconfig = cluster.Kubeconfig
		c.Namespace = ns
		c.ReconcileInterval = config.Duration(time.Second)
		c.CapacityInformers = false
	})
	api := servertest.Client(g.URL, "test.jwt.token")
	t.Cleanup(func() {
		if t.Failed() {
			dumpQueue(t)
		}
	})
	req := model.LaunchRequest{Template: "pytorch-train", Team: "vision", Gpu: &model.GPUChoice{Count: new(1)}}
	var mu sync.Mutex
	accepted := map[string]string{} // key → workload id
	during := 0
	launch := func(key string) {
		t.Helper()
		r, err := api.CreateWorkloadWithResponse(ctx, &model.CreateWorkloadParams{IdempotencyKey: &key}, req)
		if err != nil {
			t.Fatal(err)
		}
		w := r.JSON201
		if w == nil {
			t.Fatalf("launch %s: %d %s", key, r.StatusCode(), r.Body)
		}
		mu.Lock()
		accepted[key] = w.Id
		mu.Unlock()
	}
	for i := range 4 {
		launch(fmt.Sprintf("before-%d", i))
	}
	restore, err := cluster.Outage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() { // a test failed mid-outage still gives the machine's creation lock back
		if !restored {
			restore(context.Background())
		}
	})
	down := time.Now()
	// While it is down: a launch every 10 s for 60 s, each accepted and
	// waiting for the API server.
	tick := time.NewTicker(10 * time.Second)
	for i := 0; time.Since(down) < 60*time.Second; i++ {
		key := fmt.Sprintf("during-%d", i)
		launch(key)
		during++
		w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, accepted[key]))(t).JSON200)
		if w.Applied || w.Status != model.Pending {
			t.Errorf("launched with the API server down: %s applied=%v (%s)", w.Status, w.Applied, servertest.Deref(w.Reason))
		}
		<-tick.C
	}
	tick.Stop()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	restored = true
	if err := restore(rctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the control plane was down %v", time.Since(down).Round(time.Second))
	for i := range 4 {
		launch(fmt.Sprintf("after-%d", i))
	}

	servertest.CheckLaunches(t, api, cluster.Client, "vision", accepted, 3*time.Minute, func(w model.Workload) error {
		if !w.Applied || (w.Status != model.Running && w.Status != model.Succeeded) {
			return fmt.Errorf("%s applied=%v (%s)", w.Status, w.Applied, servertest.Deref(w.Reason))
		}
		return nil
	})
	t.Logf("%d launches (%d while the API server was down): each one workload, one Job, running or Succeeded", len(accepted), during)
}

// dumpQueue logs what holds a failed run's launches back (it failed in
// CI r128, r157, r162 and CI's own runs of b3cb8f3 and db1aaad with
// launches waiting minutes after the outage: kwok, restarted, ran no pod
// until its previous run's 200 s node leases expired; devcluster.Outage
// now waits for the leases, 40 s since, and restarts Kueue and the volume
// provisioner, as their leader election would): the pods not ended and
// where they run, the nodes not Ready, each ClusterQueue's status as Kueue
// keeps it, the team's Jobs and Kueue Workloads, and what Kueue logged
// about the Jobs still suspended.
func dumpQueue(t *testing.T) {
	ctx := context.Background()
	pods, err := cluster.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("pods: %v", err)
		pods = &corev1.PodList{}
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.Namespace != "kube-system" {
			t.Logf("pod %s/%s %s on %q since %s", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName, p.CreationTimestamp.Format(time.TimeOnly))
		}
	}
	nodes, err := cluster.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("nodes: %v", err)
		nodes = &corev1.NodeList{}
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				t.Logf("node %s not Ready since %s: %s", n.Name, c.LastTransitionTime.Format(time.TimeOnly), c.Message)
			}
		}
	}
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Logf("dynamic client: %v", err)
		return
	}
	cqs, err := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("cluster queues: %v", err)
		return
	}
	for _, cq := range cqs.Items {
		status, _ := json.Marshal(cq.Object["status"])
		t.Logf("cluster queue %s: %s", cq.GetName(), status)
	}
	// The Jobs and Kueue's Workloads of the team, and what Kueue logged
	// about the Jobs it did not admit.
	const ns = "gantry-vision"
	jobs, err := cluster.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("jobs: %v", err)
		return
	}
	lqs, err := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, lq := range lqs.Items {
			status, _ := json.Marshal(lq.Object["status"])
			t.Logf("local queue %s (created %s): %s", lq.GetName(), lq.GetCreationTimestamp().Format(time.TimeOnly), status)
		}
	}
	wls, err := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("workloads: %v", err)
		return
	}
	byJob := map[string]string{}
	for _, w := range wls.Items {
		var conds []string
		cs, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
		for _, c := range cs {
			m, _ := c.(map[string]any)
			conds = append(conds, fmt.Sprintf("%v=%v(%v)", m["type"], m["status"], m["reason"]))
		}
		queue, _, _ := unstructured.NestedString(w.Object, "spec", "queueName")
		for _, o := range w.GetOwnerReferences() {
			byJob[o.Name] = fmt.Sprintf("workload %s queue %s created %s: %s", w.GetName(), queue, w.GetCreationTimestamp().Format(time.TimeOnly), strings.Join(conds, " "))
		}
	}
	var stuck []string
	for _, j := range jobs.Items {
		wl, ok := byJob[j.Name]
		if !ok {
			wl = "no Kueue workload"
		}
		suspended := j.Spec.Suspend != nil && *j.Spec.Suspend
		t.Logf("job %s created %s suspended=%v active=%d: %s", j.Name, j.CreationTimestamp.Format(time.TimeOnly), suspended, j.Status.Active, wl)
		if suspended {
			stuck = append(stuck, j.Name)
		}
	}
	if cluster.KueueLog() == "" || len(stuck) == 0 {
		return
	}
	data, err := os.ReadFile(cluster.KueueLog())
	if err != nil {
		t.Logf("kueue log: %v", err)
		return
	}
	n := 0
	for line := range strings.Lines(string(data)) {
		for _, name := range stuck {
			if strings.Contains(line, name) && n < 80 {
				t.Logf("kueue: %s", strings.TrimSpace(line))
				n++
				break
			}
		}
	}
}
