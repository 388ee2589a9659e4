package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	dir := t.TempDir()
	limited := filepath.Join(dir, "memory.max")
	os.WriteFile(limited, []byte("2147483648\n"), 0o600)
	unlimited := filepath.Join(dir, "max")
	os.WriteFile(unlimited, []byte("max\n"), 0o600)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name          string
		env           map[string]string
		cgroup        string
		wantGC        int
		wantMemLimit  int64
		wantLimitSet  bool
		wantPercentIs int
	}{
		{"defaults under a cgroup limit", nil, limited, serveGCPercent, 2147483648 / 10 * 9, true, serveGCPercent},
		{"no cgroup limit", nil, unlimited, serveGCPercent, -1, false, serveGCPercent},
		{"GOGC and GOMEMLIMIT set: left alone", map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}, limited, -1, -1, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(1 << 62)
			gc, lim := tuneGC(env(tc.env), tc.cgroup)
			if gc != tc.wantGC || lim != tc.wantMemLimit {
				t.Fatalf("tuneGC = %d, %d; want %d, %d", gc, lim, tc.wantGC, tc.wantMemLimit)
			}
			if now := debug.SetGCPercent(100); tc.wantPercentIs > 0 && now != tc.wantPercentIs || tc.wantPercentIs < 0 && now != 100 {
				t.Fatalf("GC percent in force %d", now)
			}
			if now := debug.SetMemoryLimit(-1); tc.wantLimitSet != (now == tc.wantMemLimit) {
				t.Fatalf("memory limit in force %d", now)
			}
		})
	}
}
