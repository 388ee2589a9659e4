package nodes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/render"
)

// Gantry's marks of a quarantined node: the taint (its effect as
// configured), the label operators find such nodes by, and the annotation
// that records the mark (JSON of quarantine.Mark). Only these are ever
// removed by Unmark.
const (
	QuarantineTaint      = "gantry.dev/gpu-quarantine"
	QuarantineAnnotation = "gantry.dev/quarantine"
	// LabelPreflight names the node a preflight Job checks.
	LabelPreflight = "gantry.dev/preflight"
)

// PreflightOptions say what a preflight check runs: the image (gantry-agent's,
// whose "check" command reads every GPU of the node through NVML and fails
// on an unhealthy one), its command, and the RuntimeClass that gives it the
// node's GPUs ("": none).
type PreflightOptions struct {
	Namespace    string
	Image        string
	Command      []string
	RuntimeClass string
}

// Marks lists the nodes that carry Gantry's quarantine label, with the mark
// each records.
func (k *Nodes) Marks(ctx context.Context) ([]quarantine.Mark, error) {
	list, err := k.core.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: UnhealthyLabel + "=true"})
	if err != nil {
		return nil, kapi.Classify(err, "nodes", "")
	}
	var out []quarantine.Mark
	for _, n := range list.Items {
		if !tainted(n) {
			continue // labelled by an older Gantry's cordon, or by hand: not a quarantine
		}
		m := quarantine.Mark{Node: n.Name}
		if a := n.Annotations[QuarantineAnnotation]; a != "" {
			_ = json.Unmarshal([]byte(a), &m) // a damaged record still marks the node
			m.Node = n.Name
		}
		out = append(out, m)
	}
	return out, nil
}

func tainted(n corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == QuarantineTaint })
}

// Mark taints and labels the node and records m on it. A node that carries
// Gantry's taint already keeps the mark recorded there (its label and
// record put back if someone removed them): Mark returns the mark in force
// and whether it tainted the node now.
func (k *Nodes) Mark(ctx context.Context, m quarantine.Mark, effect string) (quarantine.Mark, bool, error) {
	var out quarantine.Mark
	var added bool
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		out, added = m, false
		n, err := k.core.CoreV1().Nodes().Get(ctx, m.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		recorded := false
		if tainted(*n) {
			var was quarantine.Mark
			if a := n.Annotations[QuarantineAnnotation]; a != "" && json.Unmarshal([]byte(a), &was) == nil && !was.At.IsZero() {
				out, recorded = was, true
				out.Node = n.Name
			}
		} else {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: QuarantineTaint, Value: "true", Effect: corev1.TaintEffect(effect)})
			added = true
		}
		if !added && recorded && n.Labels[UnhealthyLabel] == "true" {
			return nil
		}
		rec, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("the quarantine record of node %s: %w", m.Node, err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Labels[UnhealthyLabel] = "true"
		n.Annotations[QuarantineAnnotation] = string(rec)
		_, err = k.core.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: kapi.FieldManager})
		return err
	})
	return out, added, kapi.Classify(err, "nodes", "")
}

// Unmark removes Gantry's taint, label and record from the node: an
// operator's own taints, and a cordon, stay.
func (k *Nodes) Unmark(ctx context.Context, node string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.core.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == QuarantineTaint })
		delete(n.Labels, UnhealthyLabel)
		delete(n.Annotations, QuarantineAnnotation)
		_, err = k.core.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: kapi.FieldManager})
		return err
	})
	return kapi.Classify(err, "nodes", "")
}

// workloadPods are the pods of a workload in namespace that are not
// terminating and have not ended.
func (k *Nodes) workloadPods(ctx context.Context, namespace, workloadID, node string) ([]corev1.Pod, error) {
	o := metav1.ListOptions{LabelSelector: labels.Set{render.LabelWorkloadID: workloadID}.String()}
	if node != "" {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}
	list, err := k.core.CoreV1().Pods(namespace).List(ctx, o)
	if err != nil {
		return nil, kapi.Classify(err, "pods", namespace)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}

// PodsOn lists a workload's live pods on a node, each with the volume
// claims only that node reaches (PinnedTo).
func (k *Nodes) PodsOn(ctx context.Context, namespace, workloadID, node string) ([]quarantine.Pod, error) {
	pods, err := k.workloadPods(ctx, namespace, workloadID, node)
	if err != nil {
		return nil, err
	}
	var out []quarantine.Pod
	for _, p := range pods {
		qp := quarantine.Pod{Namespace: p.Namespace, Name: p.Name, Created: p.CreationTimestamp.Time}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			pinned, err := k.pinned(ctx, p.Namespace, v.PersistentVolumeClaim.ClaimName, node)
			if err != nil {
				return nil, err
			}
			if pinned {
				qp.Pinned = append(qp.Pinned, v.PersistentVolumeClaim.ClaimName)
			}
		}
		out = append(out, qp)
	}
	return out, nil
}

// pinned reports whether a claim's volume can only be reached from node.
func (k *Nodes) pinned(ctx context.Context, namespace, claim, node string) (bool, error) {
	pvc, err := k.core.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, kapi.Classify(err, "persistentvolumeclaims", namespace)
	}
	if pvc.Spec.VolumeName == "" {
		return false, nil
	}
	pv, err := k.core.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, kapi.Classify(err, "persistentvolumes", "")
	}
	return PinnedTo(pv, node), nil
}

// PinnedTo reports whether a volume can only be reached from node: its
// required node affinity (which every local volume has) names only that
// node's hostname — as the scheduler sees it, the pod can run nowhere
// else. A volume without node affinity is taken to be reachable from any
// node, as the scheduler takes it.
func PinnedTo(pv *corev1.PersistentVolume, node string) bool {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return false
	}
	terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		only := false
		for _, e := range t.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == node {
				only = true
			}
		}
		if !only {
			return false // some term lets another node reach it
		}
	}
	return true
}

// PodNodes lists the nodes a workload's running pods are on, sorted.
func (k *Nodes) PodNodes(ctx context.Context, namespace, workloadID string) ([]string, error) {
	pods, err := k.workloadPods(ctx, namespace, workloadID, "")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" && !slices.Contains(out, p.Spec.NodeName) {
			out = append(out, p.Spec.NodeName)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Evict evicts a pod through the Eviction API (a pod already gone is not
// an error; one a disruption budget protects is fault.Unavailable, tried
// again on the next pass).
func (k *Nodes) Evict(ctx context.Context, namespace, name string) error {
	err := k.core.PolicyV1().Evictions(namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}})
	switch {
	case err == nil || apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		return &fault.Unavailable{What: "eviction of pod " + namespace + "/" + name, Err: err}
	}
	return kapi.Classify(err, "pods", namespace)
}

// preflightName is the node's preflight Job: a name Kubernetes accepts
// whatever the node's.
func preflightName(node string) string {
	sum := sha256.Sum256([]byte(node))
	return "gantry-preflight-" + hex.EncodeToString(sum[:6])
}

// Preflight starts the node's preflight Job if there is none — one pod on
// that node (its name set, every taint tolerated), gantry-agent's check —
// and says where it stands.
func (k *Nodes) Preflight(ctx context.Context, node string, o PreflightOptions) (quarantine.Preflight, error) {
	jobs := k.core.BatchV1().Jobs(o.Namespace)
	name := preflightName(node)
	j, err := jobs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		j, err = jobs.Create(ctx, preflightJob(name, node, o), metav1.CreateOptions{FieldManager: kapi.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return quarantine.Preflight{State: quarantine.PreflightRunning}, nil
		}
	}
	if err != nil {
		return quarantine.Preflight{}, kapi.Classify(err, "jobs", o.Namespace)
	}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return quarantine.Preflight{State: quarantine.PreflightPassed, Done: c.LastTransitionTime.Time}, nil
		case batchv1.JobFailed:
			why := c.Reason
			if c.Message != "" {
				why += ": " + c.Message
			}
			return quarantine.Preflight{State: quarantine.PreflightFailed, Done: c.LastTransitionTime.Time, Why: why}, nil
		}
	}
	return quarantine.Preflight{State: quarantine.PreflightRunning}, nil
}

func preflightJob(name, node string, o PreflightOptions) *batchv1.Job {
	no := false
	yes := true
	uid := int64(65534)
	lbl := map[string]string{LabelPreflight: preflightName(node)[len("gantry-preflight-"):], "app.kubernetes.io/managed-by": "gantry"}
	pod := corev1.PodSpec{
		NodeName:                     node,
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: &no,
		EnableServiceLinks:           &no,
		// Its name set, the scheduler is not asked: only a NoExecute taint
		// keeps it off, and only Gantry's own is tolerated.
		Tolerations: []corev1.Toleration{{Key: QuarantineTaint, Operator: corev1.TolerationOpExists}},
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{
			Name: "check", Image: o.Image, Command: o.Command,
			Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "utility"},
				{Name: "NODE_NAME", Value: node}},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}},
		}},
	}
	if o.RuntimeClass != "" {
		pod.RuntimeClassName = &o.RuntimeClass
	}
	backoff, deadline := int32(0), int64(600)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: lbl,
			Annotations: map[string]string{QuarantineAnnotation: fmt.Sprintf("preflight check of node %s", node)}},
		Spec: batchv1.JobSpec{BackoffLimit: &backoff, ActiveDeadlineSeconds: &deadline,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: pod}},
	}
}

// ClearPreflight removes the node's preflight Job and its pod.
func (k *Nodes) ClearPreflight(ctx context.Context, node string, o PreflightOptions) error {
	bg := metav1.DeletePropagationBackground
	err := k.core.BatchV1().Jobs(o.Namespace).Delete(ctx, preflightName(node), metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return kapi.Classify(err, "jobs", o.Namespace)
	}
	return nil
}
