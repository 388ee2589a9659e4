package karpenter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/internal/capreplay"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/forecast"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/kube/karpenter"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/waitfor"
)

var cluster *devcluster.Cluster

// podsReady is how long Kueue gives an admitted workload's pods to be all
// Ready before it evicts it (all-or-nothing).
const podsReady = 15 * time.Second

// groups are the H100 groups of the local cluster's fleet (h100-reserved,
// two nodes of 8 GPUs) with one on-demand machine and one spot machine that
// boot in 2 s and go after 5 s empty.
var groups = []nodegroup.Group{
	{Name: "h100-reserved", Class: "H100-80GB", Purchase: nodegroup.Reserved, GPUsPerNode: 8, Min: 2, Max: 2, PricePerNodeHour: 38},
	{Name: "h100-on-demand", Class: "H100-80GB", Purchase: nodegroup.OnDemand, GPUsPerNode: 8, Max: 1, PricePerNodeHour: 55.2,
		BootTime: config.Duration(2 * time.Second), QuietTime: config.Duration(5 * time.Second)},
	{Name: "h100-spot", Class: "H100-80GB", Purchase: nodegroup.Spot, GPUsPerNode: 8, Max: 1, PricePerNodeHour: 36,
		BootTime: config.Duration(2 * time.Second), QuietTime: config.Duration(5 * time.Second)},
	// Its machines take an hour to boot: one asked for stays booting for
	// the whole run.
	{Name: "h200-slow", Class: "H200-141GB", Purchase: nodegroup.OnDemand, GPUsPerNode: 8, Max: 1, PricePerNodeHour: 72,
		BootTime: config.Duration(time.Hour)},
}

func TestMain(m *testing.M) {
	clustertest.Main(m, "karpenter", &cluster, clustertest.Hooks{Options: func(o *devcluster.Options) {
		o.NodeGroups, o.WaitForPodsReady = groups, podsReady
	}})
}

func need(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
}

// pools watches the groups' machines for the test.
func pools(t *testing.T) *karpenter.Pools {
	t.Helper()
	classes, err := gpu.LoadFile("../../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind, Groups: groups}, classes.Names())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	p, err := karpenter.NewPools(karpenter.PoolsOptions{Core: cluster.Client, Dynamic: dyn, NodeGroups: set, Classes: classes, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); p.Shutdown() })
	if !p.Start(ctx, ctx) {
		t.Fatal("informers did not sync")
	}
	return p
}

// explains waits until the pool watcher says of a pod what want holds.
func explains(t *testing.T, p *karpenter.Pools, name, want string) {
	t.Helper()
	waitfor.Until(t, 2*time.Minute, "the wait reason of "+name, func() error {
		pod, err := cluster.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if r, ok := p.Explain(pod); !ok || !strings.Contains(r, want) {
			return fmt.Errorf("said %q (%v)", r, ok)
		}
		return nil
	})
}

// gpuPod asks for gpus whole H100 GPUs, on spot machines or not, as a
// rendered Gantry pod does (product affinity, GPU toleration).
func gpuPod(name string, gpus int, spot bool) *corev1.Pod {
	return classPod(name, []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"}, gpus, spot)
}

func classPod(name string, products []string, gpus int, spot bool) *corev1.Pod {
	terms := []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: products}}
	tol := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if spot {
		tol = append(tol, corev1.Toleration{Key: "gantry.dev/spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule})
		terms = append(terms, corev1.NodeSelectorRequirement{Key: karpenter.CapacityTypeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}})
	} else {
		terms = append(terms, corev1.NodeSelectorRequirement{Key: karpenter.CapacityTypeLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"spot"}})
	}
	res := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(gpus), resource.DecimalSI)}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "main", Image: "example.com/train:1", Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
			Tolerations: tol,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: terms}}}}},
		},
	}
}

func groupNodes(ctx context.Context, t *testing.T, group string) []corev1.Node {
	t.Helper()
	l, err := cluster.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: karpenter.GroupLabel + "=" + group})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestScaleUpRunAndScaleDown: an 8-GPU pod that the reserved machines cannot
// hold makes Karpenter boot an on-demand machine, labelled and priced as its
// group, and it runs there; a second finds the group at its max and waits;
// once the pods are gone the machine goes within its quiet time and a loop.
func TestScaleUpRunAndScaleDown(t *testing.T) {
	need(t)
	ctx := context.Background()
	pods := cluster.Client.CoreV1().Pods("default")
	// Its pods go however it ends: a failure here must not leave the next
	// test a cluster already full (CI r161: one timeout failed three).
	t.Cleanup(func() {
		for _, name := range []string{"wait", "grow", "fill-0", "fill-1"} {
			_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	})
	// While the group is meant to be at its max, Karpenter may not remove
	// its machine: one found empty for its 5 s quiet time before grow's
	// pod bound (the scheduler's backoff, on a starved machine) is marked
	// for removal, stops counting against the max, and a second one boots
	// for the next pod (CI r164, a cold run: wait ran within the minute).
	holdMachines(ctx, t, "h100-on-demand", true)
	t.Cleanup(func() { holdMachines(context.Background(), t, "h100-on-demand", false) })
	for i := range 2 { // the reserved machines, full
		if _, err := pods.Create(ctx, gpuPod(fmt.Sprintf("fill-%d", i), 8, false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pods.Create(ctx, gpuPod("grow", 8, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	t.Cleanup(func() {
		if t.Failed() {
			karpenterSays(t, "h100-on-demand", node)
		}
	})
	waitfor.Until(t, 2*time.Minute, "the pod running on a new on-demand machine", func() error {
		p, err := pods.Get(ctx, "grow", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s on %q", p.Status.Phase, p.Spec.NodeName)
		}
		node = p.Spec.NodeName
		return nil
	})
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[karpenter.GroupLabel] != "h100-on-demand" || n.Labels["karpenter.sh/capacity-type"] != "on-demand" || n.Labels["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" {
		t.Fatalf("the pod runs on %s, labelled %v", node, n.Labels)
	}
	if _, err := pods.Create(ctx, gpuPod("wait", 8, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The group is at its max: no machine beyond it, the pod Pending.
	waitfor.Until(t, time.Minute, "the pod seen unschedulable", func() error {
		p, err := pods.Get(ctx, "wait", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return nil
			}
		}
		// Where it went, if it went anywhere (CI r164, a cold run: it ran
		// within the minute, the test said no more).
		where := ""
		if p.Spec.NodeName != "" {
			n, err := cluster.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err == nil {
				where = fmt.Sprintf(" on %s (group %q, capacity type %q, created %s)", n.Name, n.Labels[karpenter.GroupLabel], n.Labels["karpenter.sh/capacity-type"], n.CreationTimestamp.Format(time.TimeOnly))
			}
			where += fmt.Sprintf("; on-demand machines %d, reserved %d", len(groupNodes(ctx, t, "h100-on-demand")), len(groupNodes(ctx, t, "h100-reserved")))
			// And where grow is (r168: wait ran on the group's one machine,
			// made after grow had started on one).
			if g, err := pods.Get(ctx, "grow", metav1.GetOptions{}); err != nil {
				where += fmt.Sprintf("; grow: %v", err)
			} else {
				where += fmt.Sprintf("; grow %s on %s (deleting %v)", g.Status.Phase, g.Spec.NodeName, g.DeletionTimestamp != nil)
			}
		}
		return fmt.Errorf("pod %s%s", p.Status.Phase, where)
	})
	if got := groupNodes(ctx, t, "h100-on-demand"); len(got) != 1 {
		t.Fatalf("%d on-demand machines, max 1", len(got))
	}
	explains(t, pools(t), "wait", "node group h100-on-demand at its max (1 of 1 nodes); node group h100-reserved at its max (2 of 2 nodes): waiting for running work to end")
	holdMachines(ctx, t, "h100-on-demand", false)
	for _, name := range []string{"wait", "grow", "fill-0", "fill-1"} {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.Until(t, 2*time.Minute, "the empty on-demand machine gone", func() error {
		if got := groupNodes(ctx, t, "h100-on-demand"); len(got) > 0 {
			return fmt.Errorf("%d machines", len(got))
		}
		return nil
	})
	if got := groupNodes(ctx, t, "h100-reserved"); len(got) != 2 {
		t.Fatalf("%d reserved machines, want 2 (never scaled down)", len(got))
	}
}

// karpenterSays logs the last lines of Karpenter's log that name any of
// names (a group, a machine): what it did with them, for a failed test.
func karpenterSays(t *testing.T, names ...string) {
	t.Helper()
	data, err := os.ReadFile(cluster.KarpenterLog())
	if err != nil {
		t.Logf("Karpenter's log: %v", err)
		return
	}
	var lines []string
	for line := range strings.Lines(string(data)) {
		for _, n := range names {
			if n != "" && strings.Contains(line, n) {
				lines = append(lines, strings.TrimSpace(line))
				break
			}
		}
	}
	for _, l := range lines[max(0, len(lines)-25):] {
		t.Logf("karpenter: %.400s", l)
	}
}

// holdMachines sets the group's NodePool's disruption budget to no machine
// removed at a time (hold), or takes it off again (Karpenter's default, a
// tenth of the machines). The budget is not part of the NodePool's hash, so
// no machine is replaced for it.
func holdMachines(ctx context.Context, t *testing.T, group string, hold bool) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	patch := `{"spec":{"disruption":{"budgets":null}}}`
	if hold {
		patch = `{"spec":{"disruption":{"budgets":[{"nodes":"0"}]}}}`
	}
	if _, err := dyn.Resource(karpenter.NodePools).Patch(ctx, group, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("NodePool %s's disruption budget (hold %v): %v", group, hold, err)
	}
}

// TestWaitsForABootingMachine: a pod that needs a machine still booting is
// told which group's, how long ago it was asked for and how long one
// typically takes.
func TestWaitsForABootingMachine(t *testing.T) {
	need(t)
	ctx := context.Background()
	pods := cluster.Client.CoreV1().Pods("default")
	h200 := []string{"NVIDIA-H200", "NVIDIA-H200-NVL"}
	for _, name := range []string{"h200-fill", "h200-more"} { // the fleet's H200 node, then one more
		if _, err := pods.Create(ctx, classPod(name, h200, 8, false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}) })
	}
	explains(t, pools(t), "h200-more", "waiting for capacity: scale-up of 1 × h200-slow node (8 GPUs each) requested ")
	explains(t, pools(t), "h200-more", "(typical boot 1h)")
}

// TestWatcherSaysWhyAWorkloadWaits: through Gantry's own cluster adapter —
// the node groups' watch running as every replica runs it, the leader's
// watcher observing a workload's pod — a workload waiting for a booting
// machine says so, and the groups' states say the machine is booting.
func TestWatcherSaysWhyAWorkloadWaits(t *testing.T) {
	need(t)
	classes, err := gpu.LoadFile("../../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind, Groups: groups}, classes.Names())
	if err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(cluster.Config(), kube.Options{NodeGroups: set, Classes: classes})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.RunPools(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	w, err := c.Watcher(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.OnChange(func(string) {}); err != nil {
		t.Fatal(err)
	}
	if !w.Run(ctx) {
		t.Fatal("the watcher's caches did not fill")
	}
	t.Cleanup(func() { cancel(); w.Shutdown() })
	pods := cluster.Client.CoreV1().Pods("default")
	h200 := []string{"NVIDIA-H200", "NVIDIA-H200-NVL"}
	for i, name := range []string{"watched-fill", "watched-wait"} {
		p := classPod(name, h200, 8, false)
		p.Labels = map[string]string{render.LabelManagedBy: render.ManagedBy, render.LabelWorkloadID: fmt.Sprintf("wl%d", i)}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}) })
	}
	// The groups' states come from their own watch (RunPools), which may
	// finish filling after the watcher has seen the pod: wait for both.
	var states []nodegroup.PoolState
	waitfor.Until(t, time.Minute, "the waiting workload's reason and the groups' states", func() error {
		o, ok := w.Observe("wl1")
		if !ok || o.Phase != "Pending" || !strings.HasPrefix(o.Reason, "waiting for capacity: scale-up of 1 × h200-slow node") {
			return fmt.Errorf("observed %+v (%v)", o, ok)
		}
		if states, ok = c.States(); !ok {
			return errors.New("no states: the groups' watch has not filled")
		}
		return nil
	})
	for _, s := range states {
		if s.Group.Name == "h200-slow" && (s.Booting != 1 || s.Nodes != 0) {
			t.Fatalf("h200-slow: %d booting, %d nodes; want the one machine booting", s.Booting, s.Nodes)
		}
	}
}

// TestGangGivesItsQuotaBack: Karpenter cannot be asked whether a whole gang
// fits (Kueue's ProvisioningRequest check speaks to the cluster-autoscaler
// only), so admission is all-or-nothing in time: a Job of two 8-GPU pods
// that Kueue admits but the cluster can place only half of (one H200
// machine free, the group's one more booting for an hour) is evicted once
// its pods are not all Ready within the timeout — its quota given back and
// its pods removed — and queued again after a backoff, rather than holding
// a machine half used.
func TestGangGivesItsQuotaBack(t *testing.T) {
	need(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gang", Labels: map[string]string{render.LabelManagedBy: render.ManagedBy}}}
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kueueObj := func(resource string, obj map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: obj}
		gvr := schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: resource}
		var err error
		if u.GetNamespace() != "" {
			_, err = dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
		} else {
			_, err = dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	kueueObj("resourceflavors", map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": map[string]any{"name": "gang"}})
	kueueObj("clusterqueues", map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": map[string]any{"name": "gang"},
		"spec": map[string]any{"namespaceSelector": map[string]any{}, "resourceGroups": []any{map[string]any{
			"coveredResources": []any{"gantry.dev/gpu-milli", "cpu"}, // Kueue counts CPU too (as Gantry's queues do)
			"flavors": []any{map[string]any{"name": "gang", "resources": []any{map[string]any{"name": "gantry.dev/gpu-milli", "nominalQuota": "100000"},
				map[string]any{"name": "cpu", "nominalQuota": "1000000"}}}},
		}}}})
	kueueObj("localqueues", map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": map[string]any{"name": "gang", "namespace": "gang"},
		"spec": map[string]any{"clusterQueue": "gang"}})
	pod := classPod("x", []string{"NVIDIA-H200", "NVIDIA-H200-NVL"}, 8, false).Spec
	pod.RestartPolicy = corev1.RestartPolicyNever
	two := int32(2)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: "gang", Labels: map[string]string{"kueue.x-k8s.io/queue-name": "gang"}},
		Spec: batchv1.JobSpec{Parallelism: &two, Completions: &two, Suspend: ptr(true), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1h"}},
			Spec:       pod,
		}},
	}
	waitfor.Until(t, time.Minute, "the Job created (Kueue's queues known)", func() error {
		_, err := cluster.Client.BatchV1().Jobs("gang").Create(ctx, job, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		cluster.Client.BatchV1().Jobs("gang").Delete(context.Background(), "gang", metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)})
	})
	workloads := schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	waitfor.Until(t, 2*time.Minute, "the gang evicted for its pods not all Ready, and queued again", func() error {
		l, err := dyn.Resource(workloads).Namespace("gang").List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return fmt.Errorf("%d Kueue Workloads, %v", len(l.Items), err)
		}
		count, _, _ := unstructured.NestedInt64(l.Items[0].Object, "status", "requeueState", "count")
		if count < 1 {
			conds, _, _ := unstructured.NestedSlice(l.Items[0].Object, "status", "conditions")
			return fmt.Errorf("not requeued yet: %v", conds)
		}
		conds, _, _ := unstructured.NestedSlice(l.Items[0].Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["reason"] == "PodsReadyTimeout" {
				return nil
			}
		}
		return fmt.Errorf("requeued, but no condition says PodsReadyTimeout: %v", conds)
	})
}

func ptr[T any](v T) *T { return &v }

// TestSpotMachineTakenBack: a spot machine that goes away (here deleted, as
// a provider's interruption does through Karpenter: its termination drains
// the node by eviction, which marks the pod DisruptionTarget) does not fail
// the Job that Gantry renders for spot (its pod failure policy ignores
// disruptions): the Job starts its pod again, on a new spot machine
// Karpenter boots for it.
func TestSpotMachineTakenBack(t *testing.T) {
	need(t)
	ctx := context.Background()
	pod := gpuPod("x", 8, true).Spec
	pod.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "spot", Namespace: "default"},
		Spec: batchv1.JobSpec{BackoffLimit: ptr(int32(0)), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "spot"}, Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1h"}},
			Spec:       pod,
		}, PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action:          batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
		}}}},
	}
	jobs := cluster.Client.BatchV1().Jobs("default")
	if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		jobs.Delete(context.Background(), "spot", metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)})
	})
	running := func(what string, not string) (uid, node string) {
		t.Helper()
		waitfor.Until(t, 2*time.Minute, what, func() error {
			l, err := cluster.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "job=spot"})
			if err != nil {
				return err
			}
			for _, p := range l.Items {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.NodeName != not {
					n, err := cluster.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
					if err != nil {
						return err
					}
					if n.Labels[karpenter.GroupLabel] != "h100-spot" {
						return fmt.Errorf("running on %s of group %q", n.Name, n.Labels[karpenter.GroupLabel])
					}
					uid, node = string(p.UID), p.Spec.NodeName
					return nil
				}
			}
			return fmt.Errorf("%d pods, none running beyond %q", len(l.Items), not)
		})
		return uid, node
	}
	first, node := running("the Job's pod on a spot machine", "")
	if err := cluster.Client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second, _ := running("the Job's pod again, on a new spot machine", node)
	if second == first {
		t.Fatalf("the same pod %s", first)
	}
	j, err := jobs.Get(ctx, "spot", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			t.Fatalf("the Job failed: %s", c.Message)
		}
	}
}

// TestWarmMachineTakenByWork: placeholders held warm in the on-demand group
// make Karpenter boot a machine for them; a workload pod of normal priority
// that finds the reserved machines full preempts them and runs on that
// machine at once (the group's max is one machine: no other could have been
// booted for it); let go, the placeholders' Deployment asks for none.
func TestWarmMachineTakenByWork(t *testing.T) {
	need(t)
	ctx := context.Background()
	pods := cluster.Client.CoreV1().Pods("default")
	g := groups[1] // h100-on-demand, one machine at most
	ph, err := karpenter.NewPlaceholders(cluster.Client, "default")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cluster.Client.AppsV1().Deployments("default").Delete(context.Background(), karpenter.WarmName(g.Name), metav1.DeleteOptions{})
		for _, name := range []string{"work", "fill-0", "fill-1"} {
			pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		waitfor.Until(t, 2*time.Minute, "the on-demand machine gone", func() error {
			if got := groupNodes(context.Background(), t, g.Name); len(got) > 0 {
				return fmt.Errorf("%d machines", len(got))
			}
			return nil
		})
	})
	for i := range 2 { // the reserved machines, full, with work no one preempts
		p := gpuPod(fmt.Sprintf("fill-%d", i), 8, false)
		p.Spec.PriorityClassName = "gantry-high"
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Now().UTC()
	if err := ph.Hold(ctx, g, 8, at); err != nil {
		t.Fatal(err)
	}
	if h, err := ph.Held(ctx, g.Name); err != nil || h.Asked != 8 || !h.Since.Equal(at) {
		t.Fatalf("held %+v (%v), want 8 asked since %v", h, err, at)
	}
	if names, err := ph.Warming(ctx); err != nil || len(names) != 1 || names[0] != g.Name {
		t.Fatalf("warming %v (%v)", names, err)
	}
	warm := func() ([]corev1.Pod, error) {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: karpenter.WarmLabel + "=" + g.Name})
		return l.Items, err
	}
	var machine string
	waitfor.Until(t, 2*time.Minute, "8 placeholders running on a warm on-demand machine", func() error {
		ps, err := warm()
		if err != nil {
			return err
		}
		running := 0
		for _, p := range ps {
			if p.Status.Phase == corev1.PodRunning {
				running, machine = running+1, p.Spec.NodeName
			}
		}
		if running != 8 {
			return fmt.Errorf("%d of %d running", running, len(ps))
		}
		return nil
	})
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, machine, metav1.GetOptions{})
	if err != nil || n.Labels[karpenter.GroupLabel] != g.Name {
		t.Fatalf("placeholders on %s (%v): %v", machine, err, n.Labels)
	}
	waitfor.Until(t, time.Minute, "the Deployment to count 8 running", func() error {
		if h, err := ph.Held(ctx, g.Name); err != nil || h.Running != 8 {
			return fmt.Errorf("held %+v (%v)", h, err)
		}
		return nil
	})
	work := gpuPod("work", 8, false)
	work.Spec.PriorityClassName = "gantry-normal"
	if _, err := pods.Create(ctx, work, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 2*time.Minute, "the work running on the warm machine", func() error {
		p, err := pods.Get(ctx, "work", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s on %q", p.Status.Phase, p.Spec.NodeName)
		}
		if p.Spec.NodeName != machine {
			return fmt.Errorf("on %s, not the warm machine %s", p.Spec.NodeName, machine)
		}
		return nil
	})
	if got := groupNodes(ctx, t, g.Name); len(got) != 1 {
		t.Fatalf("%d on-demand machines, want the warm one only", len(got))
	}
	if err := ph.Release(ctx, g.Name); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the placeholders gone", func() error {
		ps, err := warm()
		if err == nil && len(ps) > 0 {
			err = fmt.Errorf("%d placeholders", len(ps))
		}
		return err
	})
}

// TestCapacityReplay: a trace replayed ten times faster than it ran, onto
// the on-demand group: reactive, its one pod waits for a machine Karpenter
// boots and runs on it; ahead of a forecast that has seen the same 8 GPUs
// arrive at that time on each of ten days, placeholders warm the machine
// first (warm GPU-hours charged) and the pod runs on it. Both measure the
// machine-hours paid and used on the replay's clock.
func TestCapacityReplay(t *testing.T) {
	need(t)
	ctx := context.Background()
	classes, err := gpu.LoadFile("../../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	from := time.Unix(30*86400, 0).UTC()
	var trace []forecast.Record
	// The pod arrives 2 minutes in (12 s real): long enough for the warm
	// machine to boot and its placeholders to run through a charged pass
	// first, however slow the machine; it stays 90 s (9 s real), long
	// enough for a reactive boot.
	for d := 10; d >= 1; d-- {
		at := from.Add(2*time.Minute - time.Duration(d)*24*time.Hour)
		trace = append(trace, forecast.Record{Created: at, Ended: at.Add(10 * time.Minute), GPUs: 8})
	}
	trace = append(trace, forecast.Record{Created: from.Add(2 * time.Minute), Ended: from.Add(3*time.Minute + 30*time.Second), GPUs: 8})
	// The group in the trace's time: its machines boot in 20 s (2 s real).
	g := groups[1]
	g.BootTime, g.WarmPerDay = config.Duration(20*time.Second), 1000
	for _, ahead := range []bool{false, true} {
		r, err := capreplay.Run(ctx, capreplay.Options{Core: cluster.Client, Dynamic: dyn, Trace: trace, From: from, Span: 4 * time.Minute,
			Compress: 10, Group: g, Classes: classes, Ahead: ahead, WarmInterval: time.Minute, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if r.Pods != 1 || r.Placed != 1 || r.Machines != 1 || r.UsedGPUHours <= 0 || r.PaidGPUHours < r.UsedGPUHours || r.PartialGangs != 0 {
			t.Errorf("%s: %+v, want its pod placed on the one machine, paid at least what it used", r.Policy, r)
		}
		if (r.WarmGPUHours > 0) != ahead {
			t.Errorf("%s: %v warm GPU-hours", r.Policy, r.WarmGPUHours)
		}
		if ahead {
			break // the last: the cluster goes with the package
		}
		// Clean up for the next run: the replay's pods and placeholders
		// gone, and with them the machine.
		if err := cluster.Client.CoreV1().Pods(capreplay.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cluster.Client.AppsV1().Deployments(capreplay.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		waitfor.Until(t, 2*time.Minute, "the on-demand machine and its NodeClaim gone", func() error {
			if got := groupNodes(ctx, t, g.Name); len(got) > 0 {
				return fmt.Errorf("%d machines", len(got))
			}
			claims, err := dyn.Resource(karpenter.NodeClaims).List(ctx, metav1.ListOptions{LabelSelector: karpenter.NodePoolLabel + "=" + g.Name})
			if err == nil && len(claims.Items) > 0 {
				err = fmt.Errorf("%d NodeClaims", len(claims.Items))
			}
			return err
		})
	}
}

// TestNodeGroupEditReachesItsNodePool: a change of a group's max and quiet
// time (the platform team's edit, laid over the groups) is written into its
// NodePool's limits and consolidateAfter, leaving the rest of the NodePool
// as it was; a group without a NodePool is named. The NodePool goes back to the file's at the end.
func TestNodeGroupEditReachesItsNodePool(t *testing.T) {
	need(t)
	ctx := context.Background()
	classes, err := gpu.LoadFile("../../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind, Groups: groups}, classes.Names())
	if err != nil {
		t.Fatal(err)
	}
	live := &nodegroup.Set{}
	live.Replace(file)
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	sizes, err := karpenter.NewSizes(dyn, live, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	pool := func() *unstructured.Unstructured {
		u, err := dyn.Resource(karpenter.NodePools).Get(ctx, "h200-slow", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	before := pool()
	t.Cleanup(func() {
		live.Replace(file)
		if err := sizes.Sync(ctx); err != nil {
			t.Errorf("back to the file's: %v", err)
		}
	})
	two, quiet := 2, 90
	changed, err := file.With(map[string]nodegroup.Change{"h200-slow": {Max: &two, QuietTimeSeconds: &quiet}}, classes.Names())
	if err != nil {
		t.Fatal(err)
	}
	live.Replace(changed)
	if err := sizes.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	after := pool()
	limit, _, _ := unstructured.NestedString(after.Object, "spec", "limits", "nvidia.com/gpu")
	after2, _, _ := unstructured.NestedString(after.Object, "spec", "disruption", "consolidateAfter")
	policy, _, _ := unstructured.NestedString(after.Object, "spec", "disruption", "consolidationPolicy")
	if limit != "16" || after2 != "1m30s" || policy != "WhenEmpty" {
		t.Fatalf("the NodePool: limits %q, consolidateAfter %q, policy %q", limit, after2, policy)
	}
	tmplBefore, _, _ := unstructured.NestedMap(before.Object, "spec", "template")
	tmplAfter, _, _ := unstructured.NestedMap(after.Object, "spec", "template")
	if fmt.Sprint(tmplBefore) != fmt.Sprint(tmplAfter) {
		t.Fatalf("the template changed:\n%v\n%v", tmplBefore, tmplAfter)
	}
	// A group the cluster has no NodePool for.
	extra, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind,
		Groups: append(changed.List(), nodegroup.Group{Name: "l4-nowhere", Class: "L4", Purchase: nodegroup.OnDemand, GPUsPerNode: 4, Max: 1})}, classes.Names())
	if err != nil {
		t.Fatal(err)
	}
	live.Replace(extra)
	if err := sizes.Sync(ctx); err == nil || !strings.Contains(err.Error(), "node group l4-nowhere: no NodePool") {
		t.Fatalf("a group without a NodePool: %v", err)
	}
}
