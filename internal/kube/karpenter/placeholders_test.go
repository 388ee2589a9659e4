package karpenter_test

import (
	"testing"
	"time"

	psa "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/gantryhq/gantry/internal/kube/karpenter"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// TestPlaceholder: a group's placeholders are one-GPU pause pods of the
// lowest priority pinned to the group (spot ones tolerate spot), that pass
// the Pod Security "restricted" profile.
func TestPlaceholder(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psa.LevelVersion{Level: psa.LevelRestricted, Version: psa.LatestVersion()}
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	for _, g := range []nodegroup.Group{
		{Name: "h100-on-demand", Class: "H100-80GB", Purchase: nodegroup.OnDemand, GPUsPerNode: 8, Max: 2},
		{Name: "h100-spot", Class: "H100-80GB", Purchase: nodegroup.Spot, GPUsPerNode: 8, Max: 2},
	} {
		d := karpenter.Placeholder(g, "gantry", 5, at)
		ps := &d.Spec.Template.Spec
		if d.Name != "gantry-warm-"+g.Name || *d.Spec.Replicas != 5 || d.Annotations["gantry.dev/warm-since"] != "2026-12-02T09:00:00Z" {
			t.Errorf("%s: %s, %d replicas, %v", g.Name, d.Name, *d.Spec.Replicas, d.Annotations)
		}
		if ps.PriorityClassName != karpenter.WarmPriorityClass || ps.NodeSelector[karpenter.GroupLabel] != g.Name ||
			ps.Containers[0].Resources.Limits.Name("nvidia.com/gpu", "").Value() != 1 {
			t.Errorf("%s: priority %q, selector %v, limits %v", g.Name, ps.PriorityClassName, ps.NodeSelector, ps.Containers[0].Resources.Limits)
		}
		spot := false
		for _, tol := range ps.Tolerations {
			spot = spot || tol.Key == "gantry.dev/spot"
		}
		if spot != (g.Purchase == nodegroup.Spot) {
			t.Errorf("%s: tolerates spot %v", g.Name, spot)
		}
		if d.Spec.Selector.MatchLabels[karpenter.WarmLabel] != g.Name || d.Spec.Template.Labels[karpenter.WarmLabel] != g.Name {
			t.Errorf("%s: selector %v, labels %v", g.Name, d.Spec.Selector, d.Spec.Template.Labels)
		}
		for _, res := range eval.EvaluatePod(lv, &d.Spec.Template.ObjectMeta, ps) {
			if !res.Allowed {
				t.Errorf("%s: %s: %s", g.Name, res.ForbiddenReason, res.ForbiddenDetail)
			}
		}
	}
}
