package gantry_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestFailuresSummary: .ci/failures, which ends a failed `make test`,
// repeats each failed test's last lines (slog lines left out, and the
// earlier lines past its limit counted), a package that failed in its
// TestMain with its last lines, a timeout with the tests it names, and a
// data race's report — and nothing of a package that passed.
func TestFailuresSummary(t *testing.T) {
	in := strings.Join([]string{
		"ok  \tpkg/ok\t1.0s",
		"--- FAIL: TestA (1.00s)",
		"    a_test.go:10: first",
		"time=2026-12-07T18:21:34.723Z level=ERROR msg=\"from another writer\"",
		"    time=2026-12-07T18:21:34.723Z level=ERROR msg=\"the server's own\"",
		"        a dump's second line",
		"    a_test.go:20: line 2",
		"    a_test.go:21: line 3",
		"    a_test.go:22: line 4",
		"    --- FAIL: TestA/sub (0.50s)",
		"        a_test.go:30: the subtest's reason",
		"FAIL",
		"FAIL\tpkg/a\t2.0s",
		"local cluster: kwokctl create cluster: exit status 1",
		"FAIL\tpkg/main\t0.5s",
		"panic: test timed out after 40m0s",
		"\trunning tests:",
		"\t\tTestSlow (39m58s)",
		"",
		"goroutine 12 [running]:",
		"testing.(*M).startAlarm.func1()",
		"",
		"goroutine 1 [chan receive]:",
		"testing.(*T).Run(...)",
		"FAIL\tpkg/slow\t2400.0s",
		"==================",
		"WARNING: DATA RACE",
		"Write at 0x00c000 by goroutine 7:",
		"  pkg/r.f()",
		"==================",
		"--- FAIL: TestR (0.10s)",
		"    testing.go:1490: race detected during execution of test",
		"FAIL",
		"FAIL\tpkg/r\t1.0s",
	}, "\n") + "\n"
	cmd := exec.Command("bash", ".ci/failures", "4")
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"--- FAIL: TestA (1.00s)",
		"    (1 earlier lines left out)",
		"        a dump's second line",
		"    a_test.go:20: line 2",
		"    a_test.go:21: line 3",
		"    a_test.go:22: line 4",
		"    --- FAIL: TestA/sub (0.50s)",
		"        a_test.go:30: the subtest's reason",
		"FAIL\tpkg/a\t2.0s",
		"    local cluster: kwokctl create cluster: exit status 1",
		"FAIL\tpkg/main\t0.5s",
		"panic: test timed out after 40m0s",
		"\trunning tests:",
		"\t\tTestSlow (39m58s)",
		"goroutine 12 [running]:",
		"testing.(*M).startAlarm.func1()",
		"FAIL\tpkg/slow\t2400.0s",
		"WARNING: DATA RACE",
		"Write at 0x00c000 by goroutine 7:",
		"  pkg/r.f()",
		"--- FAIL: TestR (0.10s)",
		"    testing.go:1490: race detected during execution of test",
		"FAIL\tpkg/r\t1.0s",
	}, "\n") + "\n"
	if string(out) != want {
		t.Errorf(".ci/failures wrote\n%s\nwant\n%s", out, want)
	}
}
