package devcluster

import (
	"bytes"
	"testing"
	"time"
)

// TestJobRuntime: a worker cluster's Jobs run as long as it says; the
// other stages keep their delays.
func TestJobRuntime(t *testing.T) {
	base := kwokctlConfig("/bin", "/log", "/app.py", "/audit", "/pki", false, 0)
	long := kwokctlConfig("/bin", "/log", "/app.py", "/audit", "/pki", false, time.Hour)
	if !bytes.Contains(long, []byte("durationMilliseconds: 3600000\n    durationFrom:\n      expressionFrom: '.metadata.annotations[\"pod-complete.stage.kwok.x-k8s.io/delay\"]'")) {
		t.Fatal("the pod-complete stage's delay is not the Job runtime")
	}
	if bytes.Contains(base, []byte("3600000")) || bytes.Count(base, []byte("durationMilliseconds")) != bytes.Count(long, []byte("durationMilliseconds")) {
		t.Error("the stages changed beyond the one delay")
	}
}
