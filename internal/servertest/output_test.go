package servertest

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/syncbuf"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// recordingTB is a test whose output and cleanups are kept, to be looked
// at, with the deadline given.
type recordingTB struct {
	testing.TB
	out      bytes.Buffer
	cleanups []func()
	deadline time.Time
}

func (r *recordingTB) Output() io.Writer { return &r.out }
func (r *recordingTB) Cleanup(fn func()) { r.cleanups = append(r.cleanups, fn) }
func (r *recordingTB) Name() string      { return "TestRecorded" }
func (r *recordingTB) Deadline() (time.Time, bool) {
	return r.deadline, !r.deadline.IsZero()
}

func (r *recordingTB) end() {
	for _, fn := range r.cleanups {
		fn()
	}
}

func TestTestOutputDropsLinesAfterTheTest(t *testing.T) {
	tb := &recordingTB{TB: t}
	w := testOutput(tb)
	if _, err := io.WriteString(w, "while the test runs\n"); err != nil {
		t.Fatal(err)
	}
	tb.end()
	if n, err := io.WriteString(w, "after it ended\n"); err != nil || n != len("after it ended\n") {
		t.Fatalf("a late line: %d, %v; want it taken and dropped", n, err)
	}
	if got := tb.out.String(); got != "while the test runs\n" {
		t.Fatalf("the test's output is %q", got)
	}
}

// Near the binary's deadline, a test's server's last lines go to standard
// error: a test killed by -timeout never prints its own output.
func TestTestOutputWritesItsTailNearTheDeadline(t *testing.T) {
	// The alarm fires 2 s in: far past the writes below (microseconds),
	// so the tail it writes is all of them on any machine.
	tb := &recordingTB{TB: t, deadline: time.Now().Add(30*time.Second + 2*time.Second)}
	var late syncbuf.Buffer
	w := testOutputTo(tb, &late)
	defer tb.end()
	for i := range tailLines + 5 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	waitfor.Until(t, 10*time.Second, "the tail written", func() error {
		if late.String() == "" {
			return fmt.Errorf("nothing written yet")
		}
		return nil
	})
	lines := strings.Split(strings.TrimSuffix(late.String(), "\n"), "\n")
	if len(lines) != tailLines+1 || !strings.HasPrefix(lines[0], "TestRecorded is still running") {
		t.Fatalf("wrote %d lines, first %q; want a header and the last %d", len(lines), lines[0], tailLines)
	}
	if lines[1] != "line 5" || lines[tailLines] != fmt.Sprintf("line %d", tailLines+4) {
		t.Fatalf("the tail runs from %q to %q; want line 5 to line %d", lines[1], lines[tailLines], tailLines+4)
	}
	if !strings.Contains(tb.out.String(), "line 0\n") {
		t.Fatal("the test's own output lost its first lines")
	}
}

// A test that ends first writes nothing at the deadline.
func TestTestOutputWritesNoTailAfterTheTest(t *testing.T) {
	tb := &recordingTB{TB: t, deadline: time.Now().Add(30*time.Second + 50*time.Millisecond)}
	var late syncbuf.Buffer
	w := testOutputTo(tb, &late)
	io.WriteString(w, "a line\n")
	tb.end()
	o := w.(*lockedOutput)
	o.writeTail(&late, "TestRecorded") // what a timer that fired late does
	if late.String() != "" {
		t.Fatalf("wrote %q after the test", late.String())
	}
}
