package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// NodeNameExtra is the key under which a TokenReview names the node of the
// pod a ServiceAccount token is bound to.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// ReviewToken implements telemetry.TokenReviewer with a TokenReview.
func (c *Cluster) ReviewToken(ctx context.Context, token, audience string) (telemetry.Review, error) {
	tr, err := c.core.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return telemetry.Review{}, classify(err, "tokenreviews", "")
	}
	st := tr.Status
	r := telemetry.Review{Authenticated: st.Authenticated, Username: st.User.Username, Audiences: st.Audiences, Error: st.Error}
	if n := st.User.Extra[NodeNameExtra]; len(n) == 1 {
		r.Node = n[0]
	}
	return r, nil
}

// LocatePod implements telemetry.PodLocator: the pod's node and the Gantry
// workload its label names.
func (c *Cluster) LocatePod(ctx context.Context, namespace, name string) (telemetry.PodPlace, error) {
	p, err := c.core.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return telemetry.PodPlace{}, nil
	}
	if err != nil {
		return telemetry.PodPlace{}, classify(err, "pods", namespace)
	}
	place := telemetry.PodPlace{Found: true, Node: p.Spec.NodeName}
	if p.Labels[render.LabelManagedBy] == render.ManagedBy {
		place.Workload = p.Labels[render.LabelWorkloadID]
	}
	return place, nil
}

// UnhealthyLabel marks a node Gantry cordoned for an unhealthy GPU.
const UnhealthyLabel = "gantry.dev/gpu-unhealthy"

// GPUUnhealthy records a Warning event GPUUnhealthy on each pod that uses
// the GPU and, with cordon, cordons the node and labels it UnhealthyLabel
// (so that the scheduler places nothing new there and operators can find
// it; uncordoning is theirs).
func (c *Cluster) GPUUnhealthy(ctx context.Context, node string, gpu telemetry.GPURecord, pods []telemetry.PodRef, cordon bool) error {
	now := metav1.NewTime(time.Now()) //clock:allow a Kubernetes object's time: the cluster compares wall times
	msg := fmt.Sprintf("GPU %d (%s) on node %s is unhealthy: %s", gpu.State.Index, gpu.State.GPU, node, gpu.Reason)
	for _, p := range pods {
		pod, err := c.core.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return classify(err, "pods", p.Namespace)
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: p.Name + ".gpu-", Namespace: p.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: pod.UID, APIVersion: "v1"},
			Reason:         "GPUUnhealthy", Message: msg, Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "gantry", Host: node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
		if _, err := c.core.CoreV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			return classify(err, "events", p.Namespace)
		}
	}
	if !cordon {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{UnhealthyLabel: "true"}},
		"spec":     map[string]any{"unschedulable": true},
	})
	if _, err := c.core.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "gantry"}); err != nil {
		return classify(err, "nodes", "")
	}
	return nil
}

// Telemetry adapts a lazily loaded cluster to what the telemetry service
// asks of it: token reviews, pod places and acting on unhealthy GPUs.
type Telemetry struct {
	Lazy   *Lazy
	Cordon bool // health.cordon: cordon and label nodes with an unhealthy GPU
}

// ReviewToken implements telemetry.TokenReviewer.
func (t Telemetry) ReviewToken(ctx context.Context, token, audience string) (telemetry.Review, error) {
	c, err := t.Lazy.get()
	if err != nil {
		return telemetry.Review{}, err
	}
	return c.ReviewToken(ctx, token, audience)
}

// LocatePod implements telemetry.PodLocator.
func (t Telemetry) LocatePod(ctx context.Context, namespace, name string) (telemetry.PodPlace, error) {
	c, err := t.Lazy.get()
	if err != nil {
		return telemetry.PodPlace{}, err
	}
	return c.LocatePod(ctx, namespace, name)
}

// GPUUnhealthy implements telemetry.Health.
func (t Telemetry) GPUUnhealthy(ctx context.Context, node string, gpu telemetry.GPURecord, pods []telemetry.PodRef) error {
	c, err := t.Lazy.get()
	if err != nil {
		return err
	}
	return c.GPUUnhealthy(ctx, node, gpu, pods, t.Cordon)
}
