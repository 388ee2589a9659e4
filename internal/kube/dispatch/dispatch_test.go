package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/deploy"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/dispatch"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/kube/workers"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// Three control planes in one run, each with its own Kueue: a MultiKueue
// manager whose Workloads wait for Gantry's nominations, an on-premises
// room of 16 A100s and a CPU node of 2 cores, and a cloud of 8 H100s, 8
// A100s and a CPU node of 16 cores.
var manager, onprem, cloud *devcluster.Cluster

func TestMain(m *testing.M) {
	var stops []func()
	code := 0
	for _, spec := range []struct {
		c    **devcluster.Cluster
		name string
		o    func(*devcluster.Options)
	}{
		{&manager, "fleet-manager", func(o *devcluster.Options) {
			o.Fleet = []devcluster.NodeSpec{{Prefix: "l4", Count: 1, Product: "NVIDIA-L4", MemoryMB: 23034, GPUs: 4, Whole: 4}}
			o.MultiKueueDispatcher = dispatch.Name
			o.Audit = true // TestFleetThroughGantry checks the chart's fleet rules
		}},
		{&onprem, "fleet-onprem", func(o *devcluster.Options) {
			o.JobRuntime = time.Hour
			o.Audit = true // TestFleetThroughGantry checks deploy/worker's rules
			// Two A100 machines whole, one cut into MIG instances and one
			// whose four are passed through to VMs (neither has whole GPUs:
			// the room's 16 stay the whole ones).
			o.Fleet = []devcluster.NodeSpec{{Prefix: "a100", Count: 2, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 8, Whole: 8},
				{Prefix: "a100-mig", Count: 1, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 2, MIG: map[string]int{"1g.10gb": 14}, MIGConf: "all-1g.10gb"},
				{Prefix: "a100-vm", Count: 1, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 4, Passthrough: 4, VMDevice: "nvidia.com/GA100_A100_SXM4_80GB"},
				{Prefix: "cpu", Count: 1, CPULabel: devcluster.RealNodeLabel, Cores: 2}}
		}},
		{&cloud, "fleet-cloud", func(o *devcluster.Options) {
			o.JobRuntime = time.Hour
			o.Audit = true
			o.Fleet = []devcluster.NodeSpec{{Prefix: "h100", Count: 1, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: 8, Whole: 8},
				{Prefix: "a100", Count: 1, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 8, Whole: 8},
				{Prefix: "cpu", Count: 1, CPULabel: devcluster.RealNodeLabel, Cores: 16}}
		}},
	} {
		c, stop, err := clustertest.ForTests(spec.name, spec.o)
		if errors.Is(err, clustertest.ErrNotRequested) {
			fmt.Println(err)
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "cluster:", err)
			code = 1
			break
		}
		*spec.c = c
		stops = append(stops, stop)
	}
	if code == 0 {
		code = m.Run()
	}
	for _, s := range stops {
		s()
	}
	os.Exit(code)
}

const ns = "team-vision"

var (
	resourceFlavors   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	clusterQueues     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	localQueues       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	admissionChecks   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "admissionchecks"}
	multiKueueConfigs = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "multikueueconfigs"}
	multiKueueCluster = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "multikueueclusters"}
)

func create(t *testing.T, dyn dynamic.Interface, res schema.GroupVersionResource, namespace string, obj map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	var err error
	if namespace != "" {
		_, err = dyn.Resource(res).Namespace(namespace).Create(context.Background(), u, metav1.CreateOptions{})
	} else {
		_, err = dyn.Resource(res).Create(context.Background(), u, metav1.CreateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// put is create, and where the object is there already (left by an earlier
// test: Gantry's own MultiKueueClusters of the same names, whose Secrets
// hold its kubeconfigs for the workers), its spec replaced by obj's.
func put(t *testing.T, dyn dynamic.Interface, res schema.GroupVersionResource, obj map[string]any) {
	t.Helper()
	ctx := context.Background()
	u := &unstructured.Unstructured{Object: obj}
	_, err := dyn.Resource(res).Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var have *unstructured.Unstructured
		if have, err = dyn.Resource(res).Get(ctx, u.GetName(), metav1.GetOptions{}); err == nil {
			have.Object["spec"] = obj["spec"]
			_, err = dyn.Resource(res).Update(ctx, have, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		t.Fatalf("put %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func kueueObj(kind, name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": map[string]any{"name": name}, "spec": spec}
}

// queues gives a cluster team vision's namespace and queues; the manager's
// ClusterQueue waits on the MultiKueue check.
func queues(t *testing.T, c *devcluster.Cluster, check string) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{render.LabelManagedBy: render.ManagedBy, render.LabelTeam: "vision"}}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	create(t, dyn, resourceFlavors, "", kueueObj("ResourceFlavor", "default", map[string]any{}))
	spec := map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{"coveredResources": []any{quota.GPUMilli, quota.CPU}, // Kueue counts CPU too
			"flavors": []any{map[string]any{"name": "default", "resources": []any{map[string]any{"name": quota.GPUMilli, "nominalQuota": "1000000"},
				map[string]any{"name": quota.CPU, "nominalQuota": "1000000"}}}}}},
	}
	if check != "" {
		spec["admissionChecksStrategy"] = map[string]any{"admissionChecks": []any{map[string]any{"name": check}}}
	}
	create(t, dyn, clusterQueues, "", kueueObj("ClusterQueue", "vision", spec))
	lq := kueueObj("LocalQueue", "vision", map[string]any{"clusterQueue": "vision"})
	lq["metadata"].(map[string]any)["namespace"] = ns
	create(t, dyn, localQueues, ns, lq)
	return dyn
}

// multiKueue connects the manager to the workers: a kubeconfig Secret, a
// MultiKueueCluster each, one MultiKueueConfig and the AdmissionCheck.
func multiKueue(t *testing.T, dyn dynamic.Interface, workers map[string]*devcluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	var names []any
	for name, w := range workers {
		kc, err := clientcmd.LoadFromFile(w.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		// MultiKueue refuses file paths in the kubeconfigs it is given.
		if err := clientcmdapi.FlattenConfig(kc); err != nil {
			t.Fatal(err)
		}
		data, err := clientcmd.Write(*kc)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "worker-" + name, Namespace: devcluster.KueueNamespace}, Data: map[string][]byte{"kubeconfig": data}}
		if _, err := manager.Client.CoreV1().Secrets(devcluster.KueueNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		put(t, dyn, multiKueueCluster, kueueObj("MultiKueueCluster", name, map[string]any{
			"clusterSource": map[string]any{"kubeConfig": map[string]any{"locationType": "Secret", "location": "worker-" + name}}}))
		names = append(names, name)
	}
	put(t, dyn, multiKueueConfigs, kueueObj("MultiKueueConfig", "gantry-fleet", map[string]any{"clusters": names}))
	put(t, dyn, admissionChecks, kueueObj("AdmissionCheck", "gantry-fleet", map[string]any{
		"controllerName": "kueue.x-k8s.io/multikueue",
		"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "gantry-fleet"}}))
}

// job is a Job of team for the manager: suspended and managed by
// MultiKueue, as Kueue's webhook would make it.
func job(name, team, class, product string, gpus int64) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "vision", render.LabelTeam: team, render.LabelGPUClass: class}},
		Spec: batchv1.JobSpec{Suspend: new(true), ManagedBy: new("kueue.x-k8s.io/multikueue"),
			// kwok completes a Job's pod after a second; these run an hour.
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1h"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector: map[string]string{"nvidia.com/gpu.product": product},
					Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "train", Image: "train",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}},
	}
}

// TestWorkersThroughGantry: Gantry with a clusters file of the two workers
// reads each with its own credentials and serves, at GET /api/v1/clusters,
// what each has free and what each team uses there; the dispatch decision
// over those states sends an A100 launch on premises and an H100 launch to
// the cloud. A credential the worker refuses is said as such, and a rotated
// one is picked up; a worker whose API server cannot be reached is
// unreachable, and its gauge says so. (TestDispatchOverTwoWorkers, after
// it, stops a worker's control plane for real.)
func TestWorkersThroughGantry(t *testing.T) {
	if manager == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	ctx := context.Background()
	dir := t.TempDir()
	cloudKube := filepath.Join(dir, "cloud.kubeconfig")
	good, err := os.ReadFile(cloud.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cloudKube, good, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "clusters.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: gantry.dev/v1alpha1
kind: ClusterList
clusters:
  - name: onprem-a100
    region: eu-central
    provider: on-premises
    kubeconfig: {file: %s}
    labels: {residency: onprem}
    offers: [{class: A100-80GB, purchase: reserved, pricePerGPUHour: 1.10, gpus: 16, mig: [1g.10gb]}]
  - name: cloud-east
    region: us-east-1
    provider: cloud
    kubeconfig: {file: %s}
    labels: {residency: cloud}
    offers:
      - {class: H100-80GB, purchase: on-demand, pricePerGPUHour: 6.90}
      - {class: A100-80GB, purchase: on-demand, pricePerGPUHour: 3.20}
`, onprem.Kubeconfig, cloudKube)), 0o644)

	// A pod of team vision on the cloud's H100s (its node chosen by the
	// product: the cloud's A100 node would take it as well).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", Labels: map[string]string{render.LabelTeam: "vision", render.LabelGPUClass: "H100-80GB"}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, Containers: []corev1.Container{{Name: "c", Image: "train", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}}},
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}}}
	// One of team ads, which the policy does not name, on the cloud's
	// A100s: its quota is the policy's default entry's (this test's policy
	// adds one).
	ads := pod.DeepCopy()
	ads.Name, ads.Labels[render.LabelTeam], ads.Labels[render.LabelGPUClass] = "ads", "ads", "A100-80GB"
	ads.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
	ads.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	// And one of team vision on two of the room's MIG instances.
	slices := pod.DeepCopy()
	slices.Name, slices.Labels[render.LabelGPUClass], slices.Spec.NodeSelector = "slices", "A100-80GB", map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
	slices.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("2")}
	for _, p := range []struct {
		c   *devcluster.Cluster
		pod *corev1.Pod
	}{{cloud, pod}, {cloud, ads}, {onprem, slices}} {
		if _, err := p.c.Client.CoreV1().Pods("default").Create(ctx, p.pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.c.Client.CoreV1().Pods("default").Delete(context.Background(), p.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
		waitfor.Until(t, time.Minute, "pod "+p.pod.Name+" running", func() error {
			got, err := p.c.Client.CoreV1().Pods("default").Get(ctx, p.pod.Name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("%v %v", got.Status.Phase, err)
			}
			return nil
		})
	}

	policy := filepath.Join(dir, "policy")
	if err := os.CopyFS(policy, os.DirFS("../../../policy")); err != nil {
		t.Fatal(err)
	}
	bindings, err := os.ReadFile(filepath.Join(policy, "bindings.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bindings = []byte(strings.Replace(string(bindings), "\nteams:\n", "\nteams:\n  \"*\":\n    quota:\n      gpus: {\"*\": 2}\n", 1))
	if err := os.WriteFile(filepath.Join(policy, "bindings.yaml"), bindings, 0o644); err != nil {
		t.Fatal(err)
	}
	g := servertest.New(t, func(c *config.Config) { c.ClustersFile, c.PolicyDir = file, policy })
	api := servertest.Client(g.URL, g.Token("ada"))
	clusters := func() map[string]*model.WorkerClusterState {
		r := servertest.Must(api.ListClustersWithResponse(ctx))(t)
		if r.JSON200 == nil {
			t.Fatalf("GET /api/v1/clusters: %d %s", r.StatusCode(), r.Body)
		}
		out := map[string]*model.WorkerClusterState{}
		for _, c := range r.JSON200.Items {
			out[c.Name] = c.State
		}
		return out
	}
	waitfor.Until(t, time.Minute, "both workers read", func() error {
		cs := clusters()
		on, cl := cs["onprem-a100"], cs["cloud-east"]
		if on == nil || cl == nil || !on.Reachable || !cl.Reachable {
			return fmt.Errorf("%+v %+v", on, cl)
		}
		onUsed, clUsed, onMIG := servertest.Deref(on.Used), servertest.Deref(cl.Used), servertest.Deref(on.FreeMIG)
		if on.Free["A100-80GB"] != 16 || cl.Free["H100-80GB"] != 4 || cl.Free["A100-80GB"] != 7 || clUsed["vision"]["H100-80GB"] != 4 || clUsed["ads"]["A100-80GB"] != 1 ||
			onMIG["A100-80GB"]["1g.10gb"] != 12 || math.Abs(onUsed["vision"]["A100-80GB"]-2.0/7) > 1e-9 {
			return fmt.Errorf("onprem %s, cloud %s", asJSON(on), asJSON(cl))
		}
		return nil
	})
	// Each team's quota beside: those the policy names, and ads's from its
	// default entry, for it has work on a worker.
	if q := servertest.Must(api.ListClustersWithResponse(ctx))(t).JSON200.Quotas; q["vision"]["H100-80GB"] != 8 || q["ads"]["*"] != 2 || len(q) != 3 {
		t.Errorf("quotas %v", q)
	}

	// The decision over the same workers, read directly.
	classes, err := gpu.LoadFile(g.Config.GPUClassesFile)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := fleet.LoadFile(file, classes)
	if err != nil {
		t.Fatal(err)
	}
	w, err := workers.New(workers.Options{Fleet: fl, Classes: classes})
	if err != nil {
		t.Fatal(err)
	}
	w.Pass(ctx)
	states, _ := w.States()
	// (The cloud's A100s have 7 free beside team ads's pod: full for 8.)
	if d := fl.Place(fleet.Launch{Team: "vision", Class: "A100-80GB", GPUs: 8}, states); d.Cluster() != "onprem-a100" ||
		d.Reason != "placed on onprem-a100: $1.10/GPU-h (reserved) vs $3.20 on cloud-east (full); 16 GPUs free" {
		t.Errorf("an A100 launch: %s", d.Reason)
	}
	if d := fl.Place(fleet.Launch{Team: "vision", Class: "H100-80GB", GPUs: 4}, states); d.Cluster() != "cloud-east" {
		t.Errorf("an H100 launch: %s", d.Reason)
	}
	// MIG instances are placed where they are free: the cloud's A100s are
	// not cut, so it offers none.
	if d := fl.Place(fleet.Launch{Team: "vision", Class: "A100-80GB", MIG: "1g.10gb", Slices: 12, GPUs: 12.0 / 7}, states); d.Cluster() != "onprem-a100" ||
		d.Reason != "placed on onprem-a100: $1.10/GPU-h (reserved); 12 1g.10gb slices free" {
		t.Errorf("a MIG launch: %s", d.Reason)
	}
	if d := fl.Place(fleet.Launch{Team: "vision", Class: "A100-80GB", MIG: "1g.10gb", Slices: 13, GPUs: 13.0 / 7}, states); d.Reason != "waiting for onprem-a100 (no cluster has 13 A100-80GB 1g.10gb slices free now): $1.10/GPU-h (reserved); 12 1g.10gb slices free" {
		t.Errorf("a MIG launch too big for now: %s", d.Reason)
	}

	// Credentials the worker refuses: a token it never issued.
	kc, err := clientcmd.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		a.ClientCertificateData, a.ClientKeyData, a.ClientCertificate, a.ClientKey, a.Token = nil, nil, "", "", "not-a-token"
	}
	if err := clientcmd.WriteToFile(*kc, cloudKube); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the refused credentials said", func() error {
		if cl := clusters()["cloud-east"]; cl == nil || cl.Reachable || !strings.Contains(servertest.Deref(cl.Why), "refuses Gantry's credentials") {
			return fmt.Errorf("%s", asJSON(cl))
		}
		return nil
	})
	// Rotated: good credentials again, picked up without a restart.
	if err := os.WriteFile(cloudKube, good, 0o600); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the rotated credentials used", func() error {
		if cl := clusters()["cloud-east"]; cl == nil || !cl.Reachable {
			return fmt.Errorf("%s", asJSON(cl))
		}
		return nil
	})
	// The cloud's API server out of reach: its kubeconfig at a port where
	// nothing listens.
	for _, c := range kc.Clusters {
		c.Server = "https://127.0.0.1:1"
	}
	for _, a := range kc.AuthInfos {
		a.Token = ""
	}
	if err := clientcmd.WriteToFile(*kc, cloudKube); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the worker out of reach unreachable", func() error {
		if cl := clusters()["cloud-east"]; cl == nil || cl.Reachable || !strings.Contains(servertest.Deref(cl.Why), "cannot be reached") {
			return fmt.Errorf("%s", asJSON(cl))
		}
		return nil
	})
	// The operator's alert: the worker's gauge at 0, the room's at 1.
	resp, err := http.Get(g.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := string(body); !strings.Contains(m, `gantry_worker_cluster_up{cluster="cloud-east"} 0`) || !strings.Contains(m, `gantry_worker_cluster_up{cluster="onprem-a100"} 1`) {
		t.Errorf("the workers' gauges:\n%s", grepLines(m, "gantry_worker_cluster_up"))
	}
	w.Pass(ctx)
	states, _ = w.States()
	if d := fl.Place(fleet.Launch{Team: "vision", Class: "H100-80GB", GPUs: 4}, states); d.Cluster() != "" || !strings.Contains(d.Reason, "cloud-east: unreachable") {
		t.Errorf("an H100 launch with the cloud gone: %s", d.Reason)
	}
}

// TestFleetThroughGantry: Gantry with Kueue on the manager and a clusters
// file of the two workers keeps MultiKueue's side itself (the workers'
// Secrets, MultiKueue's objects, each worker's team namespaces and queues)
// and dispatches from its leader: a training launch through the API runs
// on the room's A100s (its volume claim staged there), reaches Running
// from the status MultiKueue copies back, and its logs and the worker's
// events are read through Gantry, and it is priced at the room's GPU-hour.
// With the room drained through the API, it moves to the cloud (never on
// both at once) and the next goes there too; a notebook is refused, for only Jobs are
// dispatched. Deleted, the work and its claims leave the workers. Gantry
// talks to the manager as the Helm chart's ServiceAccount with a fleet
// (chartIdentity): the manager's audit log then shows that it was refused
// nothing and used every fleet rule the chart adds. (Before
// TestDispatchOverTwoWorkers, which stops the cloud; this leaves the
// workers as it found them.)
func TestFleetThroughGantry(t *testing.T) {
	if manager == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "clusters.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: gantry.dev/v1alpha1
kind: ClusterList
clusters:
  - name: onprem
    region: eu-central
    provider: on-premises
    kubeconfig: {file: %s}
    labels: {residency: onprem}
    offers: [{class: A100-80GB, purchase: reserved, pricePerGPUHour: 1.10, gpus: 16}]
    cpu: {purchase: reserved, pricePerCoreHour: 0.02, cores: 2}
  - name: cloud
    region: us-east-1
    provider: cloud
    kubeconfig: {file: %s}
    labels: {residency: cloud}
    offers:
      - {class: H100-80GB, purchase: on-demand, pricePerGPUHour: 6.90}
      - {class: A100-80GB, purchase: on-demand, pricePerGPUHour: 3.20}
    cpu: {purchase: on-demand, pricePerCoreHour: 0.05}
`, workerIdentity(t, onprem), workerIdentity(t, cloud))), 0o644)
	lease := "gantry-fleet-test"
	// Where the workers' pods would reach Gantry: none does here (kwok runs
	// no container); the test reports as they would, with their tokens.
	const reportURL = "http://gantry.fleet-test.invalid"
	g := fleetGantry(t, file, lease, func(c *config.Config) { c.Runs.ReportURL = reportURL })
	api := servertest.Client(g.URL, g.Token("ada"))
	mdyn, err := dynamic.NewForConfig(manager.Config())
	if err != nil {
		t.Fatal(err)
	}
	const teamNS = "gantry-vision"
	kueueWorkload := func(id string) *unstructured.Unstructured {
		list, err := mdyn.Resource(kapi.KueueWorkloads).Namespace(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
		if err != nil || len(list.Items) == 0 {
			return nil
		}
		return &list.Items[0]
	}
	// Whatever it launched goes when it ends, passed or not: the next test
	// counts the workers' free GPUs.
	var launched []string
	t.Cleanup(func() {
		for _, id := range launched {
			api.DeleteWorkloadWithResponse(context.Background(), id)
		}
		for _, w := range []*devcluster.Cluster{onprem, cloud} {
			waitfor.Until(t, 3*time.Minute, "the workers empty of the test's pods", func() error {
				pods, err := w.Client.CoreV1().Pods(teamNS).List(context.Background(), metav1.ListOptions{})
				if err != nil || len(pods.Items) > 0 {
					return fmt.Errorf("%d pods (%v)", len(pods.Items), err)
				}
				return nil
			})
		}
	})
	launchOf := func(tmpl string, gpus model.GPUChoice) model.Workload {
		t.Helper()
		r := servertest.Must(api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: tmpl, Team: "vision", Gpu: &gpus}))(t)
		if r.StatusCode() != 201 {
			t.Fatalf("launch %s: %d %s", tmpl, r.StatusCode(), r.Body)
		}
		w := servertest.Deref(r.JSON201)
		launched = append(launched, w.Id)
		return w
	}
	launch := func() model.Workload {
		t.Helper()
		return launchOf("pytorch-train", model.GPUChoice{Class: new("A100-80GB"), Count: new(4)})
	}
	// runsOn waits until the workload runs on cluster as Gantry says (its
	// status) and as the clusters say (the Kueue Workload's cluster, a pod
	// running on the worker and none on the manager).
	runsOn := func(id, cluster string, worker *devcluster.Cluster) {
		t.Helper()
		waitfor.Until(t, 3*time.Minute, id+" running on "+cluster, func() error {
			w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, id))(t).JSON200)
			wl := kueueWorkload(id)
			if wl == nil {
				return fmt.Errorf("%s (%s): no Kueue Workload yet", w.Status, servertest.Deref(w.Reason))
			}
			if at, _, _ := unstructured.NestedString(wl.Object, "status", "clusterName"); at != cluster {
				active, _, _ := unstructured.NestedFieldNoCopy(wl.Object, "spec", "active")
				conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
				var cs []string
				for _, c := range conds {
					m, _ := c.(map[string]any)
					cs = append(cs, fmt.Sprintf("%v=%v (%v)", m["type"], m["status"], m["message"]))
				}
				checks, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
				return fmt.Errorf("%s (%s): on %q; active %v, annotations %v, conditions %v, checks %v", w.Status, servertest.Deref(w.Reason), at, active, wl.GetAnnotations(), cs, checks)
			}
			if w.Status != model.Running {
				return fmt.Errorf("status %s (%s)", w.Status, servertest.Deref(w.Reason))
			}
			pods, err := worker.Client.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
			if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
				return fmt.Errorf("its pods on %s: %v", cluster, err)
			}
			return nil
		})
		// Nothing of it runs on the manager: a Job has no pod there, a
		// service's pods are held there (gated, bound to no node).
		pods, _ := manager.Client.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) == 0 {
				t.Errorf("%s has pod %s on the manager's node %q (gates %v)", id, p.Name, p.Spec.NodeName, p.Spec.SchedulingGates)
			}
		}
	}

	first := launch()
	runsOn(first.Id, "onprem", onprem)
	// Where it runs and at that cluster's price: 4 A100s at $1.10.
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, first.Id))(t).JSON200); servertest.Deref(w.Cluster) != "onprem" || w.PricePerHour != 4.4 {
		t.Errorf("the first runs on %q at $%v/h", servertest.Deref(w.Cluster), w.PricePerHour)
	}
	if r := kueueWorkload(first.Id).GetAnnotations()[dispatch.ReasonAnnotation]; !strings.HasPrefix(r, "placed on onprem: $1.10/GPU-h (reserved) vs $3.20 on cloud") {
		t.Errorf("the placement: %q", r)
	}
	if a := kueueWorkload(first.Id).GetAnnotations(); a[kapi.AnnotationHourPrice] != "4.4" || a[kapi.AnnotationGPUHourPrice] != "1.1" {
		t.Errorf("the run's prices: hourly %q, GPU-hour %q", a[kapi.AnnotationHourPrice], a[kapi.AnnotationGPUHourPrice])
	}
	// Its logs and the worker's events, through Gantry.
	logs := servertest.Must(api.GetWorkloadLogsWithResponse(ctx, first.Id, &model.GetWorkloadLogsParams{}))(t)
	if logs.StatusCode() != 200 || !strings.Contains(string(logs.Body), "simulated container: ready") {
		t.Errorf("logs from the worker: %d %s", logs.StatusCode(), logs.Body)
	}
	waitfor.Until(t, time.Minute, "the worker's events", func() error {
		evs := servertest.Deref(servertest.Must(api.ListWorkloadEventsWithResponse(ctx, first.Id))(t).JSON200)
		for _, e := range evs.Items {
			if strings.HasPrefix(e.Object, "onprem: Pod/pytorch-train-"+first.Id) && e.Reason == "Scheduled" {
				return nil
			}
		}
		return fmt.Errorf("%s", asJSON(evs))
	})

	// The room drained: the first moves to the cloud (a new run there, at
	// the cloud's price), and the next launch goes there too.
	if r := servertest.Must(api.DrainClusterWithResponse(ctx, "onprem"))(t); r.StatusCode() != 200 {
		t.Fatalf("drain: %d %s", r.StatusCode(), r.Body)
	}
	runsOn(first.Id, "cloud", cloud)
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, first.Id))(t).JSON200); servertest.Deref(w.Cluster) != "cloud" || w.PricePerHour != 12.8 || w.Attempts != 2 {
		t.Errorf("the first, moved: on %q at $%v/h, %d runs", servertest.Deref(w.Cluster), w.PricePerHour, w.Attempts)
	}
	if pods, _ := onprem.Client.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + first.Id}); len(pods.Items) > 0 {
		t.Errorf("the first still has %d pods on the drained room", len(pods.Items))
	}
	second := launch()
	runsOn(second.Id, "cloud", cloud)
	if r := kueueWorkload(second.Id).GetAnnotations()[dispatch.ReasonAnnotation]; !strings.HasPrefix(r, "placed on cloud: $3.20/GPU-h; ") {
		t.Errorf("the placement with the room drained: %q", r)
	}
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, second.Id))(t).JSON200); servertest.Deref(w.Cluster) != "cloud" || w.PricePerHour != 12.8 {
		t.Errorf("the second runs on %q at $%v/h", servertest.Deref(w.Cluster), w.PricePerHour)
	}
	// Its owner stops the second: off the cloud, and its quota back in the
	// manager (Kueue waits for the manager's Job to say it stopped).
	if r := servertest.Must(api.StopWorkloadWithResponse(ctx, second.Id))(t); r.StatusCode() >= 300 {
		t.Fatalf("stop: %d %s", r.StatusCode(), r.Body)
	}
	waitfor.Until(t, 2*time.Minute, "the stopped Job's quota back", func() error {
		w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, second.Id))(t).JSON200)
		wl := kueueWorkload(second.Id)
		if wl == nil {
			return errors.New("no Kueue Workload")
		}
		conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "QuotaReserved" && m["status"] == "True" {
				return fmt.Errorf("%s: its quota still reserved", w.Status)
			}
		}
		if w.Status != model.Stopped {
			return fmt.Errorf("status %s", w.Status)
		}
		pods, err := cloud.Client.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + second.Id})
		if err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left on the cloud (%v)", len(pods.Items), err)
		}
		return nil
	})
	if r := servertest.Must(api.UncordonClusterWithResponse(ctx, "onprem"))(t); r.StatusCode() != 200 {
		t.Fatalf("uncordon: %d %s", r.StatusCode(), r.Body)
	}

	// A service runs on a worker too, through Kueue's pod integration: on
	// the cheaper room, at its price, its logs and events from there.
	svc := launchOf("vllm-inference", model.GPUChoice{Class: new("A100-80GB"), Count: new(2)})
	runsOn(svc.Id, "onprem", onprem)
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, svc.Id))(t).JSON200); servertest.Deref(w.Cluster) != "onprem" || w.PricePerHour != 2.2 {
		t.Errorf("the service runs on %q at $%v/h", servertest.Deref(w.Cluster), w.PricePerHour)
	}
	if r := kueueWorkload(svc.Id).GetAnnotations()[dispatch.ReasonAnnotation]; !strings.HasPrefix(r, "placed on onprem: $1.10/GPU-h (reserved) vs $3.20 on cloud") {
		t.Errorf("the service's placement: %q", r)
	}
	if logs := servertest.Must(api.GetWorkloadLogsWithResponse(ctx, svc.Id, &model.GetWorkloadLogsParams{}))(t); logs.StatusCode() != 200 || !strings.Contains(string(logs.Body), "simulated container: ready") {
		t.Errorf("the service's logs from the worker: %d %s", logs.StatusCode(), logs.Body)
	}
	// Its model volume and its Service are there too: the endpoint
	// resolves where its pods run.
	if claims, err := onprem.Client.CoreV1().PersistentVolumeClaims(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + svc.Id}); err != nil || len(claims.Items) != 1 {
		t.Errorf("the service's model volume staged on onprem: %v", err)
	}
	if svcs, err := onprem.Client.CoreV1().Services(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + svc.Id}); err != nil || len(svcs.Items) != 1 ||
		len(svcs.Items[0].Spec.Ports) != 1 || svcs.Items[0].Spec.Ports[0].Port != 8000 || len(svcs.Items[0].Spec.Selector) == 0 {
		t.Errorf("the service's Service staged on onprem: %v %+v", err, svcs)
	}
	if pols, err := onprem.Client.NetworkingV1().NetworkPolicies(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + svc.Id}); err != nil || len(pols.Items) != 1 {
		t.Errorf("the service's NetworkPolicy staged on onprem (what may reach it past the namespace's default of nothing): %v", err)
	}

	// A notebook runs on a worker the same way, and opens at /w/{id}/
	// through Gantry: its requests reach its pod there through the
	// worker's port-forward (every simulated pod's port answers with a
	// stand-in app that says what it was asked).
	nb := launchOf("jupyter-notebook", model.GPUChoice{Class: new("A100-80GB"), Count: new(1), MigProfile: new("none")})
	runsOn(nb.Id, "onprem", onprem)
	if claims, err := onprem.Client.CoreV1().PersistentVolumeClaims(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + nb.Id}); err != nil || len(claims.Items) != 1 {
		t.Errorf("the notebook's home volume staged on onprem: %v", err)
	}
	opens := func() {
		t.Helper()
		waitfor.Until(t, time.Minute, "the notebook's app through /w/"+nb.Id+"/", func() error {
			req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+"/w/"+nb.Id+"/api", nil)
			req.Header.Set("Authorization", "Bearer "+g.Token("ada"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var got struct{ App, Request, ForwardedPrefix string }
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil {
				return fmt.Errorf("%d %.300s", resp.StatusCode, body)
			}
			if got.App != "simulated" || got.Request != "GET /w/"+nb.Id+"/api HTTP/1.1" || got.ForwardedPrefix != "/w/"+nb.Id {
				t.Fatalf("the app was asked %+v", got)
			}
			return nil
		})
	}
	opens()
	// Not even the team's lead gets in: Gantry's checks hold wherever the
	// notebook runs.
	req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+"/w/"+nb.Id+"/api", nil)
	req.Header.Set("Authorization", "Bearer "+g.Token("lee"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("lee opening ada's notebook on the worker: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// The room drained: the service's pod is replaced, and the new one
	// runs on the cloud at its price.
	if r := servertest.Must(api.DrainClusterWithResponse(ctx, "onprem"))(t); r.StatusCode() != 200 {
		t.Fatalf("drain: %d %s", r.StatusCode(), r.Body)
	}
	runsOn(svc.Id, "cloud", cloud)
	waitfor.Until(t, 2*time.Minute, "the service's pod gone from the drained room", func() error {
		pods, err := onprem.Client.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + svc.Id})
		if err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("%d pods (%v)", len(pods.Items), err)
		}
		return nil
	})
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, svc.Id))(t).JSON200); servertest.Deref(w.Cluster) != "cloud" || w.PricePerHour != 6.4 {
		t.Errorf("the service, moved: on %q at $%v/h", servertest.Deref(w.Cluster), w.PricePerHour)
	}
	// The notebook stays on the drained room: its home volume is there.
	// Stopped and started while the room is cordoned, it waits for the
	// room, saying why, rather than run on the cloud without its home;
	// uncordoned, it runs there again and opens.
	runsOn(nb.Id, "onprem", onprem)
	if r := servertest.Must(api.StopWorkloadWithResponse(ctx, nb.Id))(t); r.StatusCode() >= 300 {
		t.Fatalf("stop the notebook: %d %s", r.StatusCode(), r.Body)
	}
	waitfor.Until(t, 2*time.Minute, "the notebook stopped", func() error {
		if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, nb.Id))(t).JSON200); w.Status != model.Stopped {
			return fmt.Errorf("status %s", w.Status)
		}
		return nil
	})
	if r := servertest.Must(api.StartWorkloadWithResponse(ctx, nb.Id))(t); r.StatusCode() >= 300 {
		t.Fatalf("start the notebook: %d %s", r.StatusCode(), r.Body)
	}
	waitfor.Until(t, 2*time.Minute, "the notebook waiting for its home", func() error {
		w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, nb.Id))(t).JSON200)
		if w.Status != model.Queued || !strings.Contains(servertest.Deref(w.Reason), "cloud: its volumes are on onprem, where alone it runs") {
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		return nil
	})
	if r := servertest.Must(api.UncordonClusterWithResponse(ctx, "onprem"))(t); r.StatusCode() != 200 {
		t.Fatalf("uncordon: %d %s", r.StatusCode(), r.Body)
	}
	runsOn(nb.Id, "onprem", onprem)
	opens()

	// CPU-only launches run on the workers' CPU nodes, priced per
	// core-hour: two cores on the room's two, at its price; once the room
	// says it has none left, the next goes to the cloud, at the cloud's.
	cpuJob := func(cores string) model.Workload {
		t.Helper()
		r := servertest.Must(api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "cpu-job", Team: "vision",
			Parameters: &model.Parameters{"cpu": cores, "script": "sleep 3600"}}))(t)
		if r.StatusCode() != 201 {
			t.Fatalf("launch cpu-job: %d %s", r.StatusCode(), r.Body)
		}
		w := servertest.Deref(r.JSON201)
		launched = append(launched, w.Id)
		return w
	}
	freeCores := func(cluster string) float64 {
		for _, c := range servertest.Deref(servertest.Must(api.ListClustersWithResponse(ctx))(t).JSON200).Items {
			if c.Name == cluster && c.State != nil {
				return c.State.Free[gpu.CPUClass]
			}
		}
		return -1
	}
	cpu1 := cpuJob("2")
	runsOn(cpu1.Id, "onprem", onprem)
	if r := kueueWorkload(cpu1.Id).GetAnnotations()[dispatch.ReasonAnnotation]; r != "placed on onprem: $0.02/core-h (reserved) vs $0.05 on cloud; 2 cores free" {
		t.Errorf("the CPU-only launch's placement: %q", r)
	}
	if a := kueueWorkload(cpu1.Id).GetAnnotations(); a[kapi.AnnotationHourPrice] != "0.04" || a[kapi.AnnotationGPUHourPrice] != "" {
		t.Errorf("the CPU-only run's prices: hourly %q, GPU-hour %q (want none)", a[kapi.AnnotationHourPrice], a[kapi.AnnotationGPUHourPrice])
	}
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, cpu1.Id))(t).JSON200); servertest.Deref(w.Cluster) != "onprem" || math.Abs(w.PricePerHour-0.04) > 1e-9 {
		t.Errorf("the CPU-only launch runs on %q at $%v/h, want 2 cores at $0.02", servertest.Deref(w.Cluster), w.PricePerHour)
	}
	waitfor.Until(t, time.Minute, "the room's cores taken, as Gantry reads its workers", func() error {
		if n := freeCores("onprem"); n != 0 {
			return fmt.Errorf("%g free", n)
		}
		return nil
	})
	cpu2 := cpuJob("1")
	runsOn(cpu2.Id, "cloud", cloud)
	if r := kueueWorkload(cpu2.Id).GetAnnotations()[dispatch.ReasonAnnotation]; !strings.HasPrefix(r, "placed on cloud: $0.05/core-h vs $0.02 on onprem (full); ") {
		t.Errorf("the second CPU-only launch's placement: %q", r)
	}
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, cpu2.Id))(t).JSON200); servertest.Deref(w.Cluster) != "cloud" || math.Abs(w.PricePerHour-0.05) > 1e-9 {
		t.Errorf("the second CPU-only launch runs on %q at $%v/h, want 1 core at $0.05", servertest.Deref(w.Cluster), w.PricePerHour)
	}

	// Deleted: the work and what was staged for it leave the workers.
	for _, id := range []string{first.Id, second.Id, svc.Id, nb.Id, cpu1.Id, cpu2.Id} {
		if r := servertest.Must(api.DeleteWorkloadWithResponse(ctx, id))(t); r.StatusCode() >= 300 {
			t.Fatalf("delete %s: %d %s", id, r.StatusCode(), r.Body)
		}
	}
	for name, w := range map[string]*devcluster.Cluster{"onprem": onprem, "cloud": cloud} {
		waitfor.Until(t, 3*time.Minute, "nothing left on "+name, func() error {
			pods, err := w.Client.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			claims, err := w.Client.CoreV1().PersistentVolumeClaims(teamNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			svcs, err := w.Client.CoreV1().Services(teamNS).List(ctx, metav1.ListOptions{LabelSelector: workers.LabelStaged})
			if err != nil {
				return err
			}
			pols, err := w.Client.NetworkingV1().NetworkPolicies(teamNS).List(ctx, metav1.ListOptions{LabelSelector: workers.LabelStaged})
			if err != nil {
				return err
			}
			if n := len(pods.Items) + len(claims.Items) + len(svcs.Items) + len(pols.Items); n > 0 {
				return fmt.Errorf("%d pods, %d claims, %d services, %d network policies", len(pods.Items), len(claims.Items), len(svcs.Items), len(pols.Items))
			}
			return nil
		})
	}

	// A VM: a FleetVM in the manager, dispatched by the same score; on its
	// worker Gantry makes the VirtualMachine and starts it once the
	// worker's Kueue admits it; its status, as KubeVirt would write it
	// there, reaches Gantry; stopped, it halts there and goes, its quota
	// given back; started, it runs again; deleted, it leaves both.
	vmLaunch := servertest.Must(api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "gpu-vm", Team: "vision", Gpu: &model.GPUChoice{Class: new("A100-80GB"), Count: new(2)},
		Parameters: &model.Parameters{"sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKubeTestKey0000000000000000000000000000 ada@host"}}))(t)
	if vmLaunch.StatusCode() != 201 {
		t.Fatalf("a VM: %d %s", vmLaunch.StatusCode(), vmLaunch.Body)
	}
	vmW := servertest.Deref(vmLaunch.JSON201)
	vmStart := time.Now()
	step := func(what string) { t.Logf("the VM %s %.1fs after its launch", what, time.Since(vmStart).Seconds()) }
	launched = append(launched, vmW.Id)
	wdyn := map[string]dynamic.Interface{}
	for name, w := range map[string]*devcluster.Cluster{"onprem": onprem, "cloud": cloud} {
		if wdyn[name], err = dynamic.NewForConfig(w.Config()); err != nil {
			t.Fatal(err)
		}
	}
	// vmOn waits until the VM is asked to run (runStrategy Always) on the
	// worker the manager's Kueue Workload names, and on no other.
	vmOn := func() string {
		t.Helper()
		var at string
		waitfor.Until(t, 3*time.Minute, "the VM started on its worker", func() error {
			wl := kueueWorkload(vmW.Id)
			if wl == nil {
				return errors.New("no Kueue Workload yet")
			}
			at, _, _ = unstructured.NestedString(wl.Object, "status", "clusterName")
			if at == "" {
				return fmt.Errorf("not dispatched yet: %v", wl.GetAnnotations()[dispatch.ReasonAnnotation])
			}
			for name, dyn := range wdyn {
				vm, err := dyn.Resource(kapi.VMResource).Namespace(teamNS).Get(ctx, vmW.Name, metav1.GetOptions{})
				switch {
				case name != at && err == nil:
					return fmt.Errorf("a VM on %s too", name)
				case name == at && err != nil:
					return fmt.Errorf("on %s: %v", name, err)
				case name == at:
					if rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs != "Always" {
						return fmt.Errorf("on %s: runStrategy %s", name, rs)
					}
					if ref := metav1.GetControllerOf(vm); ref == nil || ref.Kind != "FleetVM" {
						return fmt.Errorf("on %s: owned by %v", name, vm.GetOwnerReferences())
					}
				}
			}
			return nil
		})
		return at
	}
	// setVMStatus writes the VM's status on its worker as KubeVirt would.
	setVMStatus := func(cluster, printable string) {
		t.Helper()
		vms := wdyn[cluster].Resource(kapi.VMResource).Namespace(teamNS)
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			vm, err := vms.Get(ctx, vmW.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			unstructured.SetNestedField(vm.Object, map[string]any{"printableStatus": printable}, "status")
			_, err = vms.UpdateStatus(ctx, vm, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	vmRuns := func(cluster string) {
		t.Helper()
		waitfor.Until(t, 2*time.Minute, "the VM Running in Gantry, on "+cluster, func() error {
			w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, vmW.Id))(t).JSON200)
			if w.Status != model.Running || servertest.Deref(w.Cluster) != cluster {
				return fmt.Errorf("%s (%s) on %q", w.Status, servertest.Deref(w.Reason), servertest.Deref(w.Cluster))
			}
			return nil
		})
	}
	// A FleetVM written on a worker by someone else than MultiKueue (here
	// before the launch) is no VM of Gantry's: only a manager's FleetVM
	// is made into one, from the manager's template.
	forged := map[string]any{"apiVersion": "gantry.dev/v1alpha1", "kind": "FleetVM",
		"metadata": map[string]any{"name": "forged-vm", "namespace": teamNS, "labels": map[string]any{render.LabelManagedBy: render.ManagedBy, render.LabelPrebuiltWorkload: "forged-vm"}},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"runStrategy": "Always", "template": map[string]any{"spec": map[string]any{"domain": map[string]any{"devices": map[string]any{}}}}}}}}
	create(t, wdyn["onprem"], kapi.FleetVMResource, teamNS, forged)
	at := vmOn()
	if _, err := wdyn["onprem"].Resource(kapi.VMResource).Namespace(teamNS).Get(ctx, "forged-vm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a VirtualMachine made of a FleetVM written on the worker: %v", err)
	}
	// A VM that runs for a copy whose manager's FleetVM is gone (as when
	// MultiKueue could not remove the copy) is halted.
	if cp, err := wdyn["onprem"].Resource(kapi.FleetVMResource).Namespace(teamNS).Get(ctx, "forged-vm", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else {
		orphan := map[string]any{"apiVersion": kapi.VMKind.GroupVersion().String(), "kind": kapi.VMKind.Kind,
			"metadata": map[string]any{"name": "forged-vm", "namespace": teamNS, "labels": map[string]any{render.LabelManagedBy: render.ManagedBy},
				"ownerReferences": []any{map[string]any{"apiVersion": "gantry.dev/v1alpha1", "kind": "FleetVM", "name": "forged-vm", "uid": string(cp.GetUID()), "controller": true}}},
			"spec": map[string]any{"runStrategy": "Always", "template": map[string]any{"spec": map[string]any{"domain": map[string]any{"devices": map[string]any{}}}}}}
		create(t, wdyn["onprem"], kapi.VMResource, teamNS, orphan)
		waitfor.Until(t, time.Minute, "the VM of a copy without a manager's FleetVM halted", func() error {
			vm, err := wdyn["onprem"].Resource(kapi.VMResource).Namespace(teamNS).Get(ctx, "forged-vm", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs != "Halted" {
				return fmt.Errorf("runStrategy %s", rs)
			}
			return nil
		})
	}
	if err := wdyn["onprem"].Resource(kapi.FleetVMResource).Namespace(teamNS).Delete(ctx, "forged-vm", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	firstVM, err := wdyn[at].Resource(kapi.VMResource).Namespace(teamNS).Get(ctx, vmW.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vmUID := firstVM.GetUID()
	// The room passes four A100s through to VMs, the cloud none.
	if r := kueueWorkload(vmW.Id).GetAnnotations()[dispatch.ReasonAnnotation]; at != "onprem" || r != "placed on onprem: $1.10/GPU-h (reserved) vs $3.20 on cloud (full); 4 GPUs free" {
		t.Errorf("the VM's placement: on %s, %q", at, r)
	}
	setVMStatus(at, "Running")
	vmRuns(at)
	step("ran")
	// The worker's copy relabelled to name another Workload there (whoever
	// may write FleetVMs on the worker): its VM is halted, not run under
	// that Workload's admission; labelled back, it runs again.
	runStrategy := func(want string) func(apiwatch.EventType, *unstructured.Unstructured) bool {
		return func(ev apiwatch.EventType, u *unstructured.Unstructured) bool {
			rs, _, _ := unstructured.NestedString(u.Object, "spec", "runStrategy")
			return ev != apiwatch.Deleted && rs == want && u.GetUID() == vmUID
		}
	}
	relabel := func(name string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{render.LabelPrebuiltWorkload: name}}})
		if _, err := wdyn[at].Resource(kapi.FleetVMResource).Namespace(teamNS).Patch(ctx, vmW.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	haltedForLabel := everSeen(t, wdyn[at].Resource(kapi.VMResource).Namespace(teamNS), vmW.Name, runStrategy("Halted"))
	relabel("someone-elses")
	waitfor.Until(t, time.Minute, "the relabelled copy's VM halted", func() error {
		if !haltedForLabel() {
			return errors.New("still running")
		}
		return nil
	})
	runsAgain := everSeen(t, wdyn[at].Resource(kapi.VMResource).Namespace(teamNS), vmW.Name, runStrategy("Always"))
	relabel(vmW.Name)
	waitfor.Until(t, time.Minute, "the copy's VM running again once labelled back", func() error {
		if !runsAgain() {
			return errors.New("still halted")
		}
		return nil
	})
	step("relabelled was halted, and ran again")
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, vmW.Id))(t).JSON200); math.Abs(w.PricePerHour-2*map[string]float64{"onprem": 1.10, "cloud": 3.20}[at]) > 1e-9 {
		t.Errorf("the VM on %s at $%v/h, want its 2 A100s at that cluster's price", at, w.PricePerHour)
	}
	// Preempted on its worker (its Workload there marked evicted, as that
	// worker's Kueue does before the job lets its quota go): halted there,
	// its quota there given back; admitted there again (nothing took the
	// quota here), it runs again.
	// Both are watched from before the eviction: the halt and the release
	// last only until the worker admits it again, which a poll could miss.
	wwl := wdyn[at].Resource(kapi.KueueWorkloads).Namespace(teamNS)
	halted := everSeen(t, wdyn[at].Resource(kapi.VMResource).Namespace(teamNS), vmW.Name, func(ev apiwatch.EventType, u *unstructured.Unstructured) bool {
		rs, _, _ := unstructured.NestedString(u.Object, "spec", "runStrategy")
		return ev != apiwatch.Deleted && rs == "Halted" && u.GetUID() == vmUID
	})
	// Given back by Gantry there, or gone with the Workload (MultiKueue
	// deletes it once the manager's quota came back, which waits for the
	// VM to halt).
	released := everSeen(t, wwl, vmW.Name, func(ev apiwatch.EventType, u *unstructured.Unstructured) bool {
		_, admitted, _ := unstructured.NestedMap(u.Object, "status", "admission")
		return ev == apiwatch.Deleted || (kueue.Condition(u, "Evicted") && !admitted)
	})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wl, err := wwl.Get(ctx, vmW.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
		conds = append(conds, map[string]any{"type": "Evicted", "status": "True", "reason": "Preempted",
			"message": "Preempted to accommodate a higher priority Workload (the test's)", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)})
		unstructured.SetNestedSlice(wl.Object, conds, "status", "conditions")
		_, err = wwl.UpdateStatus(ctx, wl, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 2*time.Minute, "the preempted VM halted on "+at+" and its quota there given back", func() error {
		if !halted() {
			return errors.New("its VirtualMachine not halted yet")
		}
		if !released() {
			return errors.New("its Workload there still holds its quota")
		}
		return nil
	})
	at = vmOn()
	setVMStatus(at, "Running")
	vmRuns(at)
	step("preempted, halted and admitted again ran")
	// Its worker drained: the VM moves to the cloud once it is down on
	// onprem, never asked to run on both at once.
	if at != "onprem" {
		t.Fatalf("the VM placed again on %s, not onprem", at)
	}
	if r := servertest.Must(api.DrainClusterWithResponse(ctx, "onprem"))(t); r.StatusCode() != 200 {
		t.Fatalf("drain onprem: %d %s", r.StatusCode(), r.Body)
	}
	waitfor.Until(t, 3*time.Minute, "the VM moved to the cloud", func() error {
		running := map[string]bool{}
		for name, dyn := range wdyn {
			if vm, err := dyn.Resource(kapi.VMResource).Namespace(teamNS).Get(ctx, vmW.Name, metav1.GetOptions{}); err == nil {
				rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy")
				running[name] = rs == "Always"
			}
		}
		if running["onprem"] && running["cloud"] {
			t.Fatal("the VM asked to run on onprem and the cloud at once")
		}
		if !running["cloud"] {
			return fmt.Errorf("running: %v", running)
		}
		return nil
	})
	setVMStatus("cloud", "Running")
	vmRuns("cloud")
	step("moved to the cloud ran")
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, vmW.Id))(t).JSON200); math.Abs(w.PricePerHour-2*3.20) > 1e-9 {
		t.Errorf("the VM moved to the cloud at $%v/h, want its 2 A100s at $3.20", w.PricePerHour)
	}
	if r := servertest.Must(api.UncordonClusterWithResponse(ctx, "onprem"))(t); r.StatusCode() != 200 {
		t.Fatalf("uncordon onprem: %d %s", r.StatusCode(), r.Body)
	}
	if r := servertest.Must(api.StopWorkloadWithResponse(ctx, vmW.Id))(t); r.StatusCode() >= 300 || servertest.Deref(r.JSON200).Status != model.Stopped {
		t.Fatalf("stop the VM: %d %s", r.StatusCode(), r.Body)
	}
	waitfor.Until(t, 2*time.Minute, "the VM gone from "+at+" and its quota back", func() error {
		if _, err := wdyn[at].Resource(kapi.VMResource).Namespace(teamNS).Get(ctx, vmW.Name, metav1.GetOptions{}); err == nil {
			return errors.New("its VirtualMachine is still on the worker")
		}
		if wl := kueueWorkload(vmW.Id); wl != nil && kueue.Condition(wl, "QuotaReserved") {
			return errors.New("its quota still reserved in the manager")
		}
		return nil
	})
	step("stopped was gone")
	if w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, vmW.Id))(t).JSON200); w.Status != model.Stopped {
		t.Errorf("the VM after its stop: %s (%s)", w.Status, servertest.Deref(w.Reason))
	}
	if r := servertest.Must(api.StartWorkloadWithResponse(ctx, vmW.Id))(t); r.StatusCode() >= 300 {
		t.Fatalf("start the VM: %d %s", r.StatusCode(), r.Body)
	}
	at = vmOn()
	setVMStatus(at, "Running")
	vmRuns(at)
	step("started again ran")
	if r := servertest.Must(api.DeleteWorkloadWithResponse(ctx, vmW.Id))(t); r.StatusCode() >= 300 {
		t.Fatalf("delete the VM: %d %s", r.StatusCode(), r.Body)
	}
	waitfor.Until(t, 2*time.Minute, "the VM gone from both clusters", func() error {
		if _, err := mdyn.Resource(kapi.FleetVMResource).Namespace(teamNS).Get(ctx, vmW.Name, metav1.GetOptions{}); err == nil {
			return errors.New("its FleetVM is still in the manager")
		}
		for name, dyn := range wdyn {
			for _, res := range []schema.GroupVersionResource{kapi.FleetVMResource, kapi.VMResource} {
				if _, err := dyn.Resource(res).Namespace(teamNS).Get(ctx, vmW.Name, metav1.GetOptions{}); err == nil {
					return fmt.Errorf("its %s is still on %s", res.Resource, name)
				}
			}
		}
		return nil
	})
	step("deleted was gone")

	// A trial runs on the workers: each run goes where the dispatcher
	// places it, reports its steps from there with its pod's token (which
	// Gantry has that worker review), is stopped at the trial's step and
	// measured at its cluster's price. The A100 run goes to the room, the
	// H100 run to the cloud, the only one with H100s.
	tr := servertest.Must(api.CreateTrialWithResponse(ctx, nil, model.TrialRequest{Template: "pytorch-train", Team: "vision",
		Classes: []string{"A100-80GB", "H100-80GB"}, Steps: 20}))(t)
	if tr.StatusCode() != 201 {
		t.Fatalf("a trial in the fleet: %d %s", tr.StatusCode(), tr.Body)
	}
	trial := servertest.Deref(tr.JSON201)
	for _, r := range trial.Runs {
		launched = append(launched, servertest.Deref(r.Workload))
	}
	onA100, onH100 := servertest.Deref(trial.Runs[0].Workload), servertest.Deref(trial.Runs[1].Workload)
	runsOn(onA100, "onprem", onprem)
	runsOn(onH100, "cloud", cloud)
	tokenOf := func(w *devcluster.Cluster, id string) string {
		t.Helper()
		pods, err := w.Client.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("%s's pod: %v", id, err)
		}
		p := pods.Items[0]
		env := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["GANTRY_RUN_URL"] != reportURL+"/api/v1/workloads/"+id+"/progress" || env["GANTRY_RUN_TOKEN_FILE"] != render.RunTokenFile {
			t.Errorf("%s's pod on the worker reports to %q with %q", id, env["GANTRY_RUN_URL"], env["GANTRY_RUN_TOKEN_FILE"])
		}
		// The token its kubelet would mount: the worker's, for Gantry's
		// runs, bound to the pod.
		sa := p.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		exp := int64(600)
		tok, err := w.Client.CoreV1().ServiceAccounts(teamNS).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{runs.Audience}, ExpirationSeconds: &exp,
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a token for %s's pod: %v", id, err)
		}
		return tok.Status.Token
	}
	roomToken, cloudToken := tokenOf(onprem, onA100), tokenOf(cloud, onH100)
	// The cloud's token is no good for the room's run: the room reviews it.
	if r := servertest.Must(servertest.Client(g.URL, cloudToken).ReportProgressWithResponse(ctx, onA100, model.ProgressReports{Reports: []model.ProgressReport{{Step: 1}}}))(t); r.StatusCode() != 401 && r.StatusCode() != 403 {
		t.Errorf("the cloud run's token reporting for the room's run: %d %s", r.StatusCode(), r.Body)
	}
	// Steps of 1 s on the A100, 0.5 s on the H100; ten thousand in all.
	t0 := time.Now().Add(-time.Minute)
	for _, run := range []struct {
		id, token string
		per       time.Duration
	}{{onA100, roomToken, time.Second}, {onH100, cloudToken, 500 * time.Millisecond}} {
		var rs []model.ProgressReport
		for step := int64(5); step <= 20; step += 5 {
			rs = append(rs, model.ProgressReport{Step: step, TotalSteps: new(int64(10000)), Time: new(t0.Add(time.Duration(step) * run.per)),
				Metrics: &map[string]float64{"samples_per_s": 64 / run.per.Seconds()}})
		}
		if r := servertest.Must(servertest.Client(g.URL, run.token).ReportProgressWithResponse(ctx, run.id, model.ProgressReports{Reports: rs}))(t); r.StatusCode() >= 300 {
			t.Fatalf("%s reporting from its worker: %d %s", run.id, r.StatusCode(), r.Body)
		}
	}
	var measured model.Trial
	waitfor.Until(t, 2*time.Minute, "the trial done", func() error {
		measured = servertest.Deref(servertest.Must(api.GetTrialWithResponse(ctx, trial.Id))(t).JSON200)
		if !servertest.Deref(measured.Done) {
			var st []string
			for _, r := range measured.Runs {
				st = append(st, fmt.Sprintf("%s %v step %d", r.Class, servertest.Deref(r.Status), servertest.Deref(r.LastStep)))
			}
			return fmt.Errorf("runs: %v", st)
		}
		return nil
	})
	a100, h100 := measured.Runs[0], measured.Runs[1]
	if servertest.Deref(a100.PricePerHour) != 1.1 || servertest.Deref(h100.PricePerHour) != 6.9 || servertest.Deref(a100.LastStep) != 20 || servertest.Deref(h100.LastStep) != 20 {
		t.Errorf("the runs measured: %s", asJSON(measured.Runs))
	}
	if servertest.Deref(measured.Best) != 0 || !strings.HasPrefix(servertest.Deref(measured.Why), "A100-80GB × 1 is the cheapest") {
		t.Errorf("the trial's choice: %v (%s)", measured.Best, servertest.Deref(measured.Why))
	}

	// A worker gone from the clusters file (Gantry restarted without it)
	// and a MultiKueueConfig of an older name leave their objects behind:
	// the leader prunes them, as the chart's ServiceAccount.
	for _, o := range []struct {
		res  schema.GroupVersionResource
		obj  map[string]any
		name string
	}{
		{multiKueueCluster, kueueObj("MultiKueueCluster", "retired", map[string]any{"clusterSource": map[string]any{
			"kubeConfig": map[string]any{"locationType": "Secret", "location": "gantry-worker-retired"}}}), "retired"},
		{multiKueueConfigs, kueueObj("MultiKueueConfig", "gantry-older", map[string]any{"clusters": []any{"retired"}}), "gantry-older"},
	} {
		o.obj["metadata"].(map[string]any)["labels"] = map[string]any{render.LabelManagedBy: render.ManagedBy}
		create(t, mdyn, o.res, "", o.obj)
		waitfor.Until(t, time.Minute, o.res.Resource+" "+o.name+" pruned", func() error {
			if _, err := mdyn.Resource(o.res).Get(ctx, o.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	}

	// The chart's rules with a fleet, against what Gantry asked the
	// manager for: nothing refused, every fleet rule used (a server-side
	// apply that creates is audited as patch).
	granted, err := clustertest.Grants(deploy.FleetClusterRoleRules, deploy.FleetRoleRules)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 30*time.Second, "the fleet's rules used, none refused", func() error {
		used, refused, err := clustertest.Audited(manager.AuditLog(), chartUser)
		if err != nil {
			return err
		}
		if len(refused) > 0 {
			t.Fatalf("the chart's ServiceAccount was refused %v: the chart must grant it (deploy/helm/gantry/files)", refused)
		}
		var unused []string
		for k := range granted {
			if !used[k] && !(strings.HasSuffix(k, " create") && used[strings.TrimSuffix(k, " create")+" patch"]) {
				unused = append(unused, k)
			}
		}
		if len(unused) > 0 {
			sort.Strings(unused)
			return fmt.Errorf("granted with a fleet and never used: %v", unused)
		}
		return nil
	})
	// And on the workers, deploy/worker's rules against what Gantry and
	// MultiKueue (with the same kubeconfig) asked them for.
	rules, err := deploy.WorkerRules()
	if err != nil {
		t.Fatal(err)
	}
	if granted, err = clustertest.Grants(rules); err != nil {
		t.Fatal(err)
	}
	// Refused on neither; each rule used on one at least, but those only
	// pruning Kueue's objects uses (when a team or a class goes), which
	// this test does not do.
	pruning := map[string]bool{clustertest.RBACKey("", "namespaces", "list"): true}
	for _, res := range []string{"resourceflavors", "clusterqueues", "workloadpriorityclasses", "admissionchecks"} {
		pruning[clustertest.RBACKey("kueue.x-k8s.io", res, "delete")] = true
	}
	waitfor.Until(t, 30*time.Second, "the workers' rules used, none refused", func() error {
		used := map[string]bool{}
		for name, w := range map[string]*devcluster.Cluster{"onprem": onprem, "cloud": cloud} {
			u, refused, err := clustertest.Audited(w.AuditLog(), workerUser)
			if err != nil {
				return err
			}
			if len(refused) > 0 {
				t.Fatalf("%s refused Gantry's identity there %v: deploy/worker/gantry-worker.yaml must grant it", name, refused)
			}
			maps.Copy(used, u)
		}
		var unused []string
		for k := range granted {
			if !used[k] && !pruning[k] && !(strings.HasSuffix(k, " create") && used[strings.TrimSuffix(k, " create")+" patch"]) {
				unused = append(unused, k)
			}
		}
		if len(unused) > 0 {
			sort.Strings(unused)
			return fmt.Errorf("granted on the workers and never used: %v", unused)
		}
		return nil
	})
}

// everSeen watches the object name of res from its version now and reports
// whether any event of it since satisfied ok (a state that may not last
// until a poll looks; its deletion too). The watch ends with the test.
func everSeen(t *testing.T, res dynamic.ResourceInterface, name string, ok func(apiwatch.EventType, *unstructured.Unstructured) bool) func() bool {
	t.Helper()
	cur, err := res.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := res.Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: cur.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var seen atomic.Bool
	go func() {
		for ev := range w.ResultChan() {
			if u, isObj := ev.Object.(*unstructured.Unstructured); isObj && ev.Type != apiwatch.Error && ok(ev.Type, u) {
				seen.Store(true)
			}
		}
	}()
	return seen.Load
}

// workerUser is who Gantry is to a worker: deploy/worker's ServiceAccount.
const workerUser = "system:serviceaccount:gantry-system:gantry-worker"

// workerIdentity applies deploy/worker/gantry-worker.yaml on w (its
// ClusterRole's rules as the file has them now) and returns a kubeconfig
// that impersonates workerUser there.
func workerIdentity(t *testing.T, w *devcluster.Cluster) string {
	t.Helper()
	ctx := context.Background()
	for _, doc := range strings.Split(string(deploy.Worker), "\n---\n") {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		var err error
		switch head.Kind {
		case "Namespace":
			var o corev1.Namespace
			if err = yaml.UnmarshalStrict([]byte(doc), &o); err == nil {
				_, err = w.Client.CoreV1().Namespaces().Create(ctx, &o, metav1.CreateOptions{})
			}
		case "ServiceAccount":
			var o corev1.ServiceAccount
			if err = yaml.UnmarshalStrict([]byte(doc), &o); err == nil {
				_, err = w.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			}
		case "ClusterRole":
			var o rbacv1.ClusterRole
			if err = yaml.UnmarshalStrict([]byte(doc), &o); err == nil {
				if _, err = w.Client.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
					var have *rbacv1.ClusterRole
					if have, err = w.Client.RbacV1().ClusterRoles().Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
						have.Rules = o.Rules
						_, err = w.Client.RbacV1().ClusterRoles().Update(ctx, have, metav1.UpdateOptions{})
					}
				}
			}
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			if err = yaml.UnmarshalStrict([]byte(doc), &o); err == nil {
				_, err = w.Client.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
			}
		default:
			t.Fatalf("deploy/worker/gantry-worker.yaml: a %q, which this test does not apply", head.Kind)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("deploy/worker/gantry-worker.yaml's %s: %v", head.Kind, err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(w.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = workerUser
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-"+w.Name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// chartUser is who the chart's ServiceAccount is to the API server.
const chartUser = "system:serviceaccount:gantry-system:gantry"

// chartIdentity grants chartUser, in the manager, what the Helm chart
// grants Gantry's ServiceAccount with a clusters file — its ClusterRole with
// the fleet's rules, its Role in the lease namespace, and the fleet's Role
// in Kueue's namespace — and returns a kubeconfig that impersonates it.
func chartIdentity(t *testing.T, lease string) string {
	t.Helper()
	ctx := context.Background()
	rules := func(files ...[]byte) []rbacv1.PolicyRule {
		rs, err := clustertest.Rules(files...)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "gantry", Namespace: "gantry-system"}}
	rbac := manager.Client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gantry-chart"},
		Rules: rules(deploy.ClusterRoleRules, deploy.FleetClusterRoleRules)}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gantry-chart"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "gantry-chart"}, Subjects: subject}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for ns, rs := range map[string][]rbacv1.PolicyRule{lease: rules(deploy.RoleRules), devcluster.KueueNamespace: rules(deploy.FleetRoleRules)} {
		if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gantry-chart"}, Rules: rs}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gantry-chart"},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "gantry-chart"}, Subjects: subject}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(manager.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = chartUser
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-chart")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// fleetGantry is Gantry as the chart deploys it over a fleet: on the
// manager as the chart's ServiceAccount (its rules, its leader lease in the
// namespace lease, the chart's admission policy on the fleet's Secrets),
// driving the workers of the clusters file; edit (nil: none) changes its
// configuration further.
func fleetGantry(t *testing.T, clustersFile, lease string, edit func(*config.Config)) *servertest.Gantry {
	t.Helper()
	if _, err := manager.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lease}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	asChart := chartIdentity(t, lease)
	fleetSecretsPolicy(t, asChart)
	return servertest.New(t, func(c *config.Config) {
		c.ClustersFile = clustersFile
		c.Kubeconfig = asChart
		c.Namespace = lease
		c.ReconcileInterval = config.Duration(time.Second)
		if edit != nil {
			edit(c)
		}
	})
}

// fleetSecretsPolicy installs the chart's ValidatingAdmissionPolicy for
// Kueue's namespace (as the fleet values render it: deploy/helm/testdata)
// and checks it against the chart's identity: RBAC lets it write any Secret
// there, the policy only its workers' kubeconfigs (workers.SecretName).
func fleetSecretsPolicy(t *testing.T, asChart string) {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile("../../../deploy/helm/testdata/fleet.golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(manager.Config())
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(u.GetKind(), "ValidatingAdmissionPolicy") {
			continue
		}
		found++
		res := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
		if u.GetKind() == "ValidatingAdmissionPolicyBinding" {
			res.Resource = "validatingadmissionpolicybindings"
		}
		if _, err := dyn.Resource(res).Apply(ctx, u.GetName(), &u, metav1.ApplyOptions{FieldManager: "fleet-test", Force: true}); err != nil {
			t.Fatalf("apply the chart's %s: %v", u.GetKind(), err)
		}
	}
	if found != 2 {
		t.Fatalf("the chart's fleet values render %d ValidatingAdmissionPolicy objects, not a policy and its binding", found)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", asChart)
	if err != nil {
		t.Fatal(err)
	}
	chart, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := devcluster.KueueNamespace
	// Kueue's own Secret there (its webhook's certificate, say).
	if _, err := manager.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kueue-own"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	write := func(name string) error {
		_, err := chart.CoreV1().Secrets(ns).Patch(ctx, name, types.ApplyPatchType,
			[]byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"`+name+`"},"stringData":{"x":"y"}}`), metav1.PatchOptions{FieldManager: "fleet-test", Force: new(true)})
		return err
	}
	// The policy takes a moment to load in the API server.
	waitfor.Until(t, 30*time.Second, "the policy to refuse the chart's identity another Secret", func() error {
		for _, name := range []string{"kueue-own", "not-a-worker"} {
			if err := write(name); err == nil || !strings.Contains(err.Error(), "Gantry writes only its workers' kubeconfigs") {
				return fmt.Errorf("write of Secret %s: %v", name, err)
			}
		}
		return nil
	})
	probe := workers.SecretName("probe")
	if err := write(probe); err != nil {
		t.Fatalf("the policy refuses a worker's kubeconfig: %v", err)
	}
	if err := manager.Client.CoreV1().Secrets(ns).Delete(ctx, probe, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDispatchOverTwoWorkers: launches land on the cheaper feasible worker
// and run there; the cheaper worker full, the next goes to the other; a
// team whose residency no worker with its class satisfies waits with the
// reason; the cloud's control plane gone, its work fails over to the room
// once it has space.
func TestDispatchOverTwoWorkers(t *testing.T) {
	if manager == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	ctx := context.Background()
	mdyn := queues(t, manager, "gantry-fleet")
	queues(t, onprem, "")
	queues(t, cloud, "")
	multiKueue(t, mdyn, map[string]*devcluster.Cluster{"onprem": onprem, "cloud": cloud})

	classes, err := gpu.LoadFile("../../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fl, err := fleet.New(fleet.File{APIVersion: fleet.APIVersion, Kind: fleet.Kind,
		Clusters: []fleet.Cluster{
			{Name: "onprem", Region: "eu-central", Provider: fleet.OnPremises, Kubeconfig: fleet.Kubeconfig{File: onprem.Kubeconfig}, Labels: map[string]string{"residency": "onprem"},
				Offers: []fleet.Offer{{Class: "A100-80GB", Purchase: nodegroup.Reserved, PricePerGPUHour: 1.1, GPUs: 16}}},
			{Name: "cloud", Region: "us-east-1", Provider: fleet.Cloud, Kubeconfig: fleet.Kubeconfig{File: cloud.Kubeconfig}, Labels: map[string]string{"residency": "cloud"},
				Offers: []fleet.Offer{{Class: "H100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 6.9}, {Class: "A100-80GB", Purchase: nodegroup.OnDemand, PricePerGPUHour: 3.2}}},
		},
		Teams: map[string]fleet.Rules{"health": {Require: map[string]string{"residency": "onprem"}}},
	}, classes)
	if err != nil {
		t.Fatal(err)
	}
	w, err := workers.New(workers.Options{Fleet: fl, Classes: classes, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Options{Manager: mdyn, Fleet: fl, Classes: classes, Workers: w, Check: "gantry-fleet", Retry: time.Minute, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // the leader's loop, a round a second
		defer close(done)
		for lctx.Err() == nil {
			w.Pass(lctx)
			if _, err := d.Round(lctx); err != nil && lctx.Err() == nil {
				t.Logf("round: %v", err)
			}
			select {
			case <-lctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	defer func() { stop(); <-done }()

	jobs := manager.Client.BatchV1().Jobs(ns)
	workloadOf := func(kind, name string) *unstructured.Unstructured {
		list, err := mdyn.Resource(kapi.KueueWorkloads).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			for _, o := range list.Items[i].GetOwnerReferences() {
				if o.Kind == kind && o.Name == name {
					return &list.Items[i]
				}
			}
		}
		return nil
	}
	workload := func(jobName string) *unstructured.Unstructured { return workloadOf("Job", jobName) }
	dump := func() {
		for _, c := range []struct {
			name string
			c    *devcluster.Cluster
		}{{"manager", manager}, {"onprem", onprem}, {"cloud", cloud}} {
			dyn, _ := dynamic.NewForConfig(c.c.Config())
			if list, err := dyn.Resource(kapi.KueueWorkloads).Namespace(ns).List(ctx, metav1.ListOptions{}); err == nil {
				for _, u := range list.Items {
					st, _, _ := unstructured.NestedMap(u.Object, "status")
					t.Logf("%s: workload %s: %v", c.name, u.GetName(), st)
				}
			}
			if evs, err := c.c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
				for _, e := range evs.Items {
					t.Logf("%s: event %s %s: %s", c.name, e.InvolvedObject.Name, e.Reason, e.Message)
				}
			}
		}
		if list, err := mdyn.Resource(multiKueueCluster).List(ctx, metav1.ListOptions{}); err == nil {
			for _, u := range list.Items {
				st, _, _ := unstructured.NestedMap(u.Object, "status")
				t.Logf("MultiKueueCluster %s: %v", u.GetName(), st)
			}
		}
	}
	defer func() {
		if t.Failed() {
			dump()
		}
	}()
	runsOn := func(jobName, cluster string) {
		t.Helper()
		worker := map[string]*devcluster.Cluster{"onprem": onprem, "cloud": cloud}[cluster]
		waitfor.Until(t, 3*time.Minute, jobName+" running on "+cluster, func() error {
			wl := workload(jobName)
			if wl == nil {
				return errors.New("no Workload yet")
			}
			at, _, _ := unstructured.NestedString(wl.Object, "status", "clusterName")
			if at != cluster {
				nom, _, _ := unstructured.NestedStringSlice(wl.Object, "status", "nominatedClusterNames")
				return fmt.Errorf("on %q (nominated %v; %s)", at, nom, wl.GetAnnotations()[dispatch.ReasonAnnotation])
			}
			pods, err := worker.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + jobName})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					return nil
				}
			}
			return fmt.Errorf("%d pods, none running on %s", len(pods.Items), cluster)
		})
	}
	submit := func(j *batchv1.Job) {
		t.Helper()
		if _, err := jobs.Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	submit(job("a1", "vision", "A100-80GB", "NVIDIA-A100-SXM4-80GB", 8))
	runsOn("a1", "onprem")
	if r := workload("a1").GetAnnotations()[dispatch.ReasonAnnotation]; !strings.HasPrefix(r, "placed on onprem: $1.10/GPU-h (reserved) vs $3.20 on cloud") {
		t.Errorf("a1's reason: %q", r)
	}
	submit(job("a2", "vision", "A100-80GB", "NVIDIA-A100-SXM4-80GB", 8))
	runsOn("a2", "onprem")
	// The room is full: the next A100 launch goes to the cloud (7 GPUs: one
	// is left there for the service below).
	submit(job("a3", "vision", "A100-80GB", "NVIDIA-A100-SXM4-80GB", 7))
	runsOn("a3", "cloud")
	if r := workload("a3").GetAnnotations()[dispatch.ReasonAnnotation]; r != "placed on cloud: $3.20/GPU-h vs $1.10 on onprem (full); 8 GPUs free" {
		t.Errorf("a3's reason: %q", r)
	}
	submit(job("h1", "vision", "H100-80GB", "NVIDIA-H100-80GB-HBM3", 4))
	runsOn("h1", "cloud")
	// Residency is a hard rule: health's H100 launch has nowhere to go.
	submit(job("h2", "health", "H100-80GB", "NVIDIA-H100-80GB-HBM3", 1))
	waitfor.Until(t, time.Minute, "h2 waiting with its reason", func() error {
		wl := workload("h2")
		if wl == nil {
			return errors.New("no Workload yet")
		}
		nom, _, _ := unstructured.NestedStringSlice(wl.Object, "status", "nominatedClusterNames")
		if r := wl.GetAnnotations()[dispatch.ReasonAnnotation]; len(nom) > 0 || r != "no cluster may run it (onprem: offers no H100-80GB; cloud: team health requires residency=onprem; the cluster has residency=cloud)" {
			return fmt.Errorf("nominated %v: %q", nom, r)
		}
		return nil
	})

	// A service (a Deployment's pod, through Kueue's pod integration): the
	// room is full, so it runs in the cloud, on its last A100.
	if _, err := manager.Client.AppsV1().Deployments(ns).Create(ctx, service("s1", "vision", "A100-80GB", "NVIDIA-A100-SXM4-80GB", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serviceOn := func(app, cluster string) {
		t.Helper()
		worker := map[string]*devcluster.Cluster{"onprem": onprem, "cloud": cloud}[cluster]
		waitfor.Until(t, 3*time.Minute, app+" serving from "+cluster, func() error {
			pods, err := manager.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err != nil {
				return err
			}
			var where []string
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil {
					continue
				}
				wl := workloadOf("Pod", p.Name)
				if wl == nil {
					where = append(where, p.Name+": no Workload yet")
					continue
				}
				at, _, _ := unstructured.NestedString(wl.Object, "status", "clusterName")
				if at != cluster {
					nom, _, _ := unstructured.NestedStringSlice(wl.Object, "status", "nominatedClusterNames")
					where = append(where, fmt.Sprintf("%s: on %q (nominated %v; %s)", p.Name, at, nom, wl.GetAnnotations()[dispatch.ReasonAnnotation]))
					continue
				}
				there, err := worker.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if there.Status.Phase == corev1.PodRunning {
					t.Logf("%s: pod %s running on %s", app, p.Name, cluster)
					return nil
				}
				where = append(where, fmt.Sprintf("%s: %s on %s", p.Name, there.Status.Phase, cluster))
			}
			return fmt.Errorf("%d pods: %v", len(pods.Items), where)
		})
	}
	serviceOn("s1", "cloud")

	// The cloud's control plane gone; room made on premises: a3 and the
	// service run there (the service's Workload given back by MultiKueue
	// once the worker is lost, its pod there gone with it).
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cloud.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range []string{"a1", "a2"} {
		if err := jobs.Delete(ctx, j, metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
	}
	lost := time.Now()
	runsOn("a3", "onprem")
	t.Logf("a3 running on onprem %v after the cloud's control plane stopped", time.Since(lost).Round(time.Second))
	serviceOn("s1", "onprem")
	t.Logf("s1 serving from onprem %v after the cloud's control plane stopped", time.Since(lost).Round(time.Second))
}

// service is a one-replica Deployment whose pod Kueue's pod integration
// queues (as Gantry renders a service for Kueue: its queue, the managed
// label and the admission gate); kwok runs it until it is deleted.
func service(name, team, class, product string, gpus int64) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	podLabels := map[string]string{"app": name, quota.LabelQueueName: "vision", quota.LabelManagedPod: "true", render.LabelTeam: team, render.LabelGPUClass: class}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{render.LabelTeam: team}},
		Spec: appsv1.DeploymentSpec{Replicas: new(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					SchedulingGates: []corev1.PodSchedulingGate{{Name: quota.GatePodAdmission}},
					NodeSelector:    map[string]string{"nvidia.com/gpu.product": product},
					Tolerations:     []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "serve", Image: "serve",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}},
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
