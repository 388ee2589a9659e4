package karpenter

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestCounted: a node's heartbeat changes nothing the groups' states read;
// its group, its going, a NodeClaim's registration or failure do.
func TestCounted(t *testing.T) {
	node := func(group string, beat int64, going bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{GroupLabel: group}, ResourceVersion: "1"}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, LastHeartbeatTime: metav1.Unix(beat, 0)}}
		if going {
			n.DeletionTimestamp = &metav1.Time{}
		}
		return n
	}
	claim := func(registered, launched, reason string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"labels": map[string]any{NodePoolLabel: "od"}}}}
		unstructured.SetNestedSlice(u.Object, []any{
			map[string]any{"type": "Launched", "status": launched, "reason": reason},
			map[string]any{"type": "Registered", "status": registered},
		}, "status", "conditions")
		return u
	}
	for _, c := range []struct {
		name string
		a, b any
		same bool
	}{
		{"a heartbeat", node("od", 1, false), node("od", 2, false), true},
		{"another group", node("od", 1, false), node("spot", 1, false), false},
		{"going", node("od", 1, false), node("od", 1, true), false},
		{"registered", claim("Unknown", "True", ""), claim("True", "True", ""), false},
		{"failed", claim("Unknown", "Unknown", ""), claim("Unknown", "False", "InsufficientCapacity"), false},
		{"nothing counted", claim("True", "True", ""), claim("True", "True", ""), true},
	} {
		if got := counted(c.a) == counted(c.b); got != c.same {
			t.Errorf("%s: same %v, want %v", c.name, got, c.same)
		}
	}
}
