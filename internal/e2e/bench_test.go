package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/loadgen"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/workloads"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

// BenchmarkLaunch compares Gantry's POST /api/v1/workloads (validation,
// rendering, the database record and the server-side apply, until it answers)
// with the natural baseline: a direct client-go server-side apply of the same
// objects (namespace included; queued for Kueue as Gantry renders them, so
// Kueue's admission work is in both) on the same cluster. Each iteration does
// one of each, alternately, so both see the same cluster load; it reports the
// mean of each (ms), their ratio, and the part of Gantry's that was its
// apply.
func BenchmarkLaunch(b *testing.B) {
	if cluster == nil {
		b.Skip(clustertest.ErrNotRequested)
	}
	// The lifecycle loop at its production interval, not the tests' 1 s.
	g := start(b, filepath.Join(b.TempDir(), "g.db"), true, func(c *config.Config) { c.ReconcileInterval = config.Default().ReconcileInterval })
	body, _ := json.Marshal(model.LaunchRequest{Template: "vllm-inference", Team: "bench"})
	k, err := kube.New(cluster.Config(), kube.Options{})
	if err != nil {
		b.Fatal(err)
	}
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		b.Fatal(err)
	}
	var tpl *template.Template
	for _, f := range files {
		if f.Template.Metadata.Name == "vllm-inference" {
			tpl = f.Template
		}
	}
	r, err := tpl.Resolve(classes, template.Choice{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tok := g.Token("ada") // straight to Gantry, not through the test's front
	gantryLaunch := func() {
		// raw: timed, and the typed client's decoding of the answer would
		// count against Gantry
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v1/workloads", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	// Names of this run's own: another run's (-count) would make the direct
	// applies no-ops on objects that are already there.
	n, run := 0, strings.ToLower(rand.Text()[:6])
	directLaunch := func() {
		objs, err := render.Objects(r, render.Meta{WorkloadID: fmt.Sprintf("b%s%05d", run, n), Team: "bench", Owner: "alice", Namespace: "gantry-bench", TemplateVersion: 1, Image: "registry.gantry.internal/bench/image@sha256:" + strings.Repeat("2", 64), Kueue: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := k.EnsureNamespace(ctx, "gantry-bench", "bench"); err != nil {
			b.Fatal(err)
		}
		if err := k.Apply(ctx, objs); err != nil {
			b.Fatal(err)
		}
	}
	// What a launch costs the API server, everything it sets off included
	// (Kueue's Workload, the ReplicaSet, the pod, the scheduler, kwok,
	// Gantry's informers and approval check): the API server's own request
	// count around 20 launches of each path alone, 5 s after the last, less
	// an idle window as long.
	perLaunch := func(launch func()) (float64, map[string]float64) {
		idle := apiserverRequests(b)
		waitQuiet := 5 * time.Second
		time.Sleep(waitQuiet) // measuring: the idle window is the figure's background
		before := apiserverRequests(b)
		t0 := time.Now()
		for range 20 {
			n++
			launch()
		}
		time.Sleep(waitQuiet) // measuring: what the launches set off lands within it
		after := apiserverRequests(b)
		window := time.Since(t0).Seconds()
		by := map[string]float64{}
		total := 0.0
		for k, v := range after {
			background := (before[k] - idle[k]) * window / waitQuiet.Seconds()
			if d := (v - before[k] - background) / 20; d > 0.05 {
				by[k] = d
				total += d
			}
		}
		return total, by
	}
	gReq, gBy := perLaunch(gantryLaunch)
	dReq, dBy := perLaunch(directLaunch)
	b.ReportMetric(gReq, "apiserver-requests/gantry-launch")
	b.ReportMetric(dReq, "apiserver-requests/direct-launch")
	b.Logf("API server requests per launch (net of the idle rate): Gantry %.1f, direct %.1f\n%s", gReq, dReq, requestTable(gBy, dBy))
	var gantryTime, directTime time.Duration
	for b.Loop() {
		n++
		start := time.Now()
		gantryLaunch()
		gantryTime += time.Since(start)

		start = time.Now()
		directLaunch()
		directTime += time.Since(start)
	}
	gm := float64(gantryTime.Microseconds()) / 1000 / float64(b.N)
	dm := float64(directTime.Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(gm, "gantry-ms/launch")
	b.ReportMetric(dm, "direct-ms/launch")
	b.ReportMetric(gm/dm, "ratio")
	// Where Gantry's time goes: its own measure of the apply inside each
	// launch (the same kube.Apply the direct path calls), the rest being
	// Gantry's (HTTP, authentication, validation, the record, rendering,
	// the image pin, the applied mark).
	if lt := launchTimes(b, g.URL); lt.applies > 0 {
		b.ReportMetric(lt.applySec*1000/float64(lt.applies), "gantry-apply-ms/launch")
	}
}

// BenchmarkSubmitToRunning submits a batch of 100 launches at once (ten at a
// time) and reports the p50 and p95 of the time from submitting each until the
// API reports it Running; and, alternately in each round, the baseline: the
// same objects (queued for Kueue, as Gantry renders them) applied directly
// into a team's LocalQueue with client-go, timed until their pods run. Two
// kinds: a one-GPU Job (pytorch-train, Kueue's Job integration: one Workload,
// the Job unsuspended) and a service (vllm-inference, a Deployment: Kueue's
// pod integration, a Workload and a scheduling gate per pod). The cluster
// gets enough extra H100 nodes for a batch.
func BenchmarkSubmitToRunning(b *testing.B) {
	if cluster == nil {
		b.Skip(clustertest.ErrNotRequested)
	}
	if err := cluster.AddNodes(context.Background(), []devcluster.NodeSpec{{Prefix: "bench-h100", Count: 13, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: 8, Whole: 8}}); err != nil {
		b.Fatal(err)
	}
	// A Job's pod completes a second after it runs (the local cluster's
	// kwok stage): past Running counts as Running, on both paths.
	b.Run("job", func(b *testing.B) {
		submitToRunning(b, "pytorch-train", 1, jobStages, 100, 10, model.Running, model.Succeeded)
	})
	b.Run("service", func(b *testing.B) {
		submitToRunning(b, "vllm-inference", 0, serviceStages, 100, 10, model.Running)
	})
	// At low load: one launch at a time, each waited for until it runs
	// before the next is sent, so that what is measured is each path's
	// latency and not the cluster's throughput under a burst.
	b.Run("job-one", func(b *testing.B) {
		submitToRunning(b, "pytorch-train", 1, jobStages, 20, 1, model.Running, model.Succeeded)
	})
}

// submitToRunning times batch launches of templateName, at at a time (one
// at a time: each waited for until it runs), on each path.
func submitToRunning(b *testing.B, templateName string, gpus int, order []int, batch, at int, running ...model.WorkloadStatus) {
	ctx := context.Background()
	k, err := kube.New(cluster.Config(), kube.Options{})
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		b.Fatal(err)
	}
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		b.Fatal(err)
	}
	var tpl template.Template
	for _, f := range files {
		if f.Template.Metadata.Name == templateName {
			tpl = *f.Template
		}
	}
	// Without its volume: claims wait for the simulated cluster's volume
	// binder (a 15 s sync period), which says nothing about Gantry.
	name := "bench-" + templateName
	tpl.Metadata.Name, tpl.Spec.Volumes = name, nil
	resolved, err := tpl.Resolve(classes, template.Choice{Count: gpus})
	if err != nil {
		b.Fatal(err)
	}
	launch := model.LaunchRequest{Template: name}
	if gpus > 0 {
		launch.Gpu = &model.GPUChoice{Count: new(gpus)}
	}
	podRuns := func(p corev1.PodPhase) bool {
		return p == corev1.PodRunning || (p == corev1.PodSucceeded && slices.Contains(running, model.Succeeded))
	}
	var all, direct []time.Duration
	var gantryStages, directStages stageTimes
	// Rounds alternate which path goes first, so that neither always meets
	// a cluster still busy with the other's (or the setup's) work.
	for round := 0; b.Loop(); round++ {
		gantryRound := func() {
			g := start(b, filepath.Join(b.TempDir(), "g.db"), true)
			bteam := fmt.Sprintf("batch%d", round)
			benchTemplate(b, g.api, "../../templates/"+templateName+".yaml", name)
			gst := watchStages(b, dyn, "gantry-"+bteam, order)
			launch.Team = bteam
			ran, gsub := timeToRunning(b, batch, at, func(int) (string, error) {
				r, err := g.api.CreateWorkloadWithResponse(b.Context(), nil, launch)
				if err != nil {
					return "", err
				}
				if r.JSON201 == nil {
					return "", fmt.Errorf("launch: %d %s", r.StatusCode(), r.Body)
				}
				return r.JSON201.Id, nil
			}, func() ([]string, error) {
				r, err := g.api.ListWorkloadsWithResponse(b.Context(), &model.ListWorkloadsParams{Limit: new(500), Team: &bteam})
				if err != nil {
					return nil, err
				}
				var ids []string
				for _, w := range servertest.Deref(r.JSON200).Items {
					if slices.Contains(running, w.Status) {
						ids = append(ids, w.Id)
					}
				}
				return ids, nil
			})
			for _, d := range ran {
				all = append(all, d)
			}
			gantryStages = gantryStages.add(gst.took(gsub, ran))
			// Free the GPUs for the other path.
			b.StopTimer()
			for id := range ran {
				servertest.Must(g.api.DeleteWorkloadWithResponse(b.Context(), id))(b)
			}
			podsGone(b, "gantry-"+bteam)
			b.StartTimer()
		}
		directRound := func() {
			// The baseline: the same objects straight into a LocalQueue of their
			// own, on a ClusterQueue as a team's but without Gantry's admission
			// check (Kueue admits them alone), in a namespace Kueue manages and
			// Gantry does not (no team label, not Gantry's prefix); timed until
			// each pod runs.
			dteam := team.Name(fmt.Sprintf("direct%d%s", round, strings.ToLower(rand.Text()[:5])))
			ns := "bench-" + dteam.String()
			baselineQueue(b, cluster.Client, dyn, ns, roomFor(classes, dteam))
			dst := watchStages(b, dyn, ns, order)
			ran, dsub := timeToRunning(b, batch, at, func(i int) (string, error) {
				id := fmt.Sprintf("d%02d%05d", round, i)
				objs, err := render.Objects(resolved, render.Meta{WorkloadID: id, Team: dteam.String(), Owner: "alice", Namespace: ns, TemplateVersion: 1,
					Image: "registry.gantry.internal/bench/image@sha256:" + strings.Repeat("2", 64), Kueue: true})
				if err != nil {
					return "", err
				}
				return id, k.Apply(ctx, objs)
			}, func() ([]string, error) {
				pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
				if err != nil {
					return nil, err
				}
				var ids []string
				for _, p := range pods.Items {
					if podRuns(p.Status.Phase) {
						ids = append(ids, p.Labels["gantry.dev/workload-id"])
					}
				}
				return ids, nil
			})
			for _, d := range ran {
				direct = append(direct, d)
			}
			directStages = directStages.add(dst.took(dsub, ran))
			b.StopTimer()
			if err := cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			podsGone(b, ns)
			b.StartTimer()
		}
		if round%2 == 0 {
			gantryRound()
			directRound()
		} else {
			directRound()
			gantryRound()
		}
	}
	q := func(ds []time.Duration, p int) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[len(ds)*p/100].Milliseconds())
	}
	b.ReportMetric(q(all, 50), "p50-ms")
	b.ReportMetric(q(all, 95), "p95-ms")
	b.ReportMetric(q(direct, 50), "direct-p50-ms")
	b.ReportMetric(q(direct, 95), "direct-p95-ms")
	// Where the time goes: each stage's median on both paths (the Gantry
	// path's "admitted" includes its approval check; "listed" is Gantry's
	// API catching up with the pod on its path, the pod list's 20 ms poll
	// on the direct one).
	b.Logf("submit → Running by stage, %d launches a path:\n%s", len(all), stageTable(order, []string{"gantry", "direct"}, []stageTimes{gantryStages, directStages}))
	for _, i := range order[1:] {
		unit := strings.ReplaceAll(stageNames[i], " ", "-")
		b.ReportMetric(gantryStages.p50(i), "p50-ms-"+unit)
		b.ReportMetric(directStages.p50(i), "direct-p50-ms-"+unit)
	}
}

// baselineQueue makes namespace ns (Kueue manages it: Gantry's label; Gantry
// does not: no team label, not Gantry's prefix; Pod Security "restricted"
// enforced, as on a team's namespace, so that its pods are admitted the
// same way) with the LocalQueue workloads are rendered for, on a
// ClusterQueue named ns with spec (its namespaceSelector made ns alone),
// removed when b ends.
func baselineQueue(b testing.TB, core kubernetes.Interface, dyn dynamic.Interface, ns string, spec map[string]any) {
	b.Helper()
	ctx := context.Background()
	_, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: kube.PodSecurityRestricted(map[string]string{render.LabelManagedBy: render.ManagedBy})}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	spec["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}
	cq := quota.Object{"apiVersion": quota.APIVersion, "kind": "ClusterQueue", "metadata": map[string]any{"name": ns}, "spec": spec}
	lq := quota.Object{"apiVersion": quota.APIVersion, "kind": "LocalQueue",
		"metadata": map[string]any{"name": quota.LocalQueue, "namespace": ns}, "spec": map[string]any{"clusterQueue": ns}}
	for _, o := range []quota.Object{cq, lq} {
		u := &unstructured.Unstructured{Object: o}
		gvr := schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: strings.ToLower(u.GetKind()) + "s"}
		var r dynamic.ResourceInterface = dyn.Resource(gvr)
		if u.GetNamespace() != "" {
			r = dyn.Resource(gvr).Namespace(u.GetNamespace())
		}
		if _, err := r.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "bench", Force: true}); err != nil {
			b.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	b.Cleanup(func() {
		ctx := context.Background()
		core.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		dyn.Resource(kapi.KueueResources["ClusterQueue"]).Delete(ctx, ns, metav1.DeleteOptions{})
	})
}

// roomFor is a ClusterQueue's spec with room for every batch: 1,000 GPUs
// of each class.
func roomFor(classes *gpu.Catalog, t team.Name) map[string]any {
	q := quota.Quota{GPUs: map[string]float64{}}
	for _, c := range classes.Names() {
		q.GPUs[c] = 1000
	}
	return quota.ClusterQueueObject(classes, t, q)["spec"].(map[string]any)
}

// likeTeam is the spec of team t's ClusterQueue as Gantry keeps it (waited
// for: Gantry makes it at its team's first launch) less what is Gantry's
// own or ties it to other queues: its admission checks (Gantry's approval),
// a stop policy, and its cohort with its borrowing. A baseline on it admits
// the same objects under the same quota as Gantry's launches, by Kueue
// alone.
func likeTeam(b testing.TB, dyn dynamic.Interface, t team.Name) map[string]any {
	b.Helper()
	var spec map[string]any
	waitfor.Until(b, time.Minute, "team "+t.String()+"'s ClusterQueue", func() error {
		u, err := dyn.Resource(kapi.KueueResources["ClusterQueue"]).Get(context.Background(), quota.ClusterQueue(t), metav1.GetOptions{})
		if err == nil {
			spec, _, err = unstructured.NestedMap(u.Object, "spec")
		}
		return err
	})
	for _, k := range []string{"admissionChecks", "admissionChecksStrategy", "stopPolicy", "cohortName", "cohort"} {
		delete(spec, k)
	}
	groups, _ := spec["resourceGroups"].([]any)
	for _, g := range groups {
		flavors, _ := g.(map[string]any)["flavors"].([]any)
		for _, f := range flavors {
			resources, _ := f.(map[string]any)["resources"].([]any)
			for _, r := range resources {
				delete(r.(map[string]any), "borrowingLimit")
				delete(r.(map[string]any), "lendingLimit")
			}
		}
	}
	return spec
}

// timeToRunning submits n, at at a time, and times each from its
// submission until running lists it (asked every 20 ms, finer than
// waitfor's polls: this is the measurement's sampling interval). One at a
// time, each is waited for until it runs before the next is sent. It fails
// the benchmark unless all n run within 3 minutes.
func timeToRunning(b *testing.B, n, at int, submit func(i int) (id string, err error), running func() ([]string, error)) (ran map[string]time.Duration, submitted map[string]time.Time) {
	b.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, at)
	submitted = make(map[string]time.Time, n)
	ran = map[string]time.Duration{}
	// seen records, under mu, each submitted launch running lists now.
	seen := func() {
		ids, err := running()
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if t0, ok := submitted[id]; ok {
				if _, seen := ran[id]; !seen {
					ran[id] = now.Sub(t0)
				}
			}
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ran)
	}
	for i := range n {
		if at == 1 && i > 0 {
			for deadline := time.Now().Add(3 * time.Minute); count() < i && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				seen()
			}
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			id, err := submit(i)
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			submitted[id] = start
			mu.Unlock()
		}()
	}
	for deadline := time.Now().Add(3 * time.Minute); count() < n && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		seen()
	}
	wg.Wait()
	if len(ran) < n {
		b.Fatalf("%d of %d ran within 3 minutes", len(ran), n)
	}
	return ran, submitted
}

// podsGone waits until namespace ns has no pods left.
func podsGone(b *testing.B, ns string) {
	b.Helper()
	waitfor.Until(b, 2*time.Minute, "the batch's pods in "+ns+" to go", func() error {
		pods, err := cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err == nil && len(pods.Items) > 0 {
			err = fmt.Errorf("%d pods left", len(pods.Items))
		}
		return err
	})
}

// BenchmarkSustainedLaunch: 50 clients, each with a personal access token of
// its own, launch a short GPU Job (pytorch-train without its volume, one GPU)
// as fast as Gantry answers, in rounds of 10 s; the baseline, in the same
// rounds (alternating which goes first), is 50 goroutines doing the same
// server-side applies directly with client-go: the same objects, queued for
// Kueue in a queue of their own with the team's quota and without Gantry's
// approval check (likeTeam). It reports launches/s of each,
// their ratio and Gantry's p50/p99, fails on any error, and afterwards waits
// until every launch Gantry accepted has reached its terminal state
// (Succeeded), counting none lost and none duplicated. Two ways:
//
//   - in-process: Gantry runs in the benchmark's process (servertest) and
//     the load generator is loadgen.Run beside it;
//
//   - outside: as users meet it — the real `gantry serve` in a process of
//     its own (SQLite, the chart's ServiceAccount, the production loop
//     interval) and the 50 clients in a third process (loadgen.Outside).
//
//     GANTRY_TEST_CLUSTER=1 go test -tags dev -run '^$' -bench SustainedLaunch -benchtime 2x ./internal/e2e
func BenchmarkSustainedLaunch(b *testing.B) {
	if cluster == nil {
		b.Skip(clustertest.ErrNotRequested)
	}
	// Room for the launches to run: 40 more 8-GPU H100 nodes.
	if err := cluster.AddNodes(context.Background(), []devcluster.NodeSpec{{Prefix: "sustained-h100", Count: 40, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: 8, Whole: 8}}); err != nil {
		b.Fatal(err)
	}
	b.Run("in-process", func(b *testing.B) { sustained(b, false) })
	b.Run("outside", func(b *testing.B) { sustained(b, true) })
}

// sustained is one way of BenchmarkSustainedLaunch, on a team of its own.
func sustained(b *testing.B, outside bool) {
	const clients, round = 50, 10 * time.Second
	ctx := context.Background()
	teamName, db := "sustained-in", filepath.Join(b.TempDir(), "g.db")
	var url string
	var api *client.ClientWithResponses
	var serve *servertest.Process
	tokens := make([]string, clients)
	if outside {
		teamName = "sustained-out"
		args := []string{"--db", db}
		if prof := os.Getenv("GANTRY_BENCH_CPUPROFILE"); prof != "" {
			prof, _ = filepath.Abs(prof)
			args = append(args, "--cpuprofile", prof+".serve") // written when the server stops
		}
		serve = startServe(b, "", "", filepath.Join(b.TempDir(), "data"), []string{"GANTRY_RECONCILE_INTERVAL=15s", "GANTRY_CAPACITY_INFORMERS=true"}, args...)
		url = serve.URL
		for i := range tokens {
			tokens[i] = signInToken(b, url, "ada")
		}
		api = servertest.Client(url, tokens[0])
	} else {
		g := start(b, db, true, func(c *config.Config) {
			c.ReconcileInterval, c.CapacityInformers = config.Default().ReconcileInterval, true
		})
		url, api = g.URL, g.api
		for i := range tokens {
			tokens[i] = g.Token("ada")
		}
	}
	doc := benchTemplate(b, api, "../../templates/pytorch-train.yaml", "bench-job")
	body, _ := json.Marshal(model.LaunchRequest{Template: "bench-job", Team: teamName, Gpu: &model.GPUChoice{Count: new(1)}})
	k, err := kube.New(cluster.Config(), kube.Options{})
	if err != nil {
		b.Fatal(err)
	}
	classes, _, err := template.LoadCatalog("../../templates")
	if err != nil {
		b.Fatal(err)
	}
	tpl, err := template.Parse("bench-job.yaml", mustJSON(b, doc), classes, nil)
	if err != nil {
		b.Fatal(err)
	}
	r, err := tpl.Resolve(classes, template.Choice{Count: 1})
	if err != nil {
		b.Fatal(err)
	}
	// The baseline's namespace and queue: made at its first round, after
	// Gantry's first (rounds alternate, Gantry's first), when Gantry has
	// made its team's ClusterQueue for the baseline's to copy.
	directNS := "bench-" + teamName + "-direct"
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		b.Fatal(err)
	}
	var baseline sync.Once
	var (
		ids    sync.Map
		rs     rounds
		direct atomic.Int64
	)
	answered := func(id string) error {
		if _, dup := ids.LoadOrStore(id, true); dup {
			return fmt.Errorf("workload %s answered twice", id)
		}
		return nil
	}
	client := loadgen.Client(clients)
	runGantry := func() {
		if outside {
			before := launchTimes(b, url)
			defer func() {
				// Where a launch's time went this round: Gantry's own
				// measure of the apply inside it (the request the direct
				// path makes) against the whole request.
				d := launchTimes(b, url).minus(before)
				if d.requests > 0 && d.applies > 0 {
					b.Logf("  a launch took %.0f ms in Gantry, of which the apply %.0f ms (%d requests, %d applies)",
						d.requestSec*1000/float64(d.requests), d.applySec*1000/float64(d.applies), d.requests, d.applies)
				}
			}()
			res := loadgen.Outside(b, loadgen.Job{URL: url, Method: http.MethodPost, Paths: []string{"/api/v1/workloads"}, Body: body,
				Tokens: tokens, Duration: round, Status: http.StatusCreated, IDs: true})
			for _, id := range res.IDs {
				if err := answered(id); err != nil {
					b.Fatal(err)
				}
			}
			rs.gantryN += res.Requests
			rs.gantryT += time.Duration(res.Seconds * float64(time.Second))
			rs.p50s = append(rs.p50s, time.Duration(res.P50ms*float64(time.Millisecond)))
			rs.p99s = append(rs.p99s, time.Duration(res.P99ms*float64(time.Millisecond)))
			b.Logf("gantry (outside): %d launches in %.1f s: %.0f/s, p50 %.0f ms, p99 %.0f ms", res.Requests, res.Seconds, res.Rate, res.P50ms, res.P99ms)
			return
		}
		res := loadgen.Run(ctx, client, loadgen.Options{Clients: clients, Duration: round,
			// raw: the load generator sends as fast as Gantry answers; the
			// typed client's decoding would be counted against it
			Request: func(c, i int) (*http.Request, error) {
				req, err := http.NewRequest(http.MethodPost, url+"/api/v1/workloads", bytes.NewReader(body))
				if err == nil {
					req.Header.Set("Authorization", "Bearer "+tokens[c])
					req.Header.Set("Content-Type", "application/json")
				}
				return req, err
			},
			Check: func(resp *http.Response, data []byte) error {
				var w struct{ ID string }
				if err := json.Unmarshal(data, &w); err != nil || resp.StatusCode != 201 {
					return fmt.Errorf("launch answered %d: %.100s", resp.StatusCode, data)
				}
				return answered(w.ID)
			}})
		if res.Errors > 0 {
			b.Fatalf("%d errors; the first: %v", res.Errors, res.First)
		}
		rs.gantryN += res.Requests
		rs.gantryT += res.Elapsed
		rs.p50s, rs.p99s = append(rs.p50s, res.P50), append(rs.p99s, res.P99)
		b.Logf("gantry: %v", res)
	}
	runDirect := func() {
		baseline.Do(func() { baselineQueue(b, cluster.Client, dyn, directNS, likeTeam(b, dyn, gteam(teamName))) })
		n, took := applyRound(b, k, r, teamName+"-direct", directNS, &direct, clients, round)
		rs.directN += n
		rs.directT += took
	}
	rs.alternate(b, runGantry, runDirect)
	// The baseline's Jobs are not followed: remove them, so that the GPUs
	// go to Gantry's launches.
	if err := cluster.Client.CoreV1().Namespaces().Delete(ctx, directNS, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	// Every launch recorded (the answered ones, and those still in flight
	// when a round's clock ran out, which Gantry finished anyway) reaches
	// its end, and has exactly one Job. The records are read from the
	// database (SQLite allows a reader beside the server).
	database, err := store.Open(ctx, store.SQLite, db)
	if err != nil {
		b.Fatal(err)
	}
	defer database.Close()
	records := workloads.New(database)
	waitStart := time.Now()
	var recorded []workload.Workload
	waitfor.Until(b, 10*time.Minute, "every recorded launch to succeed", func() error {
		var err error
		recorded, err = records.ListWorkloads(ctx, workload.Filter{Team: gteam(teamName), Limit: 100000})
		if err != nil {
			return err
		}
		left := 0
		for _, w := range recorded {
			if w.Status != workload.Succeeded {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d of %d not yet Succeeded", left, len(recorded))
		}
		return nil
	})
	b.Logf("all %d recorded launches (%d answered) Succeeded %v after the last round", len(recorded), rs.gantryN, time.Since(waitStart).Round(time.Second))
	byID := map[string]bool{}
	for _, w := range recorded {
		byID[w.ID] = true
	}
	ids.Range(func(k, _ any) bool {
		if !byID[k.(string)] {
			b.Errorf("answered launch %s is not recorded", k)
		}
		return true
	})
	jobs, err := cluster.Client.BatchV1().Jobs("gantry-"+teamName).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	seen := map[string]bool{}
	for _, j := range jobs.Items {
		id := j.Labels[render.LabelWorkloadID]
		if !byID[id] || seen[id] {
			b.Fatalf("Job %s: workload %q orphaned or duplicated", j.Name, id)
		}
		seen[id] = true
	}
	if len(seen) != len(recorded) {
		b.Fatalf("%d Jobs for %d recorded launches", len(seen), len(recorded))
	}
	if serve != nil {
		serve.Terminate(time.Minute) // as Kubernetes stops it: a CPU profile is written
	}
}

// launchSums are a Gantry server's launch measures so far: the time it took
// to answer POST /api/v1/workloads, and the applies inside them.
type launchSums struct {
	requestSec, applySec float64
	requests, applies    uint64
}

func (a launchSums) minus(b launchSums) launchSums {
	return launchSums{a.requestSec - b.requestSec, a.applySec - b.applySec, a.requests - b.requests, a.applies - b.applies}
}

// launchTimes reads a Gantry server's launch measures from its /metrics.
func launchTimes(b testing.TB, url string) launchSums {
	b.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	var out launchSums
	for _, m := range families["gantry_kube_apply_duration_seconds"].GetMetric() {
		out.applySec, out.applies = out.applySec+m.GetHistogram().GetSampleSum(), out.applies+m.GetHistogram().GetSampleCount()
	}
	for _, m := range families["gantry_http_request_duration_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["route"] == "/api/v1/workloads" && labels["method"] == http.MethodPost {
			out.requestSec, out.requests = out.requestSec+m.GetHistogram().GetSampleSum(), out.requests+m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// rounds adds up a benchmark's alternating rounds: Gantry's launches and
// the baseline's applies, their counts and times, Gantry's p50 and p99 per
// round.
type rounds struct {
	gantryN, directN int
	gantryT, directT time.Duration
	p50s, p99s       []time.Duration
}

// alternate runs b's rounds, alternating which of the two goes first, then
// reports both rates, their ratio and Gantry's worst round's p50 and p99.
func (rs *rounds) alternate(b *testing.B, runGantry, runDirect func()) {
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			runGantry()
			runDirect()
		} else {
			runDirect()
			runGantry()
		}
	}
	b.StopTimer()
	gRate, dRate := float64(rs.gantryN)/rs.gantryT.Seconds(), float64(rs.directN)/rs.directT.Seconds()
	b.ReportMetric(gRate, "gantry-launches/s")
	b.ReportMetric(dRate, "direct-applies/s")
	b.ReportMetric(gRate/dRate, "ratio")
	b.ReportMetric(float64(slices.Max(rs.p50s).Milliseconds()), "gantry-p50-ms")
	b.ReportMetric(float64(slices.Max(rs.p99s).Milliseconds()), "gantry-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// applyRound is the baseline's round: clients goroutines applying with
// client-go, for round, the objects r renders for new workloads of team in
// namespace ns (numbered from seq), queued for Kueue as Gantry renders them
// (ns must have its LocalQueue: baselineQueue); it fails b on an error and
// returns how many applies finished and how long the round took.
func applyRound(b testing.TB, k *kube.Cluster, r *template.Resolved, team, ns string, seq *atomic.Int64, clients int, round time.Duration) (int, time.Duration) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	startAt := time.Now()
	var count atomic.Int64
	var (
		errOnce  sync.Once
		firstErr error
	)
	for range clients {
		wg.Go(func() {
			for time.Since(startAt) < round {
				n := seq.Add(1)
				objs, err := render.Objects(r, render.Meta{WorkloadID: fmt.Sprintf("d%09d", n), Team: team, Owner: "alice",
					Namespace: ns, TemplateVersion: 1, Image: "registry.gantry.internal/bench/image@sha256:" + strings.Repeat("2", 64), Kueue: true})
				if err == nil {
					err = k.Apply(ctx, objs)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				count.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	took := time.Since(startAt)
	b.Logf("direct: %d applies in %v", count.Load(), took.Round(time.Millisecond))
	return int(count.Load()), took
}

// gteam is a team name, for a test that knows it is one.
func gteam(name string) team.Name { return team.Name(name) }

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// benchTemplate adds the template file at path to g as name, without its
// volumes (claims wait for the simulated cluster's volume binder, which says
// nothing about Gantry), and returns the document it sent.
func benchTemplate(b *testing.B, api *client.ClientWithResponses, path, name string) model.TemplateDocument {
	b.Helper()
	doc := templateFile(b, path)
	// Without volumes (a claim to bind per launch is not what is measured),
	// and so without checkpoints, which live on one.
	doc.Metadata.Name, doc.Spec.Volumes, doc.Spec.Checkpoints = name, nil, nil
	if r := servertest.Must(api.CreateTemplateWithResponse(b.Context(), doc))(b); r.StatusCode() != 201 {
		b.Fatalf("create template %s: %d %s", name, r.StatusCode(), r.Body)
	}
	return doc
}

// TestOutsideLoad is the outside load generator's process (loadgen.Outside,
// for BenchmarkSustainedLaunch); run alone, it has nothing to do.
func TestOutsideLoad(t *testing.T) { loadgen.ServeJob(t) }
