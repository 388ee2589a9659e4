package servertest

import (
	"bytes"
	"io"
	"testing"
)

// recordingTB is a test whose output and cleanups are kept, to be looked at.
type recordingTB struct {
	testing.TB
	out      bytes.Buffer
	cleanups []func()
}

func (r *recordingTB) Output() io.Writer { return &r.out }
func (r *recordingTB) Cleanup(fn func()) { r.cleanups = append(r.cleanups, fn) }

func TestTestOutputDropsLinesAfterTheTest(t *testing.T) {
	tb := &recordingTB{TB: t}
	w := testOutput(tb)
	if _, err := io.WriteString(w, "while the test runs\n"); err != nil {
		t.Fatal(err)
	}
	for _, fn := range tb.cleanups {
		fn()
	}
	if n, err := io.WriteString(w, "after it ended\n"); err != nil || n != len("after it ended\n") {
		t.Fatalf("a late line: %d, %v; want it taken and dropped", n, err)
	}
	if got := tb.out.String(); got != "while the test runs\n" {
		t.Fatalf("the test's output is %q", got)
	}
}
