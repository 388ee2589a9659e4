package karpenter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/kube/karpenter"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/waitfor"
)

var cluster *devcluster.Cluster

// groups are the H100 groups of the local cluster's fleet (h100-reserved,
// two nodes of 8 GPUs) with one on-demand machine and one spot machine that
// boot in 2 s and go after 5 s empty.
var groups = []nodegroup.Group{
	{Name: "h100-reserved", Class: "H100-80GB", Purchase: nodegroup.Reserved, GPUsPerNode: 8, Min: 2, Max: 2, PricePerNodeHour: 38},
	{Name: "h100-on-demand", Class: "H100-80GB", Purchase: nodegroup.OnDemand, GPUsPerNode: 8, Max: 1, PricePerNodeHour: 55.2,
		BootTime: config.Duration(2 * time.Second), QuietTime: config.Duration(5 * time.Second)},
	{Name: "h100-spot", Class: "H100-80GB", Purchase: nodegroup.Spot, GPUsPerNode: 8, Max: 1, PricePerNodeHour: 36,
		BootTime: config.Duration(2 * time.Second), QuietTime: config.Duration(5 * time.Second)},
}

func TestMain(m *testing.M) {
	clustertest.Main(m, "karpenter", &cluster, clustertest.Hooks{Options: func(o *devcluster.Options) { o.NodeGroups = groups }})
}

func need(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
}

// gpuPod asks for gpus whole H100 GPUs, on spot machines or not, as a
// rendered Gantry pod does (product affinity, GPU toleration).
func gpuPod(name string, gpus int, spot bool) *corev1.Pod {
	terms := []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"}}}
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
	for i := range 2 { // the reserved machines, full
		if _, err := pods.Create(ctx, gpuPod(fmt.Sprintf("fill-%d", i), 8, false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pods.Create(ctx, gpuPod("grow", 8, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
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
		return fmt.Errorf("pod %s", p.Status.Phase)
	})
	if got := groupNodes(ctx, t, "h100-on-demand"); len(got) != 1 {
		t.Fatalf("%d on-demand machines, max 1", len(got))
	}
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
