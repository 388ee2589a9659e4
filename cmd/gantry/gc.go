package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// serveGCPercent is the garbage collector's target for gantry serve when
// GOGC is not set. Open streams (watches, followed logs, sockets) hold a
// live heap of their own that every cycle marks again; at Go's default of
// 100, 10,000 of them doubled other requests' p99 (docs/benchmarks.md).
// A soft memory limit (tuneGC) keeps the larger target inside the
// container's memory.
const serveGCPercent = 400

// tuneGC sets serve's GC target and, when GOMEMLIMIT is not set and the
// process runs under a cgroup v2 memory limit, a soft memory limit of 90%
// of it, so that the collector works harder near the limit instead of the
// kernel ending the process. It returns what it set, for the log.
func tuneGC(getenv func(string) string, cgroupMax string) (gcPercent int, memLimit int64) {
	gcPercent, memLimit = -1, -1
	if getenv("GOGC") == "" {
		gcPercent = serveGCPercent
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		if data, err := os.ReadFile(cgroupMax); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && n > 0 {
				memLimit = n / 10 * 9
				debug.SetMemoryLimit(memLimit)
			}
		}
	}
	return gcPercent, memLimit
}
