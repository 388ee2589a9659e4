package watch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantryhq/gantry/internal/render"
)

// ownedJob is j with uid.
func ownedJob(j *batchv1.Job, uid types.UID) *batchv1.Job {
	j = j.DeepCopy()
	j.Name, j.UID = "job-"+string(uid), uid
	return j
}

func TestObserve(t *testing.T) {
	unschedulable := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/9 nodes are available: 9 Insufficient nvidia.com/gpu.",
	}}}}
	scheduled := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "h100-0"}, Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}}
	pulling := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}}}
	running := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "h100-mig-0"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	oom := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}}
	oomRestarting := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "h100-0"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}}
	failedRetry := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Error"}}
	pendingJob := &batchv1.Job{}
	complete := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
	deadline := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"}}}}
	maxRuntime := deadline.DeepCopy()
	maxRuntime.Annotations = map[string]string{render.AnnotationMaxRuntime: "20s"}
	maxRuntime.Spec.ActiveDeadlineSeconds = new(int64(20))
	changed := maxRuntime.DeepCopy() // the deadline set otherwise than the template said
	changed.Spec.ActiveDeadlineSeconds = new(int64(3))
	activeDeadline := deadline.DeepCopy()
	activeDeadline.Spec.ActiveDeadlineSeconds = new(int64(7200))
	// Jobs MultiKueue runs on a worker: no pods here, the status copied back.
	mk := func(active, ready int32) *batchv1.Job {
		return &batchv1.Job{Spec: batchv1.JobSpec{ManagedBy: new("kueue.x-k8s.io/multikueue")}, Status: batchv1.JobStatus{Active: active, Ready: &ready}}
	}
	mkDone := mk(0, 0)
	mkDone.Status.Conditions = complete.Status.Conditions
	// The pods' cache behind the Job's: the Job failed (its pod killed
	// for its memory), the pod's last update not yet here.
	ownedBy := func(p *corev1.Pod, j *batchv1.Job) *corev1.Pod {
		p = p.DeepCopy()
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: j.Name, UID: j.UID, Controller: new(true)}}
		return p
	}
	failedJob := deadline.DeepCopy()
	failedJob.Name, failedJob.UID = "job", "uid-1"
	stillRunning := ownedBy(running, failedJob)
	otherJobs := ownedBy(running, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job", UID: "uid-0"}})
	deleting := ownedBy(running, failedJob)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(700, 0)}
	tests := []struct {
		name         string
		jobs         []*batchv1.Job
		pods         []*corev1.Pod
		phase, their string
		node         string
	}{
		{"unschedulable", nil, []*corev1.Pod{unschedulable}, "Pending", "Insufficient nvidia.com/gpu", ""},
		{"scheduled", nil, []*corev1.Pod{scheduled}, "Scheduled", "", "h100-0"},
		{"image pull", nil, []*corev1.Pod{pulling}, "Scheduled", "ImagePullBackOff", ""},
		{"running wins", nil, []*corev1.Pod{unschedulable, running}, "Running", "", "h100-mig-0"},
		{"job complete", []*batchv1.Job{complete}, []*corev1.Pod{running}, "Succeeded", "", ""},
		{"deadline", []*batchv1.Job{deadline}, nil, "Failed", "DeadlineExceeded", ""},
		{"max runtime", []*batchv1.Job{maxRuntime}, nil, "Failed", "MaxRuntime: it ran for its template's max runtime of 20s and was stopped", ""},
		{"active deadline", []*batchv1.Job{activeDeadline}, nil, "Failed", "max runtime of 2h0m0s", ""},
		{"the deadline enforced", []*batchv1.Job{changed}, nil, "Failed", "max runtime of 3s and was stopped", ""},
		{"OOM", []*batchv1.Job{deadline}, []*corev1.Pod{oom}, "Failed", "OOMKilled: the container used more memory than its limit of 128Mi: launch it again with more memory", ""},
		{"the pods' cache behind", []*batchv1.Job{failedJob}, []*corev1.Pod{stillRunning}, "Running", "", "h100-mig-0"},
		{"the pods' cache caught up", []*batchv1.Job{failedJob}, []*corev1.Pod{ownedBy(oom, failedJob)}, "Failed", "OOMKilled: the container used more memory than its limit of 128Mi", ""},
		{"the Job's end, another Job's pod", []*batchv1.Job{failedJob}, []*corev1.Pod{otherJobs}, "Failed", "DeadlineExceeded", ""},
		{"the Job's end, its pod being deleted", []*batchv1.Job{failedJob}, []*corev1.Pod{deleting}, "Failed", "DeadlineExceeded", ""},
		{"complete, its pod's end not yet here", []*batchv1.Job{ownedJob(complete, "uid-2")}, []*corev1.Pod{ownedBy(running, ownedJob(complete, "uid-2"))}, "Running", "", "h100-mig-0"},
		// A service's container killed for memory restarts: not the end.
		{"OOM, restarting", nil, []*corev1.Pod{oomRestarting}, "Scheduled", "OOMKilled", "h100-0"},
		// A Job's failed pod, retried: the retry speaks, not the failure.
		{"job retry running", []*batchv1.Job{pendingJob}, []*corev1.Pod{failedRetry, running}, "Running", "", "h100-mig-0"},
		{"job retry not yet made", []*batchv1.Job{pendingJob}, []*corev1.Pod{failedRetry}, "Pending", "being replaced or retried", ""},
		{"on a worker, running", []*batchv1.Job{mk(1, 1)}, nil, "Running", "", ""},
		{"on a worker, starting", []*batchv1.Job{mk(1, 0)}, nil, "Scheduled", "", ""},
		{"on a worker, done", []*batchv1.Job{mkDone}, nil, "Succeeded", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := Observe("w", tc.jobs, tc.pods)
			if !ok || string(o.Phase) != tc.phase || o.Node != tc.node || (tc.their != "" && !strings.Contains(o.Reason, tc.their)) || (tc.their == "" && o.Reason != "") {
				t.Fatalf("%+v", o)
			}
		})
	}
	if _, ok := Observe("w", nil, nil); ok {
		t.Fatal("nothing to observe, yet an observation")
	}
	// Not yet dispatched: the Kueue Workload speaks (Dispatching).
	if _, ok := Observe("w", []*batchv1.Job{mk(0, 0)}, nil); ok {
		t.Fatal("a Job not yet on a worker, yet an observation")
	}
	// A Job of this cluster with no pods yet says nothing of its status.
	here := &batchv1.Job{Status: batchv1.JobStatus{Active: 1, Ready: new(int32(1))}}
	if _, ok := Observe("w", []*batchv1.Job{here}, nil); ok {
		t.Fatal("a Job of this cluster observed without its pods")
	}
}

// TestObserveAt: the time the cluster says a phase began — a Job's
// completion, its failure, a running pod's containers' start — and none
// when it does not say (a container not yet running, a pending pod).
func TestObserveAt(t *testing.T) {
	at := func(sec int64) metav1.Time { return metav1.NewTime(time.Unix(sec, 0).UTC()) }
	runningSince := func(starts ...int64) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, s := range starts {
			st := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
			if s > 0 {
				st = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(s)}}
			}
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{State: st})
		}
		return p
	}
	done := at(500)
	complete := &batchv1.Job{Status: batchv1.JobStatus{CompletionTime: &done, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: at(501)}}}}
	completeNoTime := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: at(502)}}}}
	failed := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: at(600)}}}}
	for _, tc := range []struct {
		name string
		jobs []*batchv1.Job
		pods []*corev1.Pod
		want int64 // 0: not said
	}{
		{"completed", []*batchv1.Job{complete}, nil, 500},
		{"completed, no completion time", []*batchv1.Job{completeNoTime}, nil, 502},
		{"failed", []*batchv1.Job{failed}, nil, 600},
		{"running: the last container's start", nil, []*corev1.Pod{runningSince(100, 130)}, 130},
		{"running, a container not yet", nil, []*corev1.Pod{runningSince(100, 0)}, 0},
		{"pending", nil, []*corev1.Pod{{Status: corev1.PodStatus{Phase: corev1.PodPending}}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := Observe("w", tc.jobs, tc.pods)
			if !ok {
				t.Fatal("no observation")
			}
			if want := time.Unix(tc.want, 0).UTC(); (tc.want == 0 && !o.At.IsZero()) || (tc.want != 0 && !o.At.Equal(want)) {
				t.Fatalf("at %v, want %v (0: none)", o.At, tc.want)
			}
		})
	}
}

// TestObserveExitCode: an ended Job says what its main container (the
// first) exited with, from its newest pod that ended that way.
func TestObserveExitCode(t *testing.T) {
	ended := func(phase corev1.PodPhase, at int64, codes ...int32) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		p.CreationTimestamp.Time = time.Unix(at, 0)
		for i, c := range codes {
			name := fmt.Sprintf("c%d", i)
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name})
			// Statuses in another order than the containers: matched by name.
			p.Status.ContainerStatuses = append([]corev1.ContainerStatus{{Name: name,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: c}}}}, p.Status.ContainerStatuses...)
		}
		return p
	}
	complete := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
	failed := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}}}
	for _, tc := range []struct {
		name string
		job  *batchv1.Job
		pods []*corev1.Pod
		want int // -1: none
	}{
		{"succeeded", complete, []*corev1.Pod{ended(corev1.PodSucceeded, 1, 0)}, 0},
		{"failed, newest retry", failed, []*corev1.Pod{ended(corev1.PodFailed, 2, 2), ended(corev1.PodFailed, 1, 1)}, 2},
		{"main container, not the sidecar", failed, []*corev1.Pod{ended(corev1.PodFailed, 1, 7, 0)}, 7},
		{"no pods left", failed, nil, -1},
		{"not terminated", complete, []*corev1.Pod{{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c0"}}}}}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := Observe("w", []*batchv1.Job{tc.job}, tc.pods)
			if !ok {
				t.Fatal("no observation")
			}
			switch {
			case tc.want < 0 && o.ExitCode != nil:
				t.Fatalf("exit code %d, want none", *o.ExitCode)
			case tc.want >= 0 && (o.ExitCode == nil || *o.ExitCode != tc.want):
				t.Fatalf("exit code %v, want %d", o.ExitCode, tc.want)
			}
		})
	}
	if o, _ := Observe("w", nil, []*corev1.Pod{{Status: corev1.PodStatus{Phase: corev1.PodRunning}}}); o.ExitCode != nil {
		t.Fatal("a running pod has an exit code")
	}
}

func TestObserveVM(t *testing.T) {
	vm := func(printable string, conds ...map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetLabels(map[string]string{"gantry.dev/workload-id": "vm1"})
		var cs []any
		for _, c := range conds {
			cs = append(cs, c)
		}
		if printable != "" {
			unstructured.SetNestedField(u.Object, map[string]any{"printableStatus": printable, "conditions": cs}, "status")
		}
		return u
	}
	for _, c := range []struct {
		vm            *unstructured.Unstructured
		phase, reason string
		ok            bool
	}{
		{vm(""), "", "", false},
		{vm("Provisioning"), "Pending", "", true},
		{vm("Starting"), "Scheduled", "", true},
		{vm("Running", map[string]any{"type": "Ready", "status": "True"}), "Running", "", true},
		{vm("ErrorUnschedulable", map[string]any{"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}), "Pending", "0/3 nodes are available", true},
		{vm("ErrorUnschedulable"), "Pending", "no node can run this VM", true},
		{vm("ErrImagePull", map[string]any{"type": "Failure", "status": "True", "message": "manifest unknown"}), "Scheduled", "ErrImagePull: manifest unknown", true},
		{vm("CrashLoopBackOff"), "Scheduled", "CrashLoopBackOff", true},
		{vm("ErrorPvcNotFound"), "Pending", "ErrorPvcNotFound", true},
		{vm("Stopped"), "", "", false},
	} {
		o, ok := ObserveVM(c.vm)
		if ok != c.ok || string(o.Phase) != c.phase || o.Reason != c.reason {
			t.Errorf("%v: got %+v %v, want %s %q %v", c.vm.Object["status"], o, ok, c.phase, c.reason, c.ok)
		}
	}
}

// TestObserveFailureMessage: a failed Job's reason carries its main
// container's exit code and the end of its termination message (its own,
// or its log's tail), on one line and clipped; an exit 0 or no pod adds
// nothing.
func TestObserveFailureMessage(t *testing.T) {
	failed := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
		Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}}}}
	pod := func(code int32, msg string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}, Status: corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}}}}}}
	}
	long := strings.Repeat("é", 400) + "x the end" // 809 bytes: the cut at 509 falls inside an é, and moves past it
	const base = "BackoffLimitExceeded: Job has reached the specified backoff limit"
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want string
	}{
		{"exit 3 with its log's last lines", []*corev1.Pod{pod(3, "step 1\nabout to fail\n")}, base + "; its container exited with code 3: step 1 about to fail"},
		{"no message", []*corev1.Pod{pod(1, "")}, base + "; its container exited with code 1"},
		{"clipped to its end, whole characters", []*corev1.Pod{pod(2, long)}, base + "; its container exited with code 2: …" + long[len(long)-299:]},
		{"control characters and bad UTF-8 made plain", []*corev1.Pod{pod(4, "a\x00b\x1b[31mred\xff\xfe end")}, base + "; its container exited with code 4: a b [31mred\uFFFD end"},
		{"exit 0 (killed by the Job, say)", []*corev1.Pod{pod(0, "bye")}, base},
		{"no pods left", nil, base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _ := Observe("w", []*batchv1.Job{failed}, tc.pods)
			if o.Reason != tc.want {
				t.Fatalf("reason %q,\nwant   %q", o.Reason, tc.want)
			}
		})
	}
}
