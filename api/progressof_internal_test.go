package api

import "testing"

// TestProgressOf: only a progress route of an id that can be a workload's
// sends a run's token to be reviewed; anything else (selector syntax, a
// deeper path, another route) does not.
func TestProgressOf(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/api/v1/workloads/k7f3x9q2ab/progress", "k7f3x9q2ab"},
		{"/api/v1/workloads/k7f3x9q2ab/metrics", ""},
		{"/api/v1/workloads//progress", ""},
		{"/api/v1/workloads/a,b!=c/progress", ""},
		{"/api/v1/workloads/k7f3x9q2ab/x/progress", ""},
		{"/api/v1/workloads/K7F3X9Q2AB/progress", ""},
		{"/api/v1/trials/k7f3x9q2ab/progress", ""},
	} {
		if got := progressOf(tc.path); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.path, got, tc.want)
		}
	}
}
