package waitfor

import (
	"errors"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(time.Minute, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("err %v after %d asks, want nil after 3", err, n)
	}
	start := time.Now()
	err := Poll(3*Interval, func() error { return errors.New("never") })
	if err == nil || err.Error() != "never" || time.Since(start) < 3*Interval {
		t.Fatalf("err %v after %v, want the last error after the timeout", err, time.Since(start))
	}
}
