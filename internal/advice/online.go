// Package advice owns Gantry's tuning advice: the online rules that decide,
// sample by sample, when a GPU workload should move to a smaller or larger
// MIG profile and when an idle one should be stopped — learning from the
// workload's own series and from its template's fleet — and the scorer that
// measures those decisions on a trace. The same rules run in Gantry and in
// `gantry advise replay`. It imports no HTTP, SQL or client-go.
package advice

import (
	"fmt"
	"math"
	"sort"

	"github.com/gantryhq/gantry/internal/gpu"
)

// Obs is one sample of a pod's GPU: duty cycle in percent (the share of time
// a kernel ran; DCGM's GPU utilization) and memory used in bytes; NaN where
// not measured. T is in seconds.
type Obs struct {
	T        int64
	Duty     float64
	MemBytes float64
}

// Decision is what the rules decided for a pod at time T, from samples up
// to T: "resize" to Profile, or "stop". It takes effect after T.
type Decision struct {
	Pod     string `json:"pod"`
	T       int64  `json:"t"`
	Action  string `json:"action"`
	Profile string `json:"profile,omitempty"`
	// Lull marks a resize made for the fleet's quiet hours; LullShare is
	// the share of the time the fleet has been watched that it spent in
	// lulls.
	Lull      bool    `json:"-"`
	LullShare float64 `json:"-"`
}

// Actions.
const (
	Resize = "resize"
	Stop   = "stop"
)

// Profile is a MIG profile as advice weighs it: its share of the GPU
// (max(compute/7, memory/8)) and its memory in GiB.
type Profile struct {
	Name   string
	Share  float64
	MemGiB float64
}

// Profiles lists a class's MIG profiles, smallest share first (by memory on
// a tie); the last is the whole GPU's.
func Profiles(c gpu.Class) []Profile {
	var out []Profile
	for _, p := range c.MIG {
		out = append(out, Profile{Name: p.Name, Share: p.Share(), MemGiB: float64(c.MemoryGiB) * p.MemoryShare()})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Share != out[j].Share {
			return out[i].Share < out[j].Share
		}
		return out[i].MemGiB < out[j].MemGiB
	})
	return out
}

// Rules are the online rules' settings. The defaults (DefaultRules) and
// where each number comes from are in docs/advice.md.
type Rules struct {
	// Idle: an idle sample has duty ≤ IdleDuty percent. A pod idle for
	// QuietIdle is stopped while less than QuietFleet of its fleet has been
	// active within FleetWindow (the fleet's quiet hours); otherwise after
	// BusyIdle.
	IdleDuty    float64
	QuietIdle   int64 // seconds
	QuietFleet  float64
	FleetWindow int64 // seconds
	BusyIdle    int64 // seconds
	// Right-sizing: after Warmup, the smallest profile whose memory holds
	// the peak so far × Headroom within Fill of its memory; a pod whose
	// memory passes MoveUp of its profile's moves to the smallest profile
	// that holds it the same way (the whole GPU at worst), and never back.
	Warmup   int64 // seconds
	Headroom float64
	Fill     float64
	MoveUp   float64
	// Lulls: while less than LullFleet of the fleet's samples within
	// LullWindow were active (its quiet hours, once it has been watched
	// that long), a pod on the whole GPU is sized to the smallest profile
	// that holds its peak so far × LullHeadroom; one whose memory passes
	// MoveUp of that profile's stays on (or goes back to) the whole GPU
	// until it has stayed below for LullHold; when the fleet wakes, every
	// pod sized this way goes back to the whole GPU. LullWindow 0: off.
	LullFleet    float64
	LullWindow   int64 // seconds
	LullHeadroom float64
	LullHold     int64 // seconds
}

// DefaultRules are the rules Gantry runs.
var DefaultRules = Rules{
	IdleDuty: 1, QuietIdle: 15 * 60, QuietFleet: 0.2, FleetWindow: 15 * 60, BusyIdle: 90 * 60,
	Warmup: 10 * 60, Headroom: 1.2, Fill: 0.98, MoveUp: 0.65,
	LullFleet: 0.12, LullWindow: 60 * 60, LullHeadroom: 1.05, LullHold: 30 * 60,
}

// Fleet is what the rules know of one template's pods: which were seen,
// and which were active, within a sliding window. Samples come in time
// order; each is O(1) amortised, whatever the fleet's size.
type Fleet struct {
	window       int64
	ids          map[string]int // pod → its index in the window sets
	seen, active windowSet
}

// NewFleet starts an empty fleet watched over a window (seconds).
func NewFleet(window int64) *Fleet {
	return &Fleet{window: window, ids: map[string]int{}}
}

// id is pod's index in the window sets.
func (f *Fleet) id(pod string) int {
	i, ok := f.ids[pod]
	if !ok {
		i = len(f.ids)
		f.ids[pod] = i
	}
	return i
}

// Observe records that pod was seen at t, and active or not.
func (f *Fleet) Observe(pod string, t int64, active bool) {
	f.observe(f.id(pod), t, active)
}

func (f *Fleet) observe(id int, t int64, active bool) {
	f.seen.add(id, t, f.window)
	if active {
		f.active.add(id, t, f.window)
	}
}

// Active is the share of the pods seen within the window before t that
// were active in it.
func (f *Fleet) Active(t int64) float64 {
	f.seen.expire(t, f.window)
	f.active.expire(t, f.window)
	if f.seen.n == 0 {
		return 0
	}
	return float64(f.active.n) / float64(f.seen.n)
}

// sampleShare is the share of active samples within a sliding window;
// samples come in time order and are counted per timestamp, so each is
// O(1) amortised and the window holds one entry per distinct time.
type sampleShare struct {
	window    int64
	queue     []sampleCount // from head on
	head      int
	n, active int
}

type sampleCount struct {
	t         int64
	n, active int
}

func (w *sampleShare) add(t int64, active bool) {
	a := 0
	if active {
		a = 1
	}
	if k := len(w.queue) - 1; k >= w.head && w.queue[k].t == t {
		w.queue[k].n++
		w.queue[k].active += a
	} else {
		w.queue = append(w.queue, sampleCount{t, 1, a})
	}
	w.n++
	w.active += a
}

// share is the share of active samples after t−window.
func (w *sampleShare) share(t int64) float64 {
	for ; w.head < len(w.queue) && w.queue[w.head].t <= t-w.window; w.head++ {
		w.n -= w.queue[w.head].n
		w.active -= w.queue[w.head].active
	}
	if w.head > 1024 && w.head > len(w.queue)/2 {
		w.queue = append(w.queue[:0], w.queue[w.head:]...)
		w.head = 0
	}
	if w.n == 0 {
		return 0
	}
	return float64(w.active) / float64(w.n)
}

// windowSet counts the pods last added within a sliding window.
type windowSet struct {
	last  []int64 // by pod index: its last add (noAdd: none in the window)
	queue []stamp // adds in time order, from head on
	head  int
	n     int // pods whose last add is within the window
}

type stamp struct {
	pod int32
	t   int64
}

const noAdd = math.MinInt64

func (w *windowSet) add(pod int, t, window int64) {
	w.expire(t, window)
	for len(w.last) <= pod {
		w.last = append(w.last, noAdd)
	}
	if w.last[pod] == noAdd {
		w.n++
	}
	w.last[pod] = t
	w.queue = append(w.queue, stamp{int32(pod), t})
}

// expire drops adds at or before t−window; a pod leaves the count when its
// last add does.
func (w *windowSet) expire(t, window int64) {
	for ; w.head < len(w.queue) && w.queue[w.head].t <= t-window; w.head++ {
		s := w.queue[w.head]
		if w.last[s.pod] == s.t {
			w.n--
			w.last[s.pod] = noAdd
		}
	}
	// Drop what expired once it is most of the queue (amortised O(1)).
	if w.head > 1024 && w.head > len(w.queue)/2 {
		w.queue = append(w.queue[:0], w.queue[w.head:]...)
		w.head = 0
	}
}

// Pod is the rules' state for one pod.
type Pod struct {
	ID       string
	idx      int // in the fleet's window sets
	start    int64
	started  bool
	peak     float64 // GiB
	profile  string  // "" while on the whole GPU it was launched with
	memGiB   float64 // memory of the current profile
	idleFrom int64   // first sample of the current idle stretch (−1: active)
	stopped  bool
	lulled   bool  // sized down during the fleet's lull
	highAt   int64 // last sample above MoveUp of the lull's profile
}

// Engine runs the rules for the pods of one fleet on one GPU class.
type Engine struct {
	Rules    Rules
	Profiles []Profile
	Fleet    *Fleet
	pods     map[string]*Pod
	activity sampleShare     // the fleet's samples within LullWindow
	since    int64           // the fleet's first sample
	last     int64           // the fleet's newest sample
	lullFor  int64           // seconds of the watched time in lulls
	lulled   map[string]*Pod // pods sized down during the lull
}

// NewEngine runs rules for pods of class c.
func NewEngine(c gpu.Class, r Rules) (*Engine, error) {
	ps := Profiles(c)
	if len(ps) == 0 {
		return nil, fmt.Errorf("GPU class %s has no MIG profiles to right-size to", c.Name)
	}
	return &Engine{Rules: r, Profiles: ps, Fleet: NewFleet(r.FleetWindow), pods: map[string]*Pod{},
		activity: sampleShare{window: r.LullWindow}, since: math.MinInt64, lulled: map[string]*Pod{}}, nil
}

// LullShare is the share of the time the fleet has been watched that it
// spent in lulls.
func (e *Engine) LullShare() float64 {
	if e.last <= e.since {
		return 0
	}
	return float64(e.lullFor) / float64(e.last-e.since)
}

// wake moves every pod sized down during the lull back to the whole GPU.
func (e *Engine) wake(t int64) []Decision {
	ids := make([]string, 0, len(e.lulled))
	for id := range e.lulled {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	whole := e.Profiles[len(e.Profiles)-1].Name
	var out []Decision
	for _, id := range ids {
		q := e.lulled[id]
		q.lulled, q.profile, q.memGiB = false, "", 0
		out = append(out, Decision{Pod: id, T: t, Action: Resize, Profile: whole})
	}
	clear(e.lulled)
	return out
}

// sizeInLull sizes a pod during the fleet's lull: the profile that holds
// its peak × LullHeadroom, or the whole GPU while its memory has passed
// MoveUp of that profile's within LullHold.
func (e *Engine) sizeInLull(p *Pod, t int64, gib float64) []Decision {
	r := e.Rules
	to := e.fit(p.peak * r.LullHeadroom)
	if gib > r.MoveUp*to.MemGiB {
		p.highAt = t
	}
	if t-p.highAt < r.LullHold {
		to = e.Profiles[len(e.Profiles)-1]
	}
	name := to.Name
	if to.Share >= 1 {
		name = "" // the whole GPU
	}
	if name == p.profile {
		return nil
	}
	p.profile, p.memGiB, p.lulled = name, to.MemGiB, name != ""
	if p.lulled {
		e.lulled[p.ID] = p
	} else {
		delete(e.lulled, p.ID)
	}
	return []Decision{{Pod: p.ID, T: t, Action: Resize, Profile: to.Name, Lull: true, LullShare: e.LullShare()}}
}

// fit is the smallest-share profile whose memory holds need GiB within
// Fill, or the whole GPU's ("" when none does).
func (e *Engine) fit(needGiB float64) Profile {
	for _, p := range e.Profiles {
		if needGiB <= e.Rules.Fill*p.MemGiB {
			return p
		}
	}
	return e.Profiles[len(e.Profiles)-1]
}

// Observe takes a pod's sample (samples of every pod in time order) and
// returns the decisions it leads to.
func (e *Engine) Observe(pod string, o Obs) []Decision {
	r := e.Rules
	p := e.pods[pod]
	if p == nil {
		p = &Pod{ID: pod, idx: e.Fleet.id(pod), start: o.T, idleFrom: -1, highAt: math.MinInt64 / 2}
		e.pods[pod] = p
	}
	if e.since == math.MinInt64 {
		e.since = o.T
	}
	var out []Decision
	if math.IsNaN(o.Duty) {
		e.Fleet.observe(p.idx, o.T, false)
	} else {
		e.Fleet.observe(p.idx, o.T, o.Duty > r.IdleDuty)
		e.activity.add(o.T, o.Duty > r.IdleDuty)
		if o.Duty > r.IdleDuty {
			p.idleFrom, p.stopped = -1, false
		} else {
			if p.idleFrom < 0 {
				p.idleFrom = o.T
			}
			idle := o.T - p.idleFrom
			quiet := e.Fleet.Active(o.T) < r.QuietFleet
			if !p.stopped && (idle >= r.BusyIdle || idle >= r.QuietIdle && quiet) {
				p.stopped = true
				out = append(out, Decision{Pod: pod, T: o.T, Action: Stop})
			}
		}
	}
	if !math.IsNaN(o.MemBytes) {
		gib := o.MemBytes / (1 << 30)
		p.peak = math.Max(p.peak, gib)
		lull := r.LullWindow > 0 && o.T-e.since >= r.LullWindow && e.activity.share(o.T) < r.LullFleet
		if o.T > e.last {
			if lull {
				e.lullFor += o.T - max(e.last, e.since)
			}
			e.last = o.T
		}
		if !lull && len(e.lulled) > 0 {
			out = append(out, e.wake(o.T)...)
		}
		if lull && p.started && (p.profile == "" || p.lulled) {
			return append(out, e.sizeInLull(p, o.T, gib)...)
		}
		switch {
		case !p.started && o.T-p.start >= r.Warmup:
			p.started = true
			if to := e.fit(p.peak * r.Headroom); to.Share < 1 {
				p.profile, p.memGiB = to.Name, to.MemGiB
				out = append(out, Decision{Pod: pod, T: o.T, Action: Resize, Profile: to.Name})
			}
		case p.profile != "" && gib > r.MoveUp*p.memGiB:
			to := e.fit(gib * r.Headroom)
			if to.MemGiB <= p.memGiB {
				to = e.Profiles[len(e.Profiles)-1]
			}
			p.profile, p.memGiB = to.Name, to.MemGiB
			if to.Share >= 1 {
				p.profile = "" // the whole GPU: nothing left to right-size
			}
			out = append(out, Decision{Pod: pod, T: o.T, Action: Resize, Profile: to.Name})
		}
	}
	return out
}
