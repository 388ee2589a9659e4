package advice

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/gantryhq/gantry/internal/replay"
)

// Replay runs the engine over a trace online: every pod's samples in time
// order, so each decision at t rests on samples up to t only. Samples at or
// after cut are not played (cut ≤ 0: all of them).
func Replay(tr *replay.Trace, e *Engine, cut int64) []Decision {
	type obs struct {
		pod string
		p   replay.TracePoint
	}
	var all []obs
	for _, pod := range tr.Pods {
		for _, p := range tr.Series[pod] {
			if cut > 0 && p.T >= cut {
				break
			}
			all = append(all, obs{pod, p})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].p.T != all[j].p.T {
			return all[i].p.T < all[j].p.T
		}
		return all[i].pod < all[j].pod
	})
	var out []Decision
	for _, o := range all {
		out = append(out, e.Observe(o.pod, Obs{T: o.p.T, Duty: o.p.Duty, MemBytes: o.p.MemBytes})...)
	}
	return out
}

// LoadTrace reads a trace in Alibaba's GenAI format from dir (each file
// plain or gzipped, .gz), with its own timestamps.
func LoadTrace(dir string) (*replay.Trace, error) {
	open := func(name string) (io.Reader, string, func(), error) {
		p := filepath.Join(dir, name)
		if f, err := os.Open(p); err == nil {
			return f, p, func() { f.Close() }, nil
		}
		f, err := os.Open(p + ".gz")
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: neither %s nor %s.gz: %w", dir, name, name, err)
		}
		z, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, "", nil, fmt.Errorf("%s.gz: %w", p, err)
		}
		return z, p + ".gz", func() { f.Close() }, nil
	}
	duty, dn, dc, err := open(replay.DutyFile)
	if err != nil {
		return nil, err
	}
	defer dc()
	mem, mn, mc, err := open(replay.MemoryFile)
	if err != nil {
		return nil, err
	}
	defer mc()
	return replay.ReadAlibabaRaw(duty, dn, mem, mn)
}
