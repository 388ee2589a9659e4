package watch

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/workload"
)

// Observe derives a workload's phase from its Job (if any) and pods. ok is false
// when there is nothing to say yet. Only a Job's own conditions end a workload
// (Succeeded, Failed): a failed pod is retried by its Job (up to its backoff
// limit) or replaced by its Deployment or StatefulSet, so it speaks only while
// no other pod does, and then as Pending with its reason.
func Observe(id string, jobs []*batchv1.Job, pods []*corev1.Pod) (Observation, bool) {
	o := Observation{WorkloadID: id}
	for _, j := range jobs {
		if podsBehind(j, pods) {
			continue // its pods speak until the cache catches up
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				o.Phase, o.ExitCode, o.At = "Succeeded", exitCode(pods, corev1.PodSucceeded), c.LastTransitionTime.Time
				if j.Status.CompletionTime != nil {
					o.At = j.Status.CompletionTime.Time
				}
				return o, true
			case batchv1.JobFailed:
				o.Phase, o.Reason, o.ExitCode, o.At = "Failed", jobFailure(j, c, pods), exitCode(pods, corev1.PodFailed), c.LastTransitionTime.Time
				return o, true
			}
		}
	}
	// A Job MultiKueue runs on a worker has no pods here: the status it
	// copies back speaks.
	if len(pods) == 0 {
		for _, j := range jobs {
			if j.Spec.ManagedBy == nil || *j.Spec.ManagedBy != render.ManagedByMultiKueue {
				continue
			}
			switch {
			case j.Status.Ready != nil && *j.Status.Ready > 0:
				o.Phase = "Running"
				return o, true
			case j.Status.Active > 0:
				o.Phase = "Scheduled"
				return o, true
			}
		}
	}
	// The most advanced live pod speaks for the workload.
	best := -1
	var finished *corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			if finished == nil || p.CreationTimestamp.After(finished.CreationTimestamp.Time) {
				finished = p
			}
			continue
		}
		phase, reason, rank := podPhase(p)
		if rank > best {
			best, o.Phase, o.Reason, o.Node, o.At = rank, phase, reason, p.Spec.NodeName, time.Time{}
			if phase == "Running" {
				o.At = started(p)
			}
		}
	}
	if best >= 0 {
		return o, true
	}
	if finished == nil || (len(jobs) > 0 && finished.Status.Phase == corev1.PodSucceeded) {
		return o, false // nothing yet, or a Job that is about to say it completed
	}
	_, reason, _ := podPhase(finished)
	o.Phase, o.Reason = "Pending", "a pod ended and is being replaced or retried"
	if reason != "" {
		o.Reason += ": " + reason
	}
	return o, true
}

// podsBehind reports whether the pods' cache is behind a finished Job: the
// Job controller sets Complete or Failed only once every pod of the Job has
// ended (or is being deleted), so a pod of it still live here is an update
// the pods' informer has yet to deliver — the one that says why it ended
// (OOMKilled) and with what exit code. The Job's end waits for it, as long
// as the pods' informer is behind (a pod being deleted counts as ended).
func podsBehind(j *batchv1.Job, pods []*corev1.Pod) bool {
	finished := false
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			finished = true
		}
	}
	if !finished {
		return false
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
			continue
		}
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == j.UID {
			return true
		}
	}
	return false
}

func podPhase(p *corev1.Pod) (phase workload.Status, reason string, rank int) {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			limit := "its limit"
			for _, c := range p.Spec.Containers {
				if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && c.Name == cs.Name {
					limit = "its limit of " + q.String()
				}
			}
			if p.Status.Phase == corev1.PodFailed {
				return "Failed", "OOMKilled: the container used more memory than " + limit + ": launch it again with more memory", 5
			}
			// A pod that restarts its containers (a service, a notebook)
			// runs again: not the end of the workload.
			return "Scheduled", "OOMKilled: the container used more memory than " + limit + " and is restarting: give it more memory", 2
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
				return "Pending", pendingReason(c.Reason, c.Message), 1
			}
		}
	}
	return "Pending", "", 0
}

// exitCode is the exit code of the first container of the newest pod that
// ended in phase (nil when none says).
func exitCode(pods []*corev1.Pod, phase corev1.PodPhase) *int {
	if t := lastTerminated(pods, phase); t != nil {
		code := int(t.ExitCode)
		return &code
	}
	return nil
}

// jobFailure says why a Job failed: a pod killed for its memory, the
// template's max runtime reached (the Job's active deadline, which Gantry
// sets from lifecycle.maxRuntime), or the Job's own words.
func jobFailure(j *batchv1.Job, c batchv1.JobCondition, pods []*corev1.Pod) string {
	for _, p := range pods {
		if phase, reason, _ := podPhase(p); phase == "Failed" && strings.HasPrefix(reason, "OOMKilled") {
			return reason
		}
	}
	if c.Reason == batchv1.JobReasonDeadlineExceeded {
		// The deadline Kubernetes enforced, in the template's words when
		// they say the same.
		limit := j.Annotations[render.AnnotationMaxRuntime]
		if s := j.Spec.ActiveDeadlineSeconds; s != nil {
			enforced := time.Duration(*s) * time.Second
			if d, err := time.ParseDuration(limit); err != nil || d != enforced {
				limit = enforced.String()
			}
		}
		if limit != "" {
			return "MaxRuntime: it ran for its template's max runtime of " + limit + " and was stopped, its containers killed: save checkpoints and launch it again to go on"
		}
	}
	why := strings.TrimSpace(c.Reason + ": " + c.Message)
	if t := lastTerminated(pods, corev1.PodFailed); t != nil && t.ExitCode != 0 {
		why += fmt.Sprintf("; its container exited with code %d", t.ExitCode)
		if m := tail(t.Message); m != "" {
			why += ": " + m
		}
	}
	return why
}

// lastTerminated is how the first container of the newest pod that ended in
// phase ended (nil when none says).
func lastTerminated(pods []*corev1.Pod, phase corev1.PodPhase) *corev1.ContainerStateTerminated {
	var newest *corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == phase && (newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = p
		}
	}
	if newest == nil || len(newest.Spec.Containers) == 0 {
		return nil
	}
	for _, cs := range newest.Status.ContainerStatuses {
		if cs.Name == newest.Spec.Containers[0].Name && cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

// maxMessage is how much of a container's termination message a reason
// carries: its last lines (the message is the container's own, or with
// FallbackToLogsOnError the tail of its log, up to 2 KiB), on one line.
const maxMessage = 300

func tail(msg string) string {
	// The container's own bytes: valid UTF-8, no control characters (a NUL
	// is refused by PostgreSQL's text, an escape sequence would reach a
	// terminal through the CLI), whitespace runs as one space.
	msg = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(msg, "\uFFFD"))
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) <= maxMessage {
		return msg
	}
	cut := len(msg) - maxMessage
	for cut < len(msg) && !utf8.RuneStart(msg[cut]) {
		cut++
	}
	return "…" + msg[cut:]
}

// unboundClaim finds the claim a scheduler message says is missing or unbound.
var unboundClaim = regexp.MustCompile(`persistentvolumeclaim "([^"]+)" (?:not found|is being deleted)`)

// pendingReason says why a pod waits, plainly: waiting for a volume is said
// as such rather than in the scheduler's words ("persistentvolumeclaim … not
// found. not found", "pod has unbound immediate PersistentVolumeClaims").
func pendingReason(reason, message string) string {
	if m := unboundClaim.FindStringSubmatch(message); m != nil {
		return fmt.Sprintf("waiting for its volume %q: the claim is not yet bound to a volume (%s: %s)", m[1], reason, message)
	}
	if strings.Contains(message, "unbound immediate PersistentVolumeClaims") || strings.Contains(message, "unbound PersistentVolumeClaims") {
		return fmt.Sprintf("waiting for its volumes: a claim is not yet bound to a volume (%s: %s)", reason, message)
	}
	return fmt.Sprintf("%s: %s", reason, message)
}

// started is when a running pod's containers had all started: the latest
// of their start times (zero when one does not say).
func started(p *corev1.Pod) time.Time {
	var t time.Time
	for _, cs := range p.Status.ContainerStatuses {
		r := cs.State.Running
		if r == nil || r.StartedAt.IsZero() {
			return time.Time{}
		}
		if r.StartedAt.After(t) {
			t = r.StartedAt.Time
		}
	}
	return t
}

// lastTransition is when the newest of a pod's conditions last changed.
func lastTransition(p *corev1.Pod) time.Time {
	var t time.Time
	for _, c := range p.Status.Conditions {
		if c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}

// ObserveVM derives a vm workload's phase from its VirtualMachine's status.
// ok is false when there is nothing to say (no status yet, or stopping: a
// stop is recorded when asked for).
func ObserveVM(vm *unstructured.Unstructured) (Observation, bool) {
	id := vm.GetLabels()[render.LabelWorkloadID]
	if id == "" {
		return Observation{}, false
	}
	o := Observation{WorkloadID: id}
	status, _, _ := unstructured.NestedString(vm.Object, "status", "printableStatus")
	conds, _, _ := unstructured.NestedSlice(vm.Object, "status", "conditions")
	message := func(types ...string) string {
		for _, t := range types {
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == t && m["status"] != "" {
					if msg, _ := m["message"].(string); msg != "" {
						return msg
					}
					if r, _ := m["reason"].(string); r != "" {
						return r
					}
				}
			}
		}
		return ""
	}
	switch status {
	case "Running":
		o.Phase = "Running"
	case "Starting", "Migrating", "WaitingForVolumeBinding":
		o.Phase = "Scheduled"
	case "Provisioning", "WaitingForReceiver":
		o.Phase = "Pending"
	case "ErrorUnschedulable":
		o.Phase, o.Reason = "Pending", message("PodScheduled", "Failure")
		if o.Reason == "" {
			o.Reason = "no node can run this VM"
		}
	case "ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff", "ErrorPvcNotFound", "ErrorDataVolumeNotFound", "DataVolumeError":
		// KubeVirt keeps trying: not the end of the workload, but said.
		o.Phase, o.Reason = "Scheduled", status
		if strings.HasPrefix(status, "Error") || strings.HasPrefix(status, "DataVolume") {
			o.Phase = "Pending"
		}
		if m := message("Failure"); m != "" {
			o.Reason += ": " + m
		}
	default: // Stopped, Stopping, Terminating, Paused, Unknown, none yet
		return o, false
	}
	return o, true
}
