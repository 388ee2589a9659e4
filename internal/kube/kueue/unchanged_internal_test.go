package kueue

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestUnchanged: an object is skipped only when what is wanted hashes as
// what was applied and the cluster's object is the one that apply left —
// the same uid (not one deleted and made anew) at the same generation
// (nobody edited it since).
func TestUnchanged(t *testing.T) {
	k := &Kueue{applied: map[string]applied{}}
	k.remember("ClusterQueue/q", &applied{hash: "h", uid: "u1", generation: 1})
	live := func(uid types.UID, gen int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetUID(uid)
		u.SetGeneration(gen)
		return u
	}
	for _, tc := range []struct {
		name, key, hash string
		live            *unstructured.Unstructured
		want            bool
	}{
		{"as applied", "ClusterQueue/q", "h", live("u1", 1), true},
		{"another wanted form", "ClusterQueue/q", "h2", live("u1", 1), false},
		{"edited since", "ClusterQueue/q", "h", live("u1", 2), false},
		{"made anew at the same generation", "ClusterQueue/q", "h", live("u2", 1), false},
		{"gone", "ClusterQueue/q", "h", nil, false},
		{"never applied", "ClusterQueue/r", "h", live("u1", 1), false},
	} {
		if got := k.unchanged(tc.key, tc.hash, tc.live); got != tc.want {
			t.Errorf("%s: unchanged %v, want %v", tc.name, got, tc.want)
		}
	}
	k.remember("ClusterQueue/q", nil)
	if k.unchanged("ClusterQueue/q", "h", live("u1", 1)) {
		t.Error("forgotten, still unchanged")
	}
}
