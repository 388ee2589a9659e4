// Package waitfor is the one way tests wait for something to happen: poll a
// condition until it holds or a deadline passes, then fail saying what was
// awaited and what was seen last. No test sleeps for a fixed time instead.
package waitfor

import (
	"testing"
	"time"
)

// Interval is how often a condition is asked.
const Interval = 100 * time.Millisecond

// Until asks cond every Interval until it returns nil, and fails the test
// with cond's last error when timeout passes first.
func Until(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("waited %v for %s: %v", timeout, what, err)
	}
}

// Poll asks cond every Interval until it returns nil (then Poll returns
// nil) or timeout passes (then Poll returns cond's last error). For code
// that cannot fail a test itself (benchmarks' helpers, goroutines).
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout) //clock:allow a test helper waits in wall time
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) { //clock:allow a test helper waits in wall time
			return err
		}
		time.Sleep(Interval)
	}
}
