package karpenter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gantryhq/gantry/internal/capacity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/quota"
)

// Warm capacity's placeholders. Each warmed node group has a Deployment,
// gantry-warm-<group>, in Gantry's namespace: one pause pod per GPU held,
// each asking for one GPU, pinned to the group's machines, of the
// PriorityClass gantry-warm (below every workload's, and preempting
// nothing). Karpenter boots machines for them as for any pod; a workload of
// normal or high priority that finds no room preempts them (gantry-low
// workloads preempt nothing, and do not); the Deployment brings them back,
// pending, and Karpenter boots for them again while Gantry holds them.

const (
	// WarmLabel names the node group a placeholder pod holds warm.
	WarmLabel = "gantry.dev/warm"
	// WarmPriorityClass is the placeholders' PriorityClass
	// (deploy/helm/gantry/files/warm-priorityclass.yaml).
	WarmPriorityClass = "gantry-warm"
	// warmSince annotates the Deployment with when its size was last set.
	warmSince = "gantry.dev/warm-since"
	// PauseImage is what a placeholder runs: nothing.
	PauseImage = "registry.k8s.io/pause:3.10"
)

// Placeholders holds node groups' placeholder pods in one namespace:
// capacity.Holder.
type Placeholders struct {
	core      kubernetes.Interface
	namespace string
}

// NewPlaceholders returns the placeholders kept in namespace.
func NewPlaceholders(core kubernetes.Interface, namespace string) (*Placeholders, error) {
	if core == nil || namespace == "" {
		return nil, errors.New("karpenter: placeholders need a client and a namespace")
	}
	return &Placeholders{core: core, namespace: namespace}, nil
}

// WarmName is the name of a group's placeholder Deployment.
func WarmName(group string) string { return "gantry-warm-" + group }

// Held implements capacity.Holder: the replicas the group's Deployment
// asks for, those of them Ready (on a machine), and when its size was last
// set (zeros without one). It lists (the verbs the chart grants on
// Deployments are list and patch).
func (p *Placeholders) Held(ctx context.Context, group string) (capacity.Holding, error) {
	ds, err := p.list(ctx, WarmLabel+"="+group)
	if err != nil {
		return capacity.Holding{}, fmt.Errorf("read the placeholders of %s: %w", group, err)
	}
	for _, d := range ds {
		if d.Name != WarmName(group) {
			continue
		}
		h := capacity.Holding{Running: int(d.Status.ReadyReplicas)}
		if d.Spec.Replicas != nil {
			h.Asked = int(*d.Spec.Replicas)
		}
		h.Running = min(h.Running, h.Asked)
		h.Since, _ = time.Parse(time.RFC3339Nano, d.Annotations[warmSince])
		return h, nil
	}
	return capacity.Holding{}, nil
}

// Warming implements capacity.Holder: the groups whose Deployments ask for
// placeholders.
func (p *Placeholders) Warming(ctx context.Context) ([]string, error) {
	ds, err := p.list(ctx, WarmLabel)
	if err != nil {
		return nil, fmt.Errorf("list the placeholders: %w", err)
	}
	var out []string
	for _, d := range ds {
		if g := d.Labels[WarmLabel]; g != "" && d.Name == WarmName(g) && d.Spec.Replicas != nil && *d.Spec.Replicas > 0 {
			out = append(out, g)
		}
	}
	return out, nil
}

// Release implements capacity.Holder: the group's Deployment asks for none.
func (p *Placeholders) Release(ctx context.Context, group string) error {
	if _, err := p.core.AppsV1().Deployments(p.namespace).Patch(ctx, WarmName(group), types.MergePatchType, []byte(`{"spec":{"replicas":0}}`),
		metav1.PatchOptions{FieldManager: "gantry"}); err != nil {
		return fmt.Errorf("release the placeholders of %s: %w", group, err)
	}
	return nil
}

func (p *Placeholders) list(ctx context.Context, selector string) ([]appsv1.Deployment, error) {
	l, err := p.core.AppsV1().Deployments(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Hold implements capacity.Holder: the group's Deployment asks for gpus
// placeholders from now (a server-side apply: made when first needed, and
// kept at 0 after).
func (p *Placeholders) Hold(ctx context.Context, g nodegroup.Group, gpus int, now time.Time) error {
	body, err := json.Marshal(Placeholder(g, p.namespace, gpus, now))
	if err != nil {
		return err
	}
	if _, err := p.core.AppsV1().Deployments(p.namespace).Patch(ctx, WarmName(g.Name), types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: "gantry", Force: new(true)}); err != nil {
		return fmt.Errorf("hold the placeholders of %s: %w", g.Name, err)
	}
	return nil
}

// Placeholder is the Deployment that holds gpus GPUs of g warm, set at now.
// Its pods pass the Pod Security "restricted" profile.
func Placeholder(g nodegroup.Group, namespace string, gpus int, now time.Time) *appsv1.Deployment {
	labels := map[string]string{WarmLabel: g.Name, "app.kubernetes.io/part-of": "gantry", "app.kubernetes.io/component": "warm-capacity"}
	tolerations := []corev1.Toleration{
		{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: quota.TaintGPUClass, Operator: corev1.TolerationOpEqual, Value: g.Class, Effect: corev1.TaintEffectNoSchedule},
	}
	if g.Purchase == nodegroup.Spot {
		tolerations = append(tolerations, corev1.Toleration{Key: "gantry.dev/spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	replicas := int32(gpus)
	one := resource.MustParse("1")
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: WarmName(g.Name), Namespace: namespace, Labels: labels,
			Annotations: map[string]string{warmSince: now.UTC().Format(time.RFC3339Nano)}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{WarmLabel: g.Name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					PriorityClassName:             WarmPriorityClass,
					TerminationGracePeriodSeconds: new(int64),
					AutomountServiceAccountToken:  new(bool),
					NodeSelector:                  map[string]string{GroupLabel: g.Name},
					Tolerations:                   tolerations,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: new(int64(65535)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name:  "pause",
						Image: PauseImage,
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("8Mi"), "nvidia.com/gpu": one},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Mi"), "nvidia.com/gpu": one},
						},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: new(false), ReadOnlyRootFilesystem: new(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}
}
