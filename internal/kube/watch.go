package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/render"
)

// Observation is what the cluster says about one workload.
type Observation struct {
	WorkloadID string
	Phase      string // Pending, Scheduled, Running, Succeeded or Failed
	Reason     string // why it is pending or failed, in the cluster's words
	Node       string
}

// Watch keeps informers (watches, not polling) on the pods and Jobs Gantry
// manages and calls report with a workload's observed state whenever one of its
// objects changes, until ctx ends.
func (c *Cluster) Watch(ctx context.Context, report func(Observation)) error {
	f := informers.NewSharedInformerFactoryWithOptions(c.core, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = render.LabelManagedBy + "=" + render.ManagedBy
		}))
	pods := f.Core().V1().Pods()
	jobs := f.Batch().V1().Jobs()
	onChange := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		id := m.GetLabels()[render.LabelWorkloadID]
		if id == "" {
			return
		}
		sel := labels.SelectorFromSet(labels.Set{render.LabelWorkloadID: id})
		ps, _ := pods.Lister().Pods(m.GetNamespace()).List(sel)
		js, _ := jobs.Lister().Jobs(m.GetNamespace()).List(sel)
		if obs, ok := Observe(id, js, ps); ok {
			report(obs)
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: onChange, UpdateFunc: func(_, n any) { onChange(n) }, DeleteFunc: onChange}
	if _, err := pods.Informer().AddEventHandler(h); err != nil {
		return err
	}
	if _, err := jobs.Informer().AddEventHandler(h); err != nil {
		return err
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	if c.hasKubeVirt() {
		go c.watchVMs(ctx, report)
	}
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// Observe derives a workload's phase from its Job (if any) and pods. ok is false
// when there is nothing to say yet.
func Observe(id string, jobs []*batchv1.Job, pods []*corev1.Pod) (Observation, bool) {
	o := Observation{WorkloadID: id}
	for _, j := range jobs {
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				o.Phase = "Succeeded"
				return o, true
			case batchv1.JobFailed:
				o.Phase, o.Reason = "Failed", jobFailure(c, pods)
				return o, true
			}
		}
	}
	if len(pods) == 0 {
		return o, false
	}
	// The most advanced pod speaks for the workload.
	best := -1
	for _, p := range pods {
		phase, reason, rank := podPhase(p)
		if rank > best {
			best, o.Phase, o.Reason, o.Node = rank, phase, reason, p.Spec.NodeName
		}
	}
	return o, true
}

func podPhase(p *corev1.Pod) (phase, reason string, rank int) {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			return "Failed", "OOMKilled: the container used more memory than its limit", 5
		}
		if w := cs.State.Waiting; w != nil && (w.Reason == "ImagePullBackOff" || w.Reason == "ErrImagePull" || w.Reason == "CrashLoopBackOff") {
			return "Scheduled", strings.TrimSpace(w.Reason + ": " + w.Message), 2
		}
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return "Succeeded", "", 6
	case corev1.PodFailed:
		return "Failed", strings.TrimSpace(p.Status.Reason + " " + p.Status.Message), 5
	case corev1.PodRunning:
		return "Running", "", 4
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			if c.Status == corev1.ConditionTrue {
				return "Scheduled", "", 3
			}
			if c.Reason != "" {
				return "Pending", fmt.Sprintf("%s: %s", c.Reason, c.Message), 1
			}
		}
	}
	return "Pending", "", 0
}

func jobFailure(c batchv1.JobCondition, pods []*corev1.Pod) string {
	for _, p := range pods {
		if phase, reason, _ := podPhase(p); phase == "Failed" && strings.HasPrefix(reason, "OOMKilled") {
			return reason
		}
	}
	return strings.TrimSpace(c.Reason + ": " + c.Message)
}
