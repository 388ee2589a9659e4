package nodes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestCPUFreeOn: what pods that have not ended request is taken from a
// node's allocatable CPU, in millicores; ended pods free theirs; never
// below zero.
func TestCPUFreeOn(t *testing.T) {
	pod := func(phase corev1.PodPhase, cpus ...string) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		for _, c := range cpus {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(c)}}})
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		alloc int64
		pods  []corev1.Pod
		want  int64
	}{
		{"empty", 2000, nil, 2000},
		{"a pod of a core and a half in two containers", 2000, []corev1.Pod{pod(corev1.PodRunning, "1", "500m")}, 500},
		{"an ended pod frees its cores", 2000, []corev1.Pod{pod(corev1.PodSucceeded, "2"), pod(corev1.PodFailed, "1"), pod(corev1.PodPending, "250m")}, 1750},
		{"overcommitted", 1000, []corev1.Pod{pod(corev1.PodRunning, "2")}, 0},
		{"a container without a request", 1000, []corev1.Pod{{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}}, 1000},
	} {
		if got := cpuFreeOn(tc.alloc, tc.pods); got != tc.want {
			t.Errorf("%s: %d millicores free, want %d", tc.name, got, tc.want)
		}
	}
}
