package kube_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/watch"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

var cluster *devcluster.Cluster

// The package's cluster has Kueue count CPU, as a team's quota.cores needs
// (TestKueueCoresQuota); every queue test then runs with CPU counted.
func TestMain(m *testing.M) {
	clustertest.Main(m, "kube", &cluster, clustertest.Hooks{Options: func(o *devcluster.Options) { o.KueueCountsCPU = true }})
}

func need(t *testing.T) *kube.Cluster {
	t.Helper()
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	k, err := kube.New(cluster.Config(), kube.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func rendered(t *testing.T, name, id, team string, choice template.Choice) []render.Object {
	t.Helper()
	return renderedWith(t, name, id, team, choice, false)
}

// renderedWith renders a starter template, queued for Kueue or not.
func renderedWith(t *testing.T, name, id, team string, choice template.Choice, kueue bool) []render.Object {
	t.Helper()
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Template.Metadata.Name != name {
			continue
		}
		r, err := f.Template.Resolve(classes, choice)
		if err != nil {
			t.Fatal(err)
		}
		cpu, _ := classes.CPU()
		objs, err := render.Objects(r, render.Meta{WorkloadID: id, Team: team, Owner: "alice@example.com", Namespace: "gantry-" + team, TemplateVersion: 1, Image: "registry.gantry.internal/test/image@sha256:" + strings.Repeat("1", 64), Kueue: kueue, CPUNodeLabel: cpu.NodeLabel})
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	t.Fatalf("no template %s", name)
	return nil
}

func TestNamespaceIsRestricted(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	if err := k.EnsureNamespace(ctx, "gantry-ns1", "ns1"); err != nil {
		t.Fatal(err)
	}
	if err := k.EnsureNamespace(ctx, "gantry-ns1", "ns1"); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	ns, err := cluster.Client.CoreV1().Namespaces().Get(ctx, "gantry-ns1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" || ns.Labels["gantry.dev/team"] != "ns1" {
		t.Fatalf("labels %v", ns.Labels)
	}
	// Its default: no ingress to any pod.
	deny, err := cluster.Client.NetworkingV1().NetworkPolicies("gantry-ns1").Get(ctx, kube.DefaultDenyPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(deny.Spec.PodSelector.MatchLabels) != 0 || len(deny.Spec.Ingress) != 0 || len(deny.Spec.PolicyTypes) != 1 || deny.Spec.PolicyTypes[0] != "Ingress" {
		t.Fatalf("default policy %+v, want every pod, no ingress", deny.Spec)
	}
	// The real admission plugin refuses a privileged pod there.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "root"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if _, err := cluster.Client.CoreV1().Pods("gantry-ns1").Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("unrestricted pod admitted: %v", err)
	}
}

func TestApplyIsIdempotentAndOwned(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	objs := rendered(t, "vllm-inference", "idem0001", "vision", template.Choice{})
	if err := k.EnsureNamespace(ctx, "gantry-vision", "vision"); err != nil {
		t.Fatal(err)
	}
	if err := k.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	name := "vllm-inference-idem0001"
	dep, err := cluster.Client.AppsV1().Deployments("gantry-vision").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cluster.Client.CoreV1().Services("gantry-vision").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != dep.UID {
		t.Fatalf("service owner refs %+v, want the deployment %s", svc.OwnerReferences, dep.UID)
	}
	np, err := cluster.Client.NetworkingV1().NetworkPolicies("gantry-vision").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != dep.UID {
		t.Fatalf("network policy owner refs %+v, want the deployment %s", np.OwnerReferences, dep.UID)
	}
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("network policy selects %s=%s, which the pods lack", k, v)
		}
	}
	// Applying the same objects again changes nothing.
	if err := k.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	dep2, _ := cluster.Client.AppsV1().Deployments("gantry-vision").Get(ctx, name, metav1.GetOptions{})
	svc2, _ := cluster.Client.CoreV1().Services("gantry-vision").Get(ctx, name, metav1.GetOptions{})
	if dep2.ResourceVersion != dep.ResourceVersion && dep2.Generation != dep.Generation {
		t.Errorf("re-apply changed the deployment (generation %d -> %d)", dep.Generation, dep2.Generation)
	}
	if svc2.ResourceVersion != svc.ResourceVersion {
		t.Errorf("re-apply changed the service (resourceVersion %s -> %s)", svc.ResourceVersion, svc2.ResourceVersion)
	}
	for _, mf := range dep2.ManagedFields {
		if mf.Operation == metav1.ManagedFieldsOperationApply && mf.Manager != kapi.FieldManager {
			t.Errorf("applied by %q", mf.Manager)
		}
	}
	// Deleting the primary object removes the rest (garbage collector).
	if err := k.Delete(ctx, "gantry-vision", "Deployment", name); err != nil {
		t.Fatal(err)
	}
	waitGone(t, func() error {
		_, err := cluster.Client.CoreV1().Services("gantry-vision").Get(ctx, name, metav1.GetOptions{})
		return err
	})
	waitGone(t, func() error {
		_, err := cluster.Client.CoreV1().PersistentVolumeClaims("gantry-vision").Get(ctx, name+"-models", metav1.GetOptions{})
		return err
	})
	waitGone(t, func() error {
		_, err := cluster.Client.NetworkingV1().NetworkPolicies("gantry-vision").Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if err := k.Delete(ctx, "gantry-vision", "Deployment", name); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

func waitGone(t *testing.T, get func() error) {
	t.Helper()
	waitfor.Until(t, time.Minute, "the object to go", func() error {
		if err := get(); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

func TestRejectionNamesTheField(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	if err := k.EnsureNamespace(ctx, "gantry-bad", "bad"); err != nil {
		t.Fatal(err)
	}
	objs := rendered(t, "batch-inference", "bad00001", "bad", template.Choice{Params: map[string]any{"input": "a.jsonl"}})
	job := objs[len(objs)-2].(*batchv1.Job) // then its NetworkPolicy
	job.Spec.Template.Spec.Containers[0].Image = ""
	err := k.Apply(ctx, []render.Object{job})
	var inv *fault.Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("err = %v, want *fault.Invalid", err)
	}
	if !strings.Contains(inv.Fields[0].Path, "spec.template.spec.containers[0].image") || !strings.Contains(inv.Fields[0].Message, "rejected by the Kubernetes API server") {
		t.Fatalf("%+v", inv.Fields)
	}
}

func TestUnreachable(t *testing.T) {
	cfg := cluster
	if cfg == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	c := cfg.Config()
	c.Host = "https://127.0.0.1:1"
	c.Timeout = 2 * time.Second
	k, err := kube.New(c, kube.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var un *fault.Unavailable
	if err := k.EnsureNamespace(context.Background(), "gantry-x", "x"); !errors.As(err, &un) {
		t.Fatalf("err = %v, want *fault.Unavailable", err)
	}
}

// TestJobKeptRunning: the local cluster's Stages keep a Job's pod Running for
// the time in its pod-complete.stage.kwok.x-k8s.io/delay annotation.
func TestJobKeptRunning(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	if err := k.EnsureNamespace(ctx, "gantry-delay", "delay"); err != nil {
		t.Fatal(err)
	}
	objs := rendered(t, "pytorch-train", "delay001", "delay", template.Choice{Count: 1})
	job := objs[len(objs)-2].(*batchv1.Job) // then its NetworkPolicy
	job.Spec.Template.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = "60s"
	if err := k.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: "gantry.dev/workload-id=delay001"}
	waitfor.Until(t, time.Minute, "the job's pod to run", func() error {
		pods, _ := cluster.Client.CoreV1().Pods("gantry-delay").List(ctx, sel)
		if len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning {
			return nil
		}
		return errors.New("not running")
	})
	// What must not happen (the pod completing after kwok's usual 1 s) can
	// only be watched for a while: 8 s, well past it.
	if err := waitfor.Poll(8*time.Second, func() error {
		pods, _ := cluster.Client.CoreV1().Pods("gantry-delay").List(ctx, sel)
		if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return nil // it left Running
		}
		return errors.New("still Running")
	}); err == nil {
		t.Fatal("the pod left Running before its delay")
	}
}

// TestWatchReportsDeadline: the watcher reports a Job that outlives its
// deadline as Failed with the Job controller's reason.
func TestWatchReportsDeadline(t *testing.T) {
	k := need(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k.EnsureNamespace(ctx, "gantry-deadline", "deadline"); err != nil {
		t.Fatal(err)
	}
	seen := make(chan watch.Observation, 100)
	w, err := k.Watcher(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.OnChange(func(id string) {
		if o, ok := w.Observe(id); ok && id == "dead0001" {
			seen <- o
		}
	}); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); w.Shutdown() }() // informers stop with ctx
	if !w.Run(ctx) {
		t.Fatal("caches did not fill")
	}
	objs := rendered(t, "pytorch-train", "dead0001", "deadline", template.Choice{Count: 1})
	job := objs[len(objs)-2].(*batchv1.Job) // then its NetworkPolicy
	job.Spec.ActiveDeadlineSeconds = ptr(int64(3))
	job.Spec.Template.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = "120s"
	if err := k.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	phases := map[string]bool{}
	timeout := time.After(90 * time.Second)
	for {
		select {
		case o := <-seen:
			phases[string(o.Phase)] = true
			if o.Phase == "Failed" {
				if !strings.Contains(o.Reason, "max runtime of 3s and was stopped") {
					t.Fatalf("reason %q, want its max runtime of 3s", o.Reason)
				}
				if !phases["Running"] {
					t.Errorf("never reported Running before failing: %v", phases)
				}
				return
			}
		case <-timeout:
			t.Fatalf("no Failed observation; saw %v", phases)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestObjectsFromTheJobCache: what the lifecycle loop converges, with Jobs
// from the watcher's cache (kube.Cluster.Objects), lists what the API server
// lists — each Job and whether it is asked to run, a stopped one too, and
// the Deployments beside them — and, until the cache is filled, is the API
// server's list.
func TestObjectsFromTheJobCache(t *testing.T) {
	k := need(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "gantry-jobcache"
	if err := k.EnsureNamespace(ctx, ns, "jobcache"); err != nil {
		t.Fatal(err)
	}
	w, err := k.Watcher(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); w.Shutdown() }() // informers stop with ctx
	if !w.Run(ctx) {
		t.Fatal("caches did not fill")
	}
	// The package's tests share the cluster's GPUs: what this one made goes
	// when it ends.
	t.Cleanup(func() {
		for _, o := range [][2]string{{"Job", "pytorch-train-jcache01"}, {"Job", "pytorch-train-jcache02"}, {"Deployment", "vllm-inference-jcache03"}} {
			if err := k.Delete(context.Background(), ns, o[0], o[1]); err != nil {
				t.Errorf("delete %s %s: %v", o[0], o[1], err)
			}
		}
	})
	for _, id := range []string{"jcache01", "jcache02"} {
		objs := rendered(t, "pytorch-train", id, "jobcache", template.Choice{Count: 1})
		objs[len(objs)-2].(*batchv1.Job).Spec.Template.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = "120s" // running while stopped
		if err := k.Apply(ctx, objs); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Apply(ctx, rendered(t, "vllm-inference", "jcache03", "jobcache", template.Choice{Count: 1})); err != nil {
		t.Fatal(err)
	}
	stopped := workload.ObjectRef{Namespace: ns, Kind: "Job", Name: "pytorch-train-jcache02", WorkloadID: "jcache02"}
	if err := k.SetRunning(ctx, stopped, false); err != nil {
		t.Fatal(err)
	}
	mine := func(objs []workload.ObjectRef, err error) ([]workload.ObjectRef, error) {
		return slices.DeleteFunc(objs, func(o workload.ObjectRef) bool { return o.Namespace != ns }), err
	}
	want := []string{"Deployment vllm-inference-jcache03 running", "Job pytorch-train-jcache01 running", "Job pytorch-train-jcache02 stopped"}
	described := func(objs []workload.ObjectRef) []string {
		var out []string
		for _, o := range objs {
			state := "running"
			if !o.Running {
				state = "stopped"
			}
			out = append(out, o.Kind+" "+o.Name+" "+state)
		}
		return out
	}
	waitfor.Until(t, time.Minute, "the cache-backed list to agree with the API server's", func() error {
		listed, err := mine(k.Managed(ctx))
		if err != nil {
			return err
		}
		cached, err := mine(k.Objects(w).Managed(ctx))
		if err != nil {
			return err
		}
		if !slices.Equal(described(listed), want) || !slices.Equal(cached, listed) {
			return fmt.Errorf("from the cache %v, from the API server %v, want %v", described(cached), described(listed), want)
		}
		return nil
	})
	// The Jobs are the cache's once it is filled, even when it holds none,
	// and the API server's until then; the Deployment is always the API
	// server's.
	onlyCached := []*batchv1.Job{{ObjectMeta: metav1.ObjectMeta{Name: "only-cached", Namespace: ns, Labels: map[string]string{render.LabelWorkloadID: "jcache04"}}}}
	for _, tc := range []struct {
		name  string
		cache fixedCache
		want  []string
	}{
		{"filled", fixedCache{onlyCached, true}, []string{"Deployment vllm-inference-jcache03 running", "Job only-cached running"}},
		{"filled and empty", fixedCache{[]*batchv1.Job{}, true}, []string{"Deployment vllm-inference-jcache03 running"}},
		{"not filled", fixedCache{onlyCached, false}, want},
	} {
		got, err := mine(k.Objects(tc.cache).Managed(ctx))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(described(got), tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, described(got), tc.want)
		}
	}
}

// fixedCache is a JobCache holding the Jobs it is given.
type fixedCache struct {
	jobs   []*batchv1.Job
	filled bool
}

func (c fixedCache) Jobs() ([]*batchv1.Job, bool) { return c.jobs, c.filled }

// TestVMValidatedByTheAPIServer: a rendered VirtualMachine is accepted by the
// API server under KubeVirt's schema, and one that breaks the schema is
// refused, naming the field.
func TestVMValidatedByTheAPIServer(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	if err := k.EnsureNamespace(ctx, "gantry-vms", "vms"); err != nil {
		t.Fatal(err)
	}
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKubeTestKey0000000000000000000000000000 bob@host"
	objs := rendered(t, "gpu-vm", "vm000001", "vms", template.Choice{Params: map[string]any{"sshPublicKey": key}})
	if err := k.Apply(ctx, objs); err != nil {
		t.Fatalf("a rendered VM was refused: %v", err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(objs[0])
	if err != nil {
		t.Fatal(err)
	}
	bad := &unstructured.Unstructured{Object: m}
	bad.SetName("gpu-vm-vm000002")
	unstructured.SetNestedField(bad.Object, "eight", "spec", "template", "spec", "domain", "cpu", "cores")
	err = k.Apply(ctx, []render.Object{bad})
	var inv *fault.Invalid
	if !errors.As(err, &inv) || !strings.Contains(inv.Fields[0].Path, "spec.template.spec.domain.cpu.cores") {
		t.Fatalf("err = %v, want *fault.Invalid naming spec.template.spec.domain.cpu.cores", err)
	}
}

// TestNamespaceDeletedBehindGantrysBack: the namespace a Cluster applied once
// is not asked for again, but when it was deleted meanwhile the next apply
// makes it again (with its Pod Security labels) instead of failing the launch.
func TestNamespaceDeletedBehindGantrysBack(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	if err := k.EnsureNamespace(ctx, "gantry-nsgone", "nsgone"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.CoreV1().Namespaces().Delete(ctx, "gantry-nsgone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, func() error {
		_, err := cluster.Client.CoreV1().Namespaces().Get(ctx, "gantry-nsgone", metav1.GetOptions{})
		return err
	})
	if err := k.EnsureNamespace(ctx, "gantry-nsgone", "nsgone"); err != nil { // remembered: no request
		t.Fatal(err)
	}
	if err := k.Apply(ctx, rendered(t, "vllm-inference", "nsgone01", "nsgone", template.Choice{})); err != nil {
		t.Fatalf("apply into a namespace deleted behind Gantry's back: %v", err)
	}
	ns, err := cluster.Client.CoreV1().Namespaces().Get(ctx, "gantry-nsgone", metav1.GetOptions{})
	if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("namespace after apply: %v %v", ns.Labels, err)
	}
}

// TestSpotEviction: a spot job's pod evicted through the Eviction API (as a
// drain or a reclaimed spot node does) carries DisruptionTarget; the watcher
// reports its UID, and the Job — whose pod failure policy ignores
// disruptions — starts a new pod instead of failing (with no retries left).
func TestSpotEviction(t *testing.T) {
	k := need(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k.EnsureNamespace(ctx, "gantry-spot", "spot"); err != nil {
		t.Fatal(err)
	}
	w, err := k.Watcher(0)
	if err != nil {
		t.Fatal(err)
	}
	evicted := make(chan []string, 100)
	if err := w.OnChange(func(id string) {
		if o, ok := w.Observe(id); ok && id == "spot0001" && len(o.Evicted) > 0 {
			evicted <- o.Evicted
		}
	}); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); w.Shutdown() }()
	if !w.Run(ctx) {
		t.Fatal("caches did not fill")
	}
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	var tpl *template.Template
	for _, f := range files {
		if f.Template.Metadata.Name == "pytorch-train" {
			tpl = f.Template
		}
	}
	tpl.Spec.Scheduling.Spot = true
	r, err := tpl.Resolve(classes, template.Choice{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Objects(r, render.Meta{WorkloadID: "spot0001", Team: "spot", Owner: "alice@example.com", Namespace: "gantry-spot", TemplateVersion: 1,
		Image: "registry.gantry.internal/test/image@sha256:" + strings.Repeat("1", 64)})
	if err != nil {
		t.Fatal(err)
	}
	job := objs[len(objs)-2].(*batchv1.Job)
	job.Spec.Template.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = "300s"
	if job.Spec.PodFailurePolicy == nil {
		t.Fatal("a spot job without a pod failure policy")
	}
	job.Spec.BackoffLimit = ptr(int32(0)) // any counted failure would fail it
	if err := k.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: "gantry.dev/workload-id=spot0001"}
	var first corev1.Pod
	waitfor.Until(t, time.Minute, "the job's pod to run", func() error {
		pods, _ := cluster.Client.CoreV1().Pods("gantry-spot").List(ctx, sel)
		if len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning {
			first = pods.Items[0]
			return nil
		}
		return errors.New("not running")
	})
	if err := cluster.Client.CoreV1().Pods("gantry-spot").EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: first.Name, Namespace: "gantry-spot"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case uids := <-evicted:
		if len(uids) != 1 || uids[0] != string(first.UID) {
			t.Fatalf("evicted %v, want [%s]", uids, first.UID)
		}
	case <-time.After(time.Minute):
		t.Fatal("the eviction was not observed")
	}
	waitfor.Until(t, time.Minute, "a new pod for the job", func() error {
		pods, _ := cluster.Client.CoreV1().Pods("gantry-spot").List(ctx, sel)
		for _, p := range pods.Items {
			if p.UID != first.UID && p.DeletionTimestamp == nil {
				return nil
			}
		}
		j, _ := cluster.Client.BatchV1().Jobs("gantry-spot").Get(ctx, job.Name, metav1.GetOptions{})
		return fmt.Errorf("no new pod; job status %+v", j.Status)
	})
	// The informer's cache catches up with the API server (the new pod may
	// be listed there before it is seen here); the job never fails.
	waitfor.Until(t, 30*time.Second, "the job observed running again", func() error {
		o, ok := w.Observe("spot0001")
		if o.Phase == "Failed" {
			t.Fatalf("after the eviction the job failed: %s", o.Reason)
		}
		if !ok || o.Phase == "" {
			return fmt.Errorf("observed %q (%v)", o.Phase, ok)
		}
		return nil
	})
}
