package kube_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestQuarantineMovesAJob, on the real API server with Kueue: a Job
// running on a node that Gantry marks is requeued through Kueue (its Kueue
// Workload deactivated, then activated once its pod is gone) and runs on
// the other node, without a failed pod counted against its retries, and a
// second Requeue for the same node does not take it off again; the node's
// mark keeps an operator's own taint when it goes.
func TestQuarantineMovesAJob(t *testing.T) {
	q := newQueueTest(t, map[string]quota.Quota{"qz": {GPUs: map[string]float64{"A100-80GB": 4}}})
	ctx := context.Background()
	core := cluster.Client
	// Two nodes of the test's own, so that marking one disturbs no other
	// test on the shared cluster.
	prefix := "qz-" + workload.NewID()[:6]
	made := devcluster.Nodes([]devcluster.NodeSpec{{Prefix: prefix, Count: 2, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 8, Whole: 8}})
	var names []string
	for _, n := range made {
		if _, err := core.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, n.Name)
		t.Cleanup(func() { core.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	}
	objs := renderedWith(t, "pytorch-train", "qz000001", "qz", template.Choice{Class: "A100-80GB", Count: 1}, true)
	var job *batchv1.Job
	for _, o := range objs {
		if j, ok := o.(*batchv1.Job); ok {
			job = j
			j.Spec.Template.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = "1h"
			j.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: names}}}}}}}
		}
	}
	if err := q.k.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	qc := q.k.Quarantine(nodes.PreflightOptions{Namespace: "gantry-qz", Image: "registry.gantry.internal/gantry-agent:test", Command: []string{"gantry-agent", "check"}})
	ref := workload.ObjectRef{Namespace: "gantry-qz", Kind: "Job", Name: job.Name, WorkloadID: "qz000001"}
	var first string
	waitfor.Until(t, 90*time.Second, "the job running on one of the test's nodes", func() error {
		on, err := qc.PodNodes(ctx, "gantry-qz", "qz000001")
		if err != nil || len(on) != 1 {
			return fmt.Errorf("on %v, %v", on, err)
		}
		first = on[0]
		return nil
	})
	// A move's event lands on the Job, with its uid, and is among the
	// workload's events as Gantry lists them.
	if err := qc.Event(ctx, ref, "Warning", quarantine.ReasonMoved, "moved off node "+first+": a test's"); err != nil {
		t.Fatal(err)
	}
	evs, err := q.k.Events(ctx, "gantry-qz", job.Name, "qz000001")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		found = found || (e.Reason == quarantine.ReasonMoved && e.Type == "Warning" && e.Message == "moved off node "+first+": a test's")
	}
	if !found {
		t.Errorf("the move's event among the workload's: %+v", evs)
	}
	onCluster, err := core.BatchV1().Jobs("gantry-qz").Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// kubectl describe finds an object's events by its uid.
	jobEvs, err := core.CoreV1().Events("gantry-qz").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(onCluster.UID) + ",reason=" + quarantine.ReasonMoved})
	if err != nil || len(jobEvs.Items) != 1 || jobEvs.Items[0].InvolvedObject.Kind != "Job" {
		t.Errorf("the Job's events by its uid: %+v %v; want the move's", jobEvs, err)
	}
	// An operator's own taint on the node, before Gantry's.
	mine := corev1.Taint{Key: "example.com/maintenance", Value: "soon", Effect: corev1.TaintEffectPreferNoSchedule}
	n, err := core.CoreV1().Nodes().Get(ctx, first, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, mine)
	if _, err := core.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := n.Spec.Taints
	at := time.Now().UTC().Truncate(time.Second)
	m := quarantine.Mark{Node: first, GPU: "GPU-" + first + "-1", Index: 1, Reason: "critical XID 79", At: at}
	for i := range 2 { // marking again changes nothing, and keeps the first mark
		again := m
		again.At = m.At.Add(time.Duration(i) * time.Minute)
		got, added, err := qc.Mark(ctx, again, quarantine.NoSchedule)
		if err != nil || got != m || added != (i == 0) {
			t.Fatalf("mark %d: %+v added %v, %v", i, got, added, err)
		}
	}
	marks, err := qc.Marks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(marks, func(x quarantine.Mark) bool { return x.Node == first })
	if i < 0 || marks[i] != m {
		t.Fatalf("marks %+v, want %+v among them", marks, m)
	}
	n, err = core.CoreV1().Nodes().Get(ctx, first, metav1.GetOptions{})
	if err != nil || !slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool {
		return x.Key == nodes.QuarantineTaint && x.Effect == corev1.TaintEffectNoSchedule
	}) || len(n.Spec.Taints) != len(before)+1 || n.Labels[nodes.UnhealthyLabel] != "true" {
		t.Fatalf("marked node: taints %v, labels %v, %v", n.Spec.Taints, n.Labels, err)
	}
	pods, err := qc.PodsOn(ctx, "gantry-qz", "qz000001", first)
	if err != nil || len(pods) != 1 || len(pods[0].Pinned) != 0 {
		t.Fatalf("pods on %s: %+v %v", first, pods, err)
	}
	waitfor.Until(t, 90*time.Second, "the job queued again", func() error {
		done, err := qc.Requeue(ctx, ref, first)
		if err != nil || !done {
			return fmt.Errorf("done %v, %v", done, err)
		}
		return nil
	})
	waitfor.Until(t, 90*time.Second, "the job running on the other node", func() error {
		on, err := qc.PodNodes(ctx, "gantry-qz", "qz000001")
		if err != nil || len(on) != 1 || on[0] == first {
			return fmt.Errorf("on %v (quarantined: %s), %v", on, first, err)
		}
		return nil
	})
	if done, err := qc.Requeue(ctx, ref, first); err != nil || !done {
		t.Fatalf("requeued again: done %v, %v", done, err)
	}
	j, err := core.BatchV1().Jobs("gantry-qz").Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil || j.Status.Failed != 0 {
		t.Fatalf("job: failed %d (its retries must not be used), %v", j.Status.Failed, err)
	}
	if err := qc.Unmark(ctx, first); err != nil {
		t.Fatal(err)
	}
	n, err = core.CoreV1().Nodes().Get(ctx, first, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(n.Spec.Taints, before, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) || n.Labels[nodes.UnhealthyLabel] != "" || n.Annotations[nodes.QuarantineAnnotation] != "" {
		t.Fatalf("after Unmark: taints %v, labels %v, annotations %v", n.Spec.Taints, n.Labels, n.Annotations)
	}
	if marks, _ := qc.Marks(ctx); slices.ContainsFunc(marks, func(x quarantine.Mark) bool { return x.Node == first }) {
		t.Fatal("still marked")
	}
	if err := core.CoreV1().Namespaces().Delete(ctx, "gantry-qz", metav1.DeleteOptions{}); err != nil {
		t.Log(err)
	}
}

// TestPinnedVolumes, on the real API server: of a workload's pod on a node,
// PodsOn names the claims whose bound volume only that node reaches — a
// local volume whose every required term names that node's hostname alone
// — and no other: a volume two nodes reach, one a zone reaches, one a term
// of which lets another node in, one without node affinity, and a claim
// not bound yet. A quarantine keeps such a workload where it is
// (quarantine.Kept) rather than leave its data behind.
func TestPinnedVolumes(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	core := cluster.Client
	ns := "gantry-pv-" + workload.NewID()[:6]
	if _, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	const node, other = "l4-0", "l4-1"
	hostname := func(nodes ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes}}}
	}
	zone := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}}}}
	for _, tc := range []struct {
		claim  string
		terms  []corev1.NodeSelectorTerm // nil: no node affinity
		bound  bool
		pinned bool
	}{
		{"local", []corev1.NodeSelectorTerm{hostname(node)}, true, true},
		{"local-two-terms", []corev1.NodeSelectorTerm{hostname(node), hostname(node)}, true, true},
		{"two-nodes", []corev1.NodeSelectorTerm{hostname(node, other)}, true, false},
		{"another-term", []corev1.NodeSelectorTerm{hostname(node), hostname(other)}, true, false},
		{"zonal", []corev1.NodeSelectorTerm{zone}, true, false},
		{"network", nil, true, false},
		{"unbound", []corev1.NodeSelectorTerm{hostname(node)}, false, false},
	} {
		pvName := ns + "-" + tc.claim
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              "manual",
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/" + tc.claim}},
			}}
		if tc.terms == nil {
			pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/" + tc.claim}}
		} else {
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: tc.terms}}
		}
		if _, err := core.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { core.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{}) })
		sc := "manual"
		if !tc.bound {
			sc = "none-to-bind" // no volume of its class: the cluster's binder leaves it Pending
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: tc.claim},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &sc, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if tc.bound {
			pvc.Spec.VolumeName = pvName
		}
		if _, err := core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nb-0", Labels: map[string]string{render.LabelWorkloadID: "pv000001"}},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.gantry.internal/library/python:3.11"}}}}
	for _, c := range []string{"local", "local-two-terms", "two-nodes", "another-term", "zonal", "network", "unbound", "missing"} {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	if _, err := core.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	qc := k.Quarantine(nodes.PreflightOptions{Namespace: ns})
	pods, err := qc.PodsOn(ctx, ns, "pv000001", node)
	if err != nil || len(pods) != 1 || pods[0].Name != "nb-0" {
		t.Fatalf("pods on %s: %+v %v", node, pods, err)
	}
	if want := []string{"local", "local-two-terms"}; !slices.Equal(pods[0].Pinned, want) {
		t.Errorf("pinned claims %q, want %q", pods[0].Pinned, want)
	}
	if pods, err := qc.PodsOn(ctx, ns, "pv000001", other); err != nil || len(pods) != 0 {
		t.Errorf("pods on %s: %+v %v; want none", other, pods, err)
	}
}

// TestPreflight: the preflight Job runs on the node it checks (kwok
// completes it) and passes; cleared, a new one starts.
func TestPreflight(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	ns := "gantry-pf-" + workload.NewID()[:6]
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	qc := k.Quarantine(nodes.PreflightOptions{Namespace: ns, Image: "registry.gantry.internal/gantry-agent:test", Command: []string{"gantry-agent", "check"}})
	var p quarantine.Preflight
	waitfor.Until(t, 60*time.Second, "the preflight check passing", func() error {
		var err error
		if p, err = qc.Preflight(ctx, "l4-0"); err != nil || p.State != quarantine.PreflightPassed {
			return fmt.Errorf("%+v %v", p, err)
		}
		return nil
	})
	jobs, err := cluster.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: nodes.LabelPreflight})
	if err != nil || len(jobs.Items) != 1 || jobs.Items[0].Spec.Template.Spec.NodeName != "l4-0" {
		t.Fatalf("preflight jobs: %v %v", jobs, err)
	}
	if err := qc.ClearPreflight(ctx, "l4-0"); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 30*time.Second, "the preflight Job gone", func() error {
		jobs, err := cluster.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: nodes.LabelPreflight})
		if err != nil || len(jobs.Items) != 0 {
			return fmt.Errorf("%d jobs, %v", len(jobs.Items), err)
		}
		return nil
	})
	if err := qc.ClearPreflight(ctx, "l4-0"); err != nil {
		t.Fatalf("clearing twice: %v", err)
	}
}

// TestRequeueWithoutKueue: on a cluster without Kueue a Job moved off a
// node is suspended (marked), and resumed once its pods are gone — no
// failed pod counted; a second call changes nothing. A stop by its owner
// in between wins: the move's next step leaves it stopped.
func TestRequeueWithoutKueue(t *testing.T) {
	k := need(t)
	ctx := context.Background()
	core := cluster.Client
	run := func(id string) (workload.ObjectRef, string) {
		t.Helper()
		if err := k.EnsureNamespace(ctx, "gantry-qn", "qn"); err != nil {
			t.Fatal(err)
		}
		objs := renderedWith(t, "pytorch-train", id, "qn", template.Choice{Class: "A100-80GB", Count: 1}, false)
		var name string
		for _, o := range objs {
			if j, ok := o.(*batchv1.Job); ok {
				j.Spec.Template.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = "1h"
				name = j.Name
			}
		}
		if err := k.Apply(ctx, objs); err != nil {
			t.Fatal(err)
		}
		qc := k.Quarantine(nodes.PreflightOptions{Namespace: "gantry-qn"})
		var on []string
		waitfor.Until(t, 90*time.Second, "job "+id+" running", func() error {
			var err error
			if on, err = qc.PodNodes(ctx, "gantry-qn", id); err != nil || len(on) != 1 {
				return fmt.Errorf("on %v, %v", on, err)
			}
			return nil
		})
		return workload.ObjectRef{Namespace: "gantry-qn", Kind: "Job", Name: name, WorkloadID: id}, on[0]
	}
	qc := k.Quarantine(nodes.PreflightOptions{Namespace: "gantry-qn"})
	job := func(ref workload.ObjectRef) *batchv1.Job {
		t.Helper()
		j, err := core.BatchV1().Jobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	ref, node := run("qn000001")
	if done, err := qc.Requeue(ctx, ref, node); err != nil || done {
		t.Fatalf("first call: done %v, %v", done, err)
	}
	if j := job(ref); j.Spec.Suspend == nil || !*j.Spec.Suspend || j.Annotations["gantry.dev/moving-off"] != node {
		t.Fatalf("taken off: suspend %v, annotations %v", j.Spec.Suspend, j.Annotations)
	}
	waitfor.Until(t, 60*time.Second, "the job queued again once its pods are gone", func() error {
		done, err := qc.Requeue(ctx, ref, node)
		if err != nil || !done {
			return fmt.Errorf("done %v, %v", done, err)
		}
		return nil
	})
	if j := job(ref); (j.Spec.Suspend != nil && *j.Spec.Suspend) || j.Annotations["gantry.dev/moving-off"] != "requeued:"+node || j.Status.Failed != 0 {
		t.Fatalf("resumed: suspend %v, annotations %v, failed %d", j.Spec.Suspend, j.Annotations, j.Status.Failed)
	}
	if done, err := qc.Requeue(ctx, ref, node); err != nil || !done || job(ref).Spec.Suspend != nil && *job(ref).Spec.Suspend {
		t.Fatalf("a second call took it off again: done %v, %v", done, err)
	}

	// Its owner stops it while it moves: it stays stopped.
	ref2, node2 := run("qn000002")
	if done, err := qc.Requeue(ctx, ref2, node2); err != nil || done {
		t.Fatalf("first call: done %v, %v", done, err)
	}
	if err := k.SetRunning(ctx, ref2, false); err != nil {
		t.Fatal(err)
	}
	if j := job(ref2); j.Annotations["gantry.dev/moving-off"] != "" {
		t.Fatalf("the owner's stop kept the move's mark: %v", j.Annotations)
	}
	if done, err := qc.Requeue(ctx, ref2, node2); err != nil || !done {
		t.Fatalf("after the owner's stop: done %v, %v", done, err)
	}
	if j := job(ref2); j.Spec.Suspend == nil || !*j.Spec.Suspend {
		t.Fatal("the move resumed a Job its owner stopped")
	}
	core.CoreV1().Namespaces().Delete(ctx, "gantry-qn", metav1.DeleteOptions{})
}
