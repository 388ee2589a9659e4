package advice

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// Live runs the online rules — the same Engine `gantry advise replay` runs
// — on the samples Gantry ingests: one engine per template and GPU class
// (its fleet), one pod per workload device. Its decisions become findings
// and are what idle policies act on. Each replica sees the batches it
// ingests.
type Live struct {
	classes *gpu.Catalog
	lookup  func(ctx context.Context, workloadID string) (template, class string, err error)
	log     *slog.Logger

	mu       sync.Mutex
	engines  map[string]*Engine   // template/class → its fleet's engine
	last     map[string]int64     // template/class → newest sample time fed
	info     map[string]wlInfo    // workload → template and class
	decided  map[string]Decision  // workload/device/action → its latest decision
	activeAt map[string]time.Time // workload → its latest active sample
}

type wlInfo struct{ template, class string }

// LiveOptions are what a Live is made of: Classes and Lookup are required.
type LiveOptions struct {
	Classes *gpu.Catalog
	// Lookup says a workload's template and GPU class.
	Lookup func(ctx context.Context, workloadID string) (template, class string, err error)
	Log    *slog.Logger // default slog.Default()
}

// NewLive builds the live rules.
func NewLive(o LiveOptions) (*Live, error) {
	if o.Classes == nil || o.Lookup == nil {
		return nil, errors.New("advice: Live needs Classes and Lookup")
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	return &Live{classes: o.Classes, lookup: o.Lookup, log: log, engines: map[string]*Engine{}, last: map[string]int64{}, info: map[string]wlInfo{},
		decided: map[string]Decision{}, activeAt: map[string]time.Time{}}, nil
}

// maxLiveWorkloads bounds what Live remembers.
const maxLiveWorkloads = 100000

// Observe implements telemetry.Observer: the stored readings of one batch.
func (l *Live) Observe(ctx context.Context, rs []telemetry.Stored) {
	for _, r := range rs {
		wl := r.Series.Workload
		if wl == "" {
			continue
		}
		l.mu.Lock()
		info, ok := l.info[wl]
		l.mu.Unlock()
		if !ok {
			t, c, err := l.lookup(ctx, wl)
			if err != nil {
				l.log.Debug("advice: workload of a reading", "workload_id", wl, "err", err)
				continue
			}
			info = wlInfo{t, c}
			l.mu.Lock()
			if len(l.info) > maxLiveWorkloads {
				l.info, l.decided, l.activeAt = map[string]wlInfo{}, map[string]Decision{}, map[string]time.Time{}
			}
			l.info[wl] = info
			l.mu.Unlock()
		}
		l.feed(wl, info, r)
	}
}

func (l *Live) feed(wl string, info wlInfo, r telemetry.Stored) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := info.template + "/" + info.class
	e := l.engines[key]
	if e == nil {
		c, ok := l.classes.Get(info.class)
		if !ok {
			return
		}
		var err error
		if e, err = NewEngine(c, DefaultRules); err != nil {
			return // a class without MIG profiles: nothing to right-size to
		}
		l.engines[key] = e
	}
	// The fleet's window wants time order; a late batch's samples count as
	// of the newest time fed.
	t := r.Time.Unix()
	if t < l.last[key] {
		t = l.last[key]
	}
	l.last[key] = t
	util := r.Values[telemetry.GPUUtil]
	if math.IsNaN(util) && !math.IsNaN(r.Values[telemetry.SMActive]) {
		util = 100 * r.Values[telemetry.SMActive]
	}
	mem := r.Values[telemetry.FBUsed] * (1 << 20)
	if util > DefaultRules.IdleDuty {
		l.activeAt[wl] = r.Time
	}
	pod := wl + "/" + r.Series.Device.ID()
	for _, d := range e.Observe(pod, Obs{T: t, Duty: util, MemBytes: mem}) {
		// A decision may be for another pod of the fleet (its lull ended):
		// pods are workload/device, and workload IDs hold no slash.
		key := d.Pod + "/" + d.Action
		d.Pod, _, _ = strings.Cut(d.Pod, "/")
		d.T = r.Time.Unix()
		l.decided[key] = d
	}
}

// Decisions are the latest decisions for a workload's devices: a stop that
// no activity followed, and resizes.
func (l *Live) Decisions(workloadID string) []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Decision
	for k, d := range l.decided {
		if d.Pod != workloadID || len(k) <= len(workloadID) || k[:len(workloadID)] != workloadID {
			continue
		}
		if d.Action == Stop && l.activeAt[workloadID].Unix() > d.T {
			continue // it ran again since
		}
		if d.Lull {
			// The dollars of a quiet-hours resize follow how much of the
			// time the fleet has been quiet so far.
			info := l.info[workloadID]
			if e := l.engines[info.template+"/"+info.class]; e != nil {
				d.LullShare = e.LullShare()
			}
		}
		out = append(out, d)
	}
	return out
}
