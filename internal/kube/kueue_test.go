package kube_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/kube/watch"
	"github.com/gantryhq/gantry/internal/quota"
	gteam "github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

// queueTest is a Kueue-aware Cluster with its watcher running.
type queueTest struct {
	t *testing.T
	k *kube.Cluster
	w *watch.Watcher
}

// starterPriorities are the template priorities the tests' queues use.
var starterPriorities = []quota.Priority{{Name: "low", Value: 1000}, {Name: "normal", Value: 10000}, {Name: "high", Value: 100000}}

// kueueCluster is a Kueue-aware Cluster on the package's cluster and the
// starter GPU classes; without a cluster the test is skipped.
func kueueCluster(t *testing.T) (*kube.Cluster, *gpu.Catalog) {
	t.Helper()
	if cluster == nil {
		t.Skip("no cluster")
	}
	k, err := kube.New(cluster.Config(), kube.Options{Kueue: true})
	if err != nil {
		t.Fatal(err)
	}
	classes, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return k, classes
}

func newQueueTest(t *testing.T, quotas map[string]quota.Quota) *queueTest {
	t.Helper()
	k, classes := kueueCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	if err := k.Kueue().SyncQuotas(ctx, quota.Objects(classes, quotas, starterPriorities, quota.Options{})); err != nil {
		t.Fatal(err)
	}
	for team := range quotas {
		if err := k.EnsureNamespace(ctx, "gantry-"+team, gteam.Name(team)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := k.Watcher(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.OnChange(func(string) {}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); w.Shutdown() }) // informers stop with ctx
	if !w.Run(ctx) {
		t.Fatal("caches did not fill")
	}
	return &queueTest{t: t, k: k, w: w}
}

// launch applies a queued starter template whose pods run for an hour.
func (q *queueTest) launch(name, id, team string, choice template.Choice) {
	q.t.Helper()
	objs := renderedWith(q.t, name, id, team, choice, true)
	for _, o := range objs {
		if j, ok := o.(*batchv1.Job); ok {
			j.Spec.Template.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = "1h"
		}
	}
	if err := q.k.Apply(context.Background(), objs); err != nil {
		q.t.Fatal(err)
	}
}

// phases waits until the workloads are observed in these phases.
func (q *queueTest) phases(want map[string]string) map[string]watch.Observation {
	q.t.Helper()
	got := map[string]watch.Observation{}
	waitfor.Until(q.t, 90*time.Second, fmt.Sprintf("phases %v", want), func() error {
		for id, phase := range want {
			o, ok := q.w.Observe(id)
			if !ok || string(o.Phase) != phase {
				return fmt.Errorf("%s: %q (%s), want %s", id, o.Phase, o.Reason, phase)
			}
			got[id] = o
		}
		return nil
	})
	return got
}

// TestKueueCoresQuota: a team's quota of cores (quota.cores) holds its
// CPU-only jobs in the CPU nodes' flavor: with one core, a job asking for
// two waits Queued with Kueue's reason naming cpu — even in a cohort whose
// other team's cores are unbounded — while one asking for one is admitted.
// (A GPU job's CPU counts against no bound: every other queue test of this
// package runs on this Kueue, which counts CPU. No GPU job here: its pod
// would hold an H100 of the package's cluster for an hour.)
func TestKueueCoresQuota(t *testing.T) {
	one := 1.0
	// In a cohort with a team whose cores are unbounded: a bound borrows none.
	q := newQueueTest(t, map[string]quota.Quota{"cores": {GPUs: map[string]float64{"H100-80GB": 1}, Cores: &one, Cohort: "cores"}, "lender": {Cohort: "cores"}})
	q.launch("cpu-job", "co000001", "cores", template.Choice{CPUOnly: true, Params: map[string]any{"cpu": "2"}})
	waitfor.Until(t, 90*time.Second, "the two-core job held, Kueue's reason naming cpu in "+quota.CPUFlavor, func() error {
		if o, _ := q.w.Observe("co000001"); o.Phase != "Queued" || !strings.Contains(o.Reason, "cpu") || !strings.Contains(o.Reason, quota.CPUFlavor) {
			return fmt.Errorf("%q (%s)", o.Phase, o.Reason)
		}
		return nil
	})
	q.launch("cpu-job", "co000003", "cores", template.Choice{CPUOnly: true, Params: map[string]any{"cpu": "1"}})
	waitfor.Until(t, 90*time.Second, "the one-core job admitted", func() error {
		if o, ok := q.w.Observe("co000003"); !ok || o.Phase == "Queued" || o.Phase == "" {
			return fmt.Errorf("%q (%s)", o.Phase, o.Reason)
		}
		return nil
	})
	if o, _ := q.w.Observe("co000001"); o.Phase != "Queued" {
		t.Errorf("the two-core job: %q, want still Queued", o.Phase)
	}
	// What an estimate reads: the one core admitted in the CPU nodes'
	// flavor, the two-core job waiting; no GPU of the team's H100s.
	waitfor.Until(t, 30*time.Second, "the ClusterQueue's cores in use", func() error {
		cores, pending, err := q.k.QueueUsage(context.Background(), "cores", gpu.CPUClass)
		if err != nil || cores != 1 || pending != 1 {
			return fmt.Errorf("cores %v, pending %d, %v", cores, pending, err)
		}
		if gpus, _, err := q.k.QueueUsage(context.Background(), "cores", "H100-80GB"); err != nil || gpus != 0 {
			return fmt.Errorf("H100s %v, %v", gpus, err)
		}
		return nil
	})
}

// TestKueueAdmitsUpToTheQuota: a team with 2 H100s runs two one-GPU jobs
// and queues the third (Queued, position 1, with Kueue's reason); stopping a
// running job frees its quota and the queued one runs; starting the stopped
// one queues it again.
func TestKueueAdmitsUpToTheQuota(t *testing.T) {
	q := newQueueTest(t, map[string]quota.Quota{"qa": {GPUs: map[string]float64{"H100-80GB": 2}}})
	h100 := template.Choice{Class: "H100-80GB", Count: 1}
	q.launch("pytorch-train", "qa000001", "qa", h100)
	q.launch("pytorch-train", "qa000002", "qa", h100)
	q.phases(map[string]string{"qa000001": "Running", "qa000002": "Running"})
	q.launch("pytorch-train", "qa000003", "qa", h100)
	q.launch("pytorch-train", "qa000004", "qa", h100)
	q.phases(map[string]string{"qa000003": "Queued", "qa000004": "Queued"})
	// What an estimate reads: two GPUs of the team's H100s admitted, two
	// workloads waiting; two fewer H100s free than the class has.
	waitfor.Until(t, 30*time.Second, "the ClusterQueue's usage", func() error {
		used, pending, err := q.k.QueueUsage(context.Background(), "qa", "H100-80GB")
		if err != nil || used != 2 || pending != 2 {
			return fmt.Errorf("used %v, pending %d, %v", used, pending, err)
		}
		return nil
	})
	free, onOne, most, nodes, err := q.k.FreeGPUs(context.Background(), h100Class(t), "nvidia.com/gpu")
	if all := h100Total(t); err != nil || nodes < 1 || free > all-2 || free < 1 || onOne < 1 || onOne > free || most < onOne || most > all {
		t.Errorf("free whole H100s %d (%d on one node), %v; want at most %d of the %d (two running)", free, onOne, err, all-2, all)
	}
	// The same, read from the informers every replica keeps (the jobs run
	// for an hour: nothing changes meanwhile).
	listed := fmt.Sprint(free, onOne, most, nodes)
	mostListed, nodesListed, err := q.k.MostOnOneNode(context.Background(), h100Class(t), "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	capCtx, stopCapacity := context.WithCancel(context.Background())
	capDone := make(chan error, 1)
	go func() { capDone <- q.k.RunCapacity(capCtx) }()
	waitfor.Until(t, 30*time.Second, "free GPUs read from the informers", func() error {
		if !q.k.Nodes().CapacityCached() {
			return errors.New("caches not filled")
		}
		f, o, m, n, err := q.k.FreeGPUs(context.Background(), h100Class(t), "nvidia.com/gpu")
		if cached := fmt.Sprint(f, o, m, n); err != nil || cached != listed {
			return fmt.Errorf("cached %s (%v), listed %s", cached, err, listed)
		}
		if m, n, err := q.k.MostOnOneNode(context.Background(), h100Class(t), "nvidia.com/gpu"); err != nil || m != mostListed || n != nodesListed {
			return fmt.Errorf("most on one node cached %d of %d nodes (%v), listed %d of %d", m, n, err, mostListed, nodesListed)
		}
		return nil
	})
	stopCapacity()
	if err := <-capDone; err != nil || q.k.Nodes().CapacityCached() {
		t.Fatalf("the informers stopped: %v, still read: %v", err, q.k.Nodes().CapacityCached())
	}
	// Queued is seen before Kueue has tried to admit them ("waiting for
	// Kueue to admit it"); its reason comes with its first try.
	waitfor.Until(t, 30*time.Second, "Kueue's reason on the queued jobs", func() error {
		o3, _ := q.w.Observe("qa000003")
		o4, _ := q.w.Observe("qa000004")
		if o3.Position != 1 || !strings.Contains(o3.Reason, "position 1") || !strings.Contains(o3.Reason, "insufficient unused quota") {
			return fmt.Errorf("the first queued: position %d, reason %q", o3.Position, o3.Reason)
		}
		if o4.Position != 2 {
			return fmt.Errorf("the second queued: position %d, reason %q", o4.Position, o4.Reason)
		}
		return nil
	})
	ctx := context.Background()
	ref := workload.ObjectRef{Namespace: "gantry-qa", Kind: "Job", Name: "pytorch-train-qa000001", WorkloadID: "qa000001"}
	if err := q.k.SetRunning(ctx, ref, false); err != nil {
		t.Fatal(err)
	}
	// Kueue's BestEffortFIFO lets either waiting job through first; the
	// other is then next.
	waitfor.Until(t, 90*time.Second, "one queued job to run in the freed quota", func() error {
		o3, _ := q.w.Observe("qa000003")
		o4, _ := q.w.Observe("qa000004")
		if !(o3.Phase == "Running" && o4.Phase == "Queued" && o4.Position == 1 || o4.Phase == "Running" && o3.Phase == "Queued" && o3.Position == 1) {
			return fmt.Errorf("qa000003 %s (%s), qa000004 %s (%s)", o3.Phase, o3.Reason, o4.Phase, o4.Reason)
		}
		return nil
	})
	managed, err := q.k.Managed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range managed {
		if m.WorkloadID == "qa000001" && m.Running {
			t.Errorf("the stopped job is seen as running")
		}
		if (m.WorkloadID == "qa000003" || m.WorkloadID == "qa000004") && !m.Running {
			t.Errorf("a queued job is seen as stopped (the lifecycle loop would start it)")
		}
	}
	if err := q.k.SetRunning(ctx, ref, true); err != nil {
		t.Fatal(err)
	}
	// Queued again, behind or (started within the same second as the other
	// was queued: Kueue's timestamps are in seconds) level with the one
	// already waiting: the two hold places 1 and 2.
	q.phases(map[string]string{"qa000001": "Queued"})
	waitfor.Until(t, 30*time.Second, "the two waiting at places 1 and 2", func() error {
		o1, _ := q.w.Observe("qa000001")
		var other watch.Observation
		for _, id := range []string{"qa000003", "qa000004"} {
			if o, _ := q.w.Observe(id); o.Phase == "Queued" {
				other = o
			}
		}
		if o1.Phase != "Queued" || o1.Position+other.Position != 3 || o1.Position*other.Position != 2 {
			return fmt.Errorf("started again: %s at position %d, the other waiting at %d", o1.Phase, o1.Position, other.Position)
		}
		return nil
	})
}

// TestKueueCountsMIGSlicesAsShares: a quota of one H100 holds two 3g.40gb
// slices (half a GPU each) and queues a third.
func TestKueueCountsMIGSlicesAsShares(t *testing.T) {
	q := newQueueTest(t, map[string]quota.Quota{"qm": {GPUs: map[string]float64{"H100-80GB": 1}}})
	mig := template.Choice{Class: "H100-80GB", MIGProfile: "3g.40gb", Count: 1, Params: map[string]any{"input": "prompts.jsonl"}}
	for i := 1; i <= 3; i++ {
		q.launch("batch-inference", fmt.Sprintf("qm00000%d", i), "qm", mig)
	}
	q.phases(map[string]string{"qm000001": "Running", "qm000002": "Running", "qm000003": "Queued"})
}

// TestKueueBorrowsInTheCohort: a team with one H100 borrows its cohort
// partner's unused two; a team outside the cohort does not.
func TestKueueBorrowsInTheCohort(t *testing.T) {
	q := newQueueTest(t, map[string]quota.Quota{
		"qb1":  {GPUs: map[string]float64{"L4": 1}, Cohort: "shared"},
		"qb2":  {GPUs: map[string]float64{"L4": 2}, Cohort: "shared"},
		"qsol": {GPUs: map[string]float64{"L4": 1}},
	})
	l4 := template.Choice{Class: "L4", Count: 1, Params: map[string]any{"input": "prompts.jsonl"}}
	for i := 1; i <= 3; i++ {
		q.launch("batch-inference", fmt.Sprintf("qb10000%d", i), "qb1", l4)
	}
	q.launch("batch-inference", "qs000001", "qsol", l4)
	q.launch("batch-inference", "qs000002", "qsol", l4)
	q.phases(map[string]string{"qb100001": "Running", "qb100002": "Running", "qb100003": "Running", "qs000001": "Running", "qs000002": "Queued"})
}

// TestKueuePreemptionIsQueuedNotFailed: a higher-priority job takes the quota
// of a running lower-priority one; Kueue preempts it, and it is reported
// Queued with the preemption as its reason — not Failed.
func TestKueuePreemptionIsQueuedNotFailed(t *testing.T) {
	q := newQueueTest(t, map[string]quota.Quota{"qp": {GPUs: map[string]float64{"H100-80GB": 1}}})
	// batch-inference runs at priority low, pytorch-train at normal.
	q.launch("batch-inference", "qp000001", "qp", template.Choice{Class: "H100-80GB", Count: 1, Params: map[string]any{"input": "prompts.jsonl"}})
	q.phases(map[string]string{"qp000001": "Running"})
	q.launch("pytorch-train", "qp000002", "qp", template.Choice{Class: "H100-80GB", Count: 1})
	o := q.phases(map[string]string{"qp000002": "Running", "qp000001": "Queued"})["qp000001"]
	if !strings.Contains(o.Reason, "Preempted") && !strings.Contains(o.Reason, "preempted") {
		t.Errorf("the preempted job's reason %q does not say it was preempted", o.Reason)
	}
}

func h100Class(t *testing.T) gpu.Class {
	t.Helper()
	classes, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := classes.Get("H100-80GB")
	return c
}

// h100Total is the whole H100s allocatable on the cluster's nodes.
func h100Total(t *testing.T) int {
	t.Helper()
	c := h100Class(t)
	nodes, err := cluster.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range nodes.Items {
		if q, ok := n.Status.Allocatable["nvidia.com/gpu"]; ok && slices.Contains(c.Products, n.Labels["nvidia.com/gpu.product"]) {
			total += int(q.Value())
		}
	}
	return total
}

// TestVMQueue: Gantry queues VMs itself. With one L4 of quota, the first VM
// is started once Kueue admits its Workload, the second stays halted and is
// Queued with its place; stopping the first frees the quota and the second
// starts; starting the first again queues it.
func TestVMQueue(t *testing.T) {
	q := newQueueTest(t, map[string]quota.Quota{"vmq": {GPUs: map[string]float64{"L4": 1}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := func(context.Context, string, string) (workload.Admission, error) {
		return workload.Admission{State: workload.AdmissionReady}, nil
	}
	done := make(chan error, 1)
	go func() {
		done <- q.k.Kueue().RunQueueController(ctx, q.w.KueueWorkloads(), "gantry-", ready, time.Second, slog.New(slog.DiscardHandler)) // the backstop resync runs too, under -race
	}()
	defer func() { cancel(); <-done }()
	vm := template.Choice{Params: map[string]any{"sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKubeTestKey0000000000000000000000000000 bob@host"}}
	q.launch("gpu-vm", "vmq00001", "vmq", vm)
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	strategy := func(id string) string {
		u, err := dyn.Resource(schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}).
			Namespace("gantry-vmq").Get(ctx, "gpu-vm-"+id, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		s, _, _ := unstructured.NestedString(u.Object, "spec", "runStrategy")
		return s
	}
	wait := func(id, want string) {
		t.Helper()
		waitfor.Until(t, 90*time.Second, id+" "+want, func() error {
			if got := strategy(id); got != want {
				return fmt.Errorf("runStrategy %s", got)
			}
			return nil
		})
	}
	wait("vmq00001", "Always")
	q.launch("gpu-vm", "vmq00002", "vmq", vm)
	waitfor.Until(t, 60*time.Second, "the second VM queued with Kueue's reason and its place", func() error {
		if o, ok := q.w.Observe("vmq00002"); !ok || o.Phase != "Queued" || o.Position != 1 || !strings.Contains(o.Reason, "insufficient unused quota") {
			return fmt.Errorf("%s, position %d (%s)", o.Phase, o.Position, o.Reason)
		}
		return nil
	})
	if got := strategy("vmq00002"); got != "Halted" {
		t.Fatalf("the queued VM runs: %s", got)
	}
	first := workload.ObjectRef{Namespace: "gantry-vmq", Kind: "VirtualMachine", Name: "gpu-vm-vmq00001", WorkloadID: "vmq00001"}
	if err := q.k.SetRunning(ctx, first, false); err != nil {
		t.Fatal(err)
	}
	wait("vmq00001", "Halted")
	wait("vmq00002", "Always")
	if err := q.k.SetRunning(ctx, first, true); err != nil {
		t.Fatal(err)
	}
	q.phases(map[string]string{"vmq00001": "Queued"})
	if got := strategy("vmq00001"); got != "Halted" {
		t.Errorf("started again while the quota is used: %s", got)
	}
	// What Gantry's lifecycle loop reads: the stopped-then-started VM wants
	// to run, though it is halted in the queue.
	objs, err := q.k.Managed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.WorkloadID == "vmq00001" && !o.Running {
			t.Errorf("a queued VM is seen as stopped: the lifecycle loop would start it past Kueue")
		}
	}
}

// TestKueueAdmittedJobNotSuspendedAgain: applying a running queued Job's
// objects again — what the reconcile loop does for a launch whose first
// apply it raced, or after a crash — leaves the Job as Kueue resumed it:
// not suspended, its pod running on (a CI run once saw the pod ended and
// started again, a second attempt of a job that ran once).
func TestKueueAdmittedJobNotSuspendedAgain(t *testing.T) {
	q := newQueueTest(t, map[string]quota.Quota{"again": {GPUs: map[string]float64{"H100-80GB": 1}}})
	h100 := template.Choice{Class: "H100-80GB", Count: 1}
	q.launch("pytorch-train", "again001", "again", h100)
	q.phases(map[string]string{"again001": "Running"})
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "gantry.dev/workload-id=again001"}
	before, err := cluster.Client.CoreV1().Pods("gantry-again").List(ctx, sel)
	if err != nil || len(before.Items) != 1 {
		t.Fatalf("pods %v, %v; want one", before, err)
	}
	ran, err := cluster.Client.BatchV1().Jobs("gantry-again").Get(ctx, "pytorch-train-again001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.launch("pytorch-train", "again001", "again", h100) // the same objects again
	job, err := cluster.Client.BatchV1().Jobs("gantry-again").Get(ctx, "pytorch-train-again001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Suspending it again changes its spec at once (its generation), even
	// when Kueue resumes it before the look below, and before the Job
	// controller ends its pod.
	if job.Generation != ran.Generation || job.Spec.Suspend == nil || *job.Spec.Suspend {
		t.Fatalf("the admitted Job was changed (generation %d -> %d, spec.suspend %v)", ran.Generation, job.Generation, job.Spec.Suspend)
	}
	after, err := cluster.Client.CoreV1().Pods("gantry-again").List(ctx, sel)
	if err != nil || len(after.Items) != 1 || after.Items[0].UID != before.Items[0].UID || after.Items[0].DeletionTimestamp != nil {
		t.Fatalf("pods after applying again: %d (%v), want the one that ran, not ending", len(after.Items), err)
	}
}

// TestSyncKeepsATeamsQueue: a sync whose objects lack a team's
// ClusterQueue (worked out before that team's first namespace was made,
// here by another Gantry on the same cluster) leaves the queue while the
// team has a Gantry namespace, and deletes the queue of a team with none.
// (Deleting it left it Terminating, and inactive, while it held admitted
// workloads: an e2e launch queued behind "ClusterQueue … is inactive".)
func TestSyncKeepsATeamsQueue(t *testing.T) {
	k, classes := kueueCluster(t)
	ctx := t.Context()
	one := quota.Quota{GPUs: map[string]float64{"H100-80GB": 1}}
	sync := func(teams ...string) {
		t.Helper()
		q := map[string]quota.Quota{}
		for _, tm := range teams {
			q[tm] = one
		}
		// The priorities every test's queues use, kept.
		if err := k.Kueue().SyncQuotas(ctx, quota.Objects(classes, q, starterPriorities, quota.Options{})); err != nil {
			t.Fatal(err)
		}
	}
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	cqs := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"})
	t.Cleanup(func() {
		for _, n := range []string{"gantry-syncmine", "gantry-syncgone", "gantry-syncother"} {
			cqs.Delete(context.Background(), n, metav1.DeleteOptions{})
		}
		cluster.Client.CoreV1().Namespaces().Delete(context.Background(), "gantry-syncmine", metav1.DeleteOptions{})
	})
	sync("syncmine", "syncgone")
	if err := k.EnsureNamespace(ctx, "gantry-syncmine", gteam.Name("syncmine")); err != nil {
		t.Fatal(err)
	}
	sync("syncother")
	if u, err := cqs.Get(ctx, "gantry-syncmine", metav1.GetOptions{}); err != nil || u.GetDeletionTimestamp() != nil {
		t.Errorf("the queue of a team with a namespace: %v (deleted: %v), want it kept", err, err == nil && u.GetDeletionTimestamp() != nil)
	}
	waitfor.Until(t, 30*time.Second, "the queue of a team without a namespace deleted", func() error {
		u, err := cqs.Get(ctx, "gantry-syncgone", metav1.GetOptions{})
		if err == nil && u.GetDeletionTimestamp() == nil {
			return errors.New("still there")
		}
		return nil
	})
}

// counter counts the requests of a method whose path contains suffix (a
// resource, or a resource's subresource).
type counter struct {
	method, suffix string
	n              atomic.Int64
}

// countingTransport counts its requests with each counter that matches.
type countingTransport struct {
	rt       http.RoundTripper
	counters []*counter
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	for _, k := range c.counters {
		if r.Method == k.method && strings.Contains(r.URL.Path, k.suffix) {
			k.n.Add(1)
		}
	}
	return c.rt.RoundTrip(r)
}

// TestSyncAppliesOnlyChanges: a sync pass applies what changed and nothing
// else — none of the objects when the policy did not change, a team's queue
// again once its quota changed, once someone edited its spec by hand
// (restored), and once someone deleted it (made again); and Gantry's
// AdmissionCheck, once marked active, is not marked again.
func TestSyncAppliesOnlyChanges(t *testing.T) {
	_, classes := kueueCluster(t)
	ctx := t.Context()
	cfg := rest.CopyConfig(cluster.Config())
	applies := &counter{method: http.MethodPatch, suffix: "/clusterqueues/"}
	actives := &counter{method: http.MethodPatch, suffix: "/admissionchecks/" + quota.ApprovalCheck + "/status"}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{rt: rt, counters: []*counter{applies, actives}}
	})
	k, err := kube.New(cfg, kube.Options{Kueue: true})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	cqs := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"})
	acs := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "admissionchecks"})
	const name = "gantry-syncskip"
	t.Cleanup(func() {
		cqs.Delete(context.Background(), name, metav1.DeleteOptions{})
		acs.Delete(context.Background(), quota.ApprovalCheck, metav1.DeleteOptions{})
	})
	if err := k.EnsureNamespace(ctx, name, gteam.Name("syncskip")); err != nil { // its queue is kept by the others' syncs
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cluster.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	gpus := func(n float64) map[string]quota.Quota {
		return map[string]quota.Quota{"syncskip": {GPUs: map[string]float64{"H100-80GB": n}}}
	}
	sync := func(q map[string]quota.Quota, wantApplies int64) {
		t.Helper()
		before := applies.n.Load()
		if err := k.Kueue().SyncQuotas(ctx, quota.Objects(classes, q, starterPriorities, quota.Options{ApprovalCheck: true})); err != nil {
			t.Fatal(err)
		}
		if got := applies.n.Load() - before; got != wantApplies {
			t.Errorf("%d ClusterQueue applies, want %d", got, wantApplies)
		}
	}
	// h100 is the H100 flavor's quota in the queue, and its JSON pointer.
	h100 := func() (q, pointer string) {
		t.Helper()
		u, err := cqs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "resourceGroups")
		for i, g := range groups {
			for j, f := range g.(map[string]any)["flavors"].([]any) {
				if f.(map[string]any)["name"] == quota.Flavor("H100-80GB") {
					return fmt.Sprint(f.(map[string]any)["resources"].([]any)[0].(map[string]any)["nominalQuota"]),
						fmt.Sprintf("/spec/resourceGroups/%d/flavors/%d/resources/0/nominalQuota", i, j)
				}
			}
		}
		return "", ""
	}
	// nominal is that quota in thousandths of a GPU (the API server and
	// Kueue may write 2000 as 2k).
	nominal := func() string {
		t.Helper()
		q, _ := h100()
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return q
		}
		return fmt.Sprint(v.Value())
	}
	// seen waits until the API server's watch cache has the queue as cond
	// says (SyncQuotas reads it there).
	seen := func(what string, cond func(u *unstructured.Unstructured, err error) bool) {
		t.Helper()
		waitfor.Until(t, 30*time.Second, what, func() error {
			u, err := cqs.Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
			if !cond(u, err) {
				return errors.New("not yet")
			}
			return nil
		})
	}
	// settled: a pass applies nothing once the API server's watch cache has
	// the queue at the generation this Kueue's last apply left (until then
	// a pass applies it again, a no-op).
	settled := func(what string) {
		t.Helper()
		waitfor.Until(t, 30*time.Second, what, func() error {
			before := applies.n.Load()
			if err := k.Kueue().SyncQuotas(ctx, quota.Objects(classes, gpus(2), starterPriorities, quota.Options{ApprovalCheck: true})); err != nil {
				t.Fatal(err)
			}
			if n := applies.n.Load() - before; n != 0 {
				return fmt.Errorf("%d applies", n)
			}
			return nil
		})
	}
	sync(gpus(1), 1) // this Kueue has applied nothing yet
	sync(gpus(2), 1)
	if n := nominal(); n != "2000" {
		t.Errorf("quota %s, want 2000 (2 GPUs)", n)
	}
	settled("a pass that changes nothing")
	sync(gpus(2), 0)
	sync(gpus(2), 0)
	// Edited by hand: applied again, and so restored.
	_, at := h100()
	patch := []byte(`[{"op": "replace", "path": "` + at + `", "value": "5000"}]`)
	edited, err := cqs.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen("the edit", func(u *unstructured.Unstructured, err error) bool {
		return err == nil && u.GetGeneration() == edited.GetGeneration()
	})
	sync(gpus(2), 1)
	if n := nominal(); n != "2000" {
		t.Errorf("after a hand edit, quota %s, want 2000 again", n)
	}
	settled("a pass after the edit that changes nothing")
	// Deleted by hand: made again.
	if err := cqs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen("the queue gone", func(_ *unstructured.Unstructured, err error) bool { return apierrors.IsNotFound(err) })
	sync(gpus(2), 1)
	if n := nominal(); n != "2000" {
		t.Errorf("made again with quota %s, want 2000", n)
	}
	// Deleted and made anew by someone else, saying another quota: another
	// object, applied again (that its uid alone tells it apart, at the same
	// generation, kueue's TestUnchanged says).
	mine, err := cqs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, at = h100()
	var gi, fi int
	if _, err := fmt.Sscanf(at, "/spec/resourceGroups/%d/flavors/%d/", &gi, &fi); err != nil {
		t.Fatal(err)
	}
	groups, _, _ := unstructured.NestedSlice(mine.Object, "spec", "resourceGroups")
	groups[gi].(map[string]any)["flavors"].([]any)[fi].(map[string]any)["resources"].([]any)[0].(map[string]any)["nominalQuota"] = "7000"
	if err := unstructured.SetNestedSlice(mine.Object, groups, "spec", "resourceGroups"); err != nil {
		t.Fatal(err)
	}
	if err := cqs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen("the queue gone again", func(_ *unstructured.Unstructured, err error) bool { return apierrors.IsNotFound(err) })
	theirs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": mine.GetAPIVersion(), "kind": mine.GetKind(), "spec": mine.Object["spec"]}}
	theirs.SetName(name)
	theirs.SetLabels(mine.GetLabels())
	made, err := cqs.Create(ctx, theirs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen("the queue made anew", func(u *unstructured.Unstructured, err error) bool { return err == nil && u.GetUID() == made.GetUID() })
	sync(gpus(2), 1)
	if n := nominal(); n != "2000" {
		t.Errorf("made anew by someone else: quota %s after the sync, want 2000", n)
	}
	// The AdmissionCheck: marked active once, then left.
	if err := k.Kueue().ActivateCheck(ctx); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 30*time.Second, "the check active in the watch cache", func() error {
		u, err := acs.Get(ctx, quota.ApprovalCheck, metav1.GetOptions{ResourceVersion: "0"})
		if err != nil || !kueue.Condition(u, "Active") {
			return fmt.Errorf("not yet (%v)", err)
		}
		return nil
	})
	before := actives.n.Load()
	if err := k.Kueue().ActivateCheck(ctx); err != nil {
		t.Fatal(err)
	}
	if got := actives.n.Load() - before; got != 0 {
		t.Errorf("an active check marked again: %d status applies", got)
	}
}

// TestHeldQueueReleased: a team's queue held at once by a launch
// (HoldQueue) and by the sync is released by the next sync that no longer
// holds it.
func TestHeldQueueReleased(t *testing.T) {
	k, classes := kueueCluster(t)
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	cqs := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"})
	const name = "gantry-synchold"
	if err := k.EnsureNamespace(ctx, name, gteam.Name("synchold")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cqs.Delete(context.Background(), name, metav1.DeleteOptions{})
		cluster.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	sync := func(held bool) {
		t.Helper()
		q := map[string]quota.Quota{"synchold": {GPUs: map[string]float64{"H100-80GB": 1}}}
		if err := k.Kueue().SyncQuotas(ctx, quota.Objects(classes, q, starterPriorities, quota.Options{Held: map[string]bool{"synchold": held}})); err != nil {
			t.Fatal(err)
		}
	}
	policy := func() string {
		t.Helper()
		u, err := cqs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, _, _ := unstructured.NestedString(u.Object, "spec", "stopPolicy")
		return p
	}
	sync(false)
	if err := k.Kueue().HoldQueue(ctx, gteam.Name("synchold")); err != nil {
		t.Fatal(err)
	}
	if p := policy(); p != "Hold" {
		t.Fatalf("held at once: stopPolicy %q", p)
	}
	sync(true)
	sync(false)
	if p := policy(); p != "None" {
		t.Errorf("released by the sync: stopPolicy %q, want None", p)
	}
}
