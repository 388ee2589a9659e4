package e2e_test

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// The suite's tests run in three groups at once (see the note on TestMain),
// each with a gate of its own:
//
//   - alone: the tests of the simulated fleet, one at a time;
//   - beside: the slow tests that run Gantry as processes of their own, two
//     at a time;
//   - the real node's tests (holdRealNode), as many at once as the node has
//     slots; of those waiting for one, the one that holds it longest first
//     (which two start first is the scheduler's choice).
//
// Every running server rewrites, from its policy, the ClusterQueue of every
// team with a namespace on the cluster. So the tests that give a team other
// tests use quotas of its own, or a budget that holds its queue (block:
// TestApprovalsAndBudgets, TestPortalTeamView, team vision), stay serial:
// Go runs them before any parallel test, when no other server runs. (A
// budget under require-approval changes no queue.)
var (
	aloneGate  = make(chan struct{}, 1)
	besideGate = make(chan struct{}, 2)
	realNodes  = newSlots(2, []string{
		// The longest holds of a slot first, so that the two slots end
		// close together rather than with a test of two minutes started
		// last.
		"TestCPUNotebookIdleCulled",
		"TestCPUTrainingEvictedFromSpot",
		"TestMaxRuntimeKillsContainer",
		"TestCPUTrainingStoppedAndStarted",
		"TestCPUTrainingResumes",
		"TestCPUNotebookRunsCode",
		"TestCPUJobRunsForReal",
		"TestPortalCPUNotebook",
		"TestCPUCoresQuota",
		"TestCPUInferenceService",
		// Both slots, last: each ends both together.
		"TestCPUTrainingMovedOffFailedGPU",
		"TestGantryAsAPod",
	})
)

// alone runs t in parallel, one alone test at a time.
func alone(t *testing.T) {
	t.Helper()
	t.Parallel()
	hold(t, aloneGate)
}

// beside runs t in parallel, two beside tests at a time.
func beside(t *testing.T) {
	t.Helper()
	t.Parallel()
	hold(t, besideGate)
}

// hold takes a place at gate until t's cleanups are done.
func hold(t *testing.T, gate chan struct{}) {
	gate <- struct{}{}
	t.Cleanup(func() { <-gate })
}

// holdRealNode takes n slots on the real node until the test's cleanups
// (its workloads' deletion asked for among them) are done: call it first.
func holdRealNode(t *testing.T, n int) {
	t.Helper()
	waited := realNodes.take(t.Name(), n)
	start := time.Now()
	t.Logf("the real node: %d slots after %s", n, waited.Round(time.Second))
	t.Cleanup(func() {
		t.Logf("the real node: %d slots held %s", n, time.Since(start).Round(time.Second))
		realNodes.give(n)
	})
}

// slots are the real node's: as many tests at once as it has cores for their
// pods (each asks for one; CI's machine has two), the waiting test of the
// lowest rank first.
type slots struct {
	mu      sync.Mutex
	changed sync.Cond
	free    int
	order   []string
	waiting []*waiter
}

type waiter struct{ rank int }

func newSlots(n int, order []string) *slots {
	s := &slots{free: n, order: order}
	s.changed.L = &s.mu
	return s
}

// take waits until n slots are free and test is, of the tests waiting, the
// first in order (a test not in it comes last; equals in the order they
// came), and takes them.
func (s *slots) take(test string, n int) time.Duration {
	begin := time.Now()
	w := &waiter{s.rank(test)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = append(s.waiting, w)
	for s.free < n || slices.MinFunc(s.waiting, func(a, b *waiter) int { return a.rank - b.rank }) != w {
		s.changed.Wait()
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(x *waiter) bool { return x == w })
	s.free -= n
	s.changed.Broadcast()
	return time.Since(begin)
}

// rank is test's place in the order; a test not in it comes last.
func (s *slots) rank(test string) int {
	if i := slices.Index(s.order, test); i >= 0 {
		return i
	}
	return len(s.order)
}

func (s *slots) give(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free += n
	s.changed.Broadcast()
}
