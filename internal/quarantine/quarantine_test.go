package quarantine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/workload"
)

// cluster is a stand-in for the cluster (the real one is tested in
// internal/e2e): pods by workload, marks, preflights, what was done.
type cluster struct {
	mu        sync.Mutex
	marks     map[string]quarantine.Mark
	effects   map[string]string
	pods      map[string][]fakePod // workload → pods
	requeues  map[string]int       // workload → Requeue calls
	requeued  map[string]bool      // Requeue answers done
	evicted   []string
	restarted []string
	events    []string // "Kind/name Type Reason: message"
	preflight map[string]quarantine.Preflight
	started   int // preflights started
	cleared   int
}

type fakePod struct {
	name, node string
	pinned     []string
	running    bool
	created    time.Time
}

func newCluster() *cluster {
	return &cluster{marks: map[string]quarantine.Mark{}, effects: map[string]string{}, pods: map[string][]fakePod{},
		requeues: map[string]int{}, requeued: map[string]bool{}, preflight: map[string]quarantine.Preflight{}}
}

func (c *cluster) Marks(context.Context) ([]quarantine.Mark, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []quarantine.Mark
	for _, m := range c.marks {
		out = append(out, m)
	}
	return out, nil
}

func (c *cluster) Mark(_ context.Context, m quarantine.Mark, effect string) (quarantine.Mark, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if was, ok := c.marks[m.Node]; ok {
		return was, false, nil
	}
	c.marks[m.Node], c.effects[m.Node] = m, effect
	return m, true, nil
}

func (c *cluster) Unmark(_ context.Context, node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.marks, node)
	return nil
}

func (c *cluster) PodsOn(_ context.Context, _, id, node string) ([]quarantine.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []quarantine.Pod
	for _, p := range c.pods[id] {
		if p.node == node {
			out = append(out, quarantine.Pod{Namespace: "team-vision", Name: p.name, Pinned: p.pinned, Created: p.created})
		}
	}
	return out, nil
}

func (c *cluster) PodNodes(_ context.Context, _, id string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.pods[id] {
		if p.running {
			out = append(out, p.node)
		}
	}
	return out, nil
}

func (c *cluster) Requeue(_ context.Context, o workload.ObjectRef, _ string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requeues[o.WorkloadID]++
	return c.requeued[o.WorkloadID], nil
}

func (c *cluster) Evict(_ context.Context, _, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evicted = append(c.evicted, name)
	return nil
}

func (c *cluster) RestartVM(_ context.Context, o workload.ObjectRef) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.restarted = append(c.restarted, o.Name)
	return nil
}

func (c *cluster) Event(_ context.Context, o workload.ObjectRef, typ, reason, message string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, fmt.Sprintf("%s/%s %s %s: %s", o.Kind, o.Name, typ, reason, message))
	return nil
}

func (c *cluster) Preflight(_ context.Context, node string) (quarantine.Preflight, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.preflight[node]
	if !ok {
		p = quarantine.Preflight{State: quarantine.PreflightRunning}
		c.preflight[node] = p
		c.started++
	}
	return p, nil
}

func (c *cluster) ClearPreflight(_ context.Context, node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.preflight[node]; ok {
		delete(c.preflight, node)
		c.cleared++
	}
	return nil
}

// store keeps moves and messages in memory, with RecordMove's once-only.
type store struct {
	mu    sync.Mutex
	moves []quarantine.Move
	sent  []notify.Message
}

func key(m quarantine.Move) string { return m.Workload + "|" + m.Node + "|" + m.MarkAt.String() }

func (s *store) RecordMove(_ context.Context, m quarantine.Move, msg notify.Message) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.moves {
		if key(o) == key(m) {
			return false, nil
		}
	}
	s.moves = append(s.moves, m)
	s.sent = append(s.sent, msg)
	return true, nil
}

func (s *store) UpdateMove(_ context.Context, id string, markAt time.Time, node string, fn func(quarantine.Move) (quarantine.Move, *notify.Message, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range s.moves {
		if o.Workload == id && o.Node == node && o.MarkAt.Equal(markAt) {
			m, msg, err := fn(o)
			if err != nil {
				return err
			}
			s.moves[i] = m
			if msg != nil {
				s.sent = append(s.sent, *msg)
			}
			return nil
		}
	}
	return &fault.NotFound{Kind: "move", Name: id}
}

func (s *store) OpenMoves(context.Context, int) ([]quarantine.Move, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []quarantine.Move
	for _, m := range s.moves {
		if m.Phase.Open() {
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *store) Moves(_ context.Context, id string) ([]quarantine.Move, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []quarantine.Move
	for _, m := range s.moves {
		if m.Workload == id {
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *store) move(t *testing.T, id string) quarantine.Move {
	t.Helper()
	ms, _ := s.Moves(context.Background(), id)
	if len(ms) != 1 {
		t.Fatalf("moves of %s: %+v", id, ms)
	}
	return ms[0]
}

func (s *store) events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.sent {
		out = append(out, m.Event)
	}
	return out
}

type auditLog struct {
	mu      sync.Mutex
	records []audit.Record
}

func (a *auditLog) AppendAudit(_ context.Context, r audit.Record) (audit.Record, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.records = append(a.records, r)
	return r, nil
}

func (a *auditLog) actions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.records {
		out = append(out, r.Action+" "+r.Object)
	}
	return out
}

type workloads map[string]workload.Workload

func (w workloads) Workload(_ context.Context, id string) (workload.Workload, error) {
	x, ok := w[id]
	if !ok {
		return x, &fault.NotFound{Kind: "workload", Name: id}
	}
	return x, nil
}

type health struct{ nodes []telemetry.Node }

func (h *health) Nodes(context.Context) ([]telemetry.Node, error) { return h.nodes, nil }

type resumes struct {
	from    int64
	waiting bool
}

func (r *resumes) ResumedSince(context.Context, string, time.Time) (int64, bool, error) {
	return r.from, r.waiting, nil
}

// gpus is a node's GPU records: healthy unless a reason is given, each
// healthy (or not) since since.
func node(name string, since time.Time, reasons ...string) telemetry.Node {
	n := telemetry.Node{Name: name, Healthy: true}
	for i, r := range reasons {
		n.GPUs = append(n.GPUs, telemetry.GPURecord{Node: name, State: telemetry.GPUState{Device: telemetry.Device{GPU: fmt.Sprintf("GPU-%s-%d", name, i), Index: i}},
			Healthy: r == "", Reason: r, Since: since})
		n.Healthy = n.Healthy && r == ""
	}
	return n
}

// holding says the agent last saw workload id's pod on GPU i of n.
func holding(n telemetry.Node, i int, id string) telemetry.Node {
	n.InUse = append(n.InUse, telemetry.Latest{Series: telemetry.SeriesRecord{Key: telemetry.SeriesKey{Node: n.Name,
		Device: telemetry.Device{GPU: fmt.Sprintf("GPU-%s-%d", n.Name, i), Index: i}, Workload: id}}})
	return n
}

type rig struct {
	q     *quarantine.Quarantine
	c     *cluster
	s     *store
	a     *auditLog
	h     *health
	w     workloads
	r     *resumes
	clock *time.Time
}

func newRig(t *testing.T, effect string) *rig {
	now := time.Date(2026, 12, 3, 10, 42, 0, 0, time.UTC)
	r := &rig{c: newCluster(), s: &store{}, a: &auditLog{}, h: &health{}, w: workloads{}, r: &resumes{from: -1}, clock: &now}
	q, err := quarantine.New(quarantine.Options{Cluster: r.c, Health: r.h, Workloads: r.w, Store: r.s, Audit: r.a, Resumes: r.r,
		Effect: effect, Clean: 15 * time.Minute, Move: true, Namespace: func(t team.Name) string { return "team-" + t.String() },
		Now: func() time.Time { return *r.clock }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.q = q
	return r
}

func (r *rig) pass(t *testing.T) int {
	t.Helper()
	n, err := r.q.Pass(context.Background())
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	return n
}

func (r *rig) advance(d time.Duration) { *r.clock = r.clock.Add(d) }

// queuedAgain has Kueue answer that Job id is queued again, and checks that
// a pass takes its move to Moving.
func (r *rig) queuedAgain(t *testing.T, id string) {
	t.Helper()
	r.c.requeued[id] = true
	r.pass(t)
	if mv := r.s.move(t, id); mv.Phase != quarantine.Moving {
		t.Fatalf("queued again: %+v", mv)
	}
}

// runsOn has workload id Running from now, its one pod on node made now.
func (r *rig) runsOn(id, pod, node string) {
	r.c.pods[id] = []fakePod{{name: pod, node: node, running: true, created: *r.clock}}
	w := r.w[id]
	w.Status, w.RunningSince = workload.Running, *r.clock
	r.w[id] = w
}

const xid79 = "critical XID 79 at 2026-12-03T10:41:50Z"

// TestJobMovesOnce: a GPU turning unhealthy marks its node once (audited),
// requeues the Job that held it — and nothing on the node's healthy GPU —
// then, once Kueue queued it again and it runs on another node, says where
// it resumed; every step is told once.
func TestJobMovesOnce(t *testing.T) {
	r := newRig(t, quarantine.NoSchedule)
	ctx := context.Background()
	at := *r.clock
	r.w["job1"] = workload.Workload{ID: "job1", Name: "train", Team: "vision", Owner: "alice", Kind: "job", Status: workload.Running}
	r.w["svc1"] = workload.Workload{ID: "svc1", Name: "serve", Team: "vision", Kind: "service", Status: workload.Running}
	r.c.pods["job1"] = []fakePod{{name: "train-0", node: "h100-3", running: true}}
	r.c.pods["svc1"] = []fakePod{{name: "serve-0", node: "h100-3", running: true}}
	r.h.nodes = []telemetry.Node{holding(holding(node("h100-3", at, "", "", xid79), 2, "job1"), 0, "svc1"), node("h100-7", at, "")}

	r.pass(t)
	if m, ok := r.c.marks["h100-3"]; !ok || m.Index != 2 || m.Reason != xid79 || r.c.effects["h100-3"] != quarantine.NoSchedule {
		t.Fatalf("marks: %+v %v", r.c.marks, r.c.effects)
	}
	if _, ok := r.c.marks["h100-7"]; ok {
		t.Fatal("a healthy node was marked")
	}
	mv := r.s.move(t, "job1")
	if mv.Phase != quarantine.Requeueing || r.c.requeues["job1"] != 1 || mv.Kind != "job" || mv.Index != 2 {
		t.Fatalf("job move: %+v, requeues %d", mv, r.c.requeues["job1"])
	}
	if ms, _ := r.s.Moves(ctx, "svc1"); len(ms) != 0 || len(r.c.evicted) != 0 {
		t.Fatalf("the service on a healthy GPU was moved: %+v, evicted %v", ms, r.c.evicted)
	}
	// Kueue has not taken it off yet: the next pass asks again, records
	// and tells nothing new.
	r.advance(5 * time.Second)
	r.pass(t)
	if r.c.requeues["job1"] != 2 || len(r.s.moves) != 1 || !slices.Equal(r.s.events(), []string{quarantine.EventMoved}) {
		t.Fatalf("second pass: requeues %d, moves %+v, events %v", r.c.requeues["job1"], r.s.moves, r.s.events())
	}
	// Queued again: Moving until it runs elsewhere.
	r.queuedAgain(t, "job1")
	r.runsOn("job1", "train-1", "h100-7")
	r.r.waiting = true // it reported before; its new run has not yet
	r.pass(t)
	if mv := r.s.move(t, "job1"); mv.Phase != quarantine.Moving {
		t.Fatalf("resumed before its run said from where: %+v", mv)
	}
	r.r.waiting, r.r.from = false, 1200
	r.advance(30 * time.Second)
	r.pass(t)
	mv = r.s.move(t, "job1")
	if mv.Phase != quarantine.Resumed || mv.ResumedOn != "h100-7" || mv.ResumedFrom != 1200 {
		t.Fatalf("resumed: %+v", mv)
	}
	want := "moved off node h100-3: GPU 2 " + xid79 + ", at 10:42; requeued through Kueue, its retries not used up; running again on node h100-7, resumed from step 1,200"
	if mv.Notice() != want {
		t.Errorf("notice:\n got %q\nwant %q", mv.Notice(), want)
	}
	if !slices.Equal(r.s.events(), []string{quarantine.EventMoved, quarantine.EventResumed}) {
		t.Errorf("webhooks: %v", r.s.events())
	}
	// And on the Job, where kubectl describe shows them: the move, once,
	// and its end.
	moved := "moved off node h100-3: GPU 2 " + xid79 + ", at 10:42; requeued through Kueue, its retries not used up"
	if want := []string{"Job/train Warning " + quarantine.ReasonMoved + ": " + moved, "Job/train Normal " + quarantine.ReasonResumed + ": " + want}; !slices.Equal(r.c.events, want) {
		t.Errorf("Kubernetes events:\n got %q\nwant %q", r.c.events, want)
	}
	var body struct {
		Text   string         `json:"text"`
		Gantry map[string]any `json:"gantry"`
	}
	if err := json.Unmarshal(r.s.sent[1].Body, &body); err != nil || !strings.Contains(body.Text, want) || body.Gantry["owner"] != "alice" || body.Gantry["resumedFrom"] != float64(1200) {
		t.Errorf("resumed webhook: %s (%v)", r.s.sent[1].Body, err)
	}
	if got := r.a.actions(); !slices.Equal(got, []string{"quarantine node nodes/h100-3", "move workload /api/v1/workloads/job1"}) {
		t.Errorf("audit: %v", got)
	}
	r.pass(t)
	if len(r.s.sent) != 2 || len(r.a.records) != 2 {
		t.Errorf("a pass after the move told again: %v", r.s.events())
	}
}

// TestKinds: a notebook's and a service's pods are evicted (again while
// one is still there), a VM restarted, one whose volume only the node
// reaches kept there, and a move whose workload ended first ends.
func TestKinds(t *testing.T) {
	r := newRig(t, quarantine.NoExecute)
	at := *r.clock
	for id, k := range map[string]string{"nb": "notebook", "svc": "service", "vm": "vm", "local": "notebook", "gone": "job"} {
		r.w[id] = workload.Workload{ID: id, Name: id, Team: "vision", Kind: k, Status: workload.Running}
		r.c.pods[id] = []fakePod{{name: id + "-0", node: "a100-1", running: true}}
	}
	r.c.pods["local"][0].pinned = []string{"scratch"}
	n := node("a100-1", at, "1 uncorrectable (double-bit) ECC errors since the driver loaded")
	for _, id := range []string{"nb", "svc", "vm", "local", "gone"} {
		n = holding(n, 0, id)
	}
	r.h.nodes = []telemetry.Node{n}
	r.pass(t)
	if r.c.effects["a100-1"] != quarantine.NoExecute {
		t.Errorf("effect: %v", r.c.effects)
	}
	slices.Sort(r.c.evicted)
	if !slices.Equal(r.c.evicted, []string{"nb-0", "svc-0"}) || !slices.Equal(r.c.restarted, []string{"vm"}) {
		t.Fatalf("evicted %v, restarted %v", r.c.evicted, r.c.restarted)
	}
	kept := r.s.move(t, "local")
	if kept.Phase != quarantine.Kept || !strings.Contains(kept.Notice(), "its volume claim scratch is bound to a volume only this node reaches") {
		t.Fatalf("kept: %+v %q", kept, kept.Notice())
	}
	// The notebook's pod is still there on the next pass: evicted again.
	r.c.pods["svc"] = []fakePod{{name: "svc-1", node: "a100-2", running: true}}
	r.c.pods["vm"] = nil
	r.w["gone"] = workload.Workload{ID: "gone", Name: "gone", Team: "vision", Kind: "job", Status: workload.Stopped}
	r.pass(t)
	if !slices.Contains(r.c.evicted[2:], "nb-0") || slices.Contains(r.c.evicted[2:], "svc-0") {
		t.Errorf("second pass evicted %v", r.c.evicted[2:])
	}
	for id, want := range map[string]quarantine.Phase{"svc": quarantine.Resumed, "nb": quarantine.Moving, "vm": quarantine.Moving, "local": quarantine.Kept, "gone": quarantine.Ended} {
		if got := r.s.move(t, id).Phase; got != want {
			t.Errorf("%s: %s, want %s", id, got, want)
		}
	}
	if got := r.s.move(t, "svc").ResumedFrom; got != -1 {
		t.Errorf("a service that never reported resumed from %d", got)
	}
	var kinds []string
	for _, e := range r.c.events {
		if strings.HasPrefix(e, "Deployment/local ") || strings.HasPrefix(e, "StatefulSet/local ") {
			kinds = append(kinds, e)
		}
	}
	if len(kinds) != 1 || !strings.Contains(kinds[0], " Warning "+quarantine.ReasonKept+": kept on node a100-1") {
		t.Errorf("the kept notebook's events: %q (all: %q)", kinds, r.c.events)
	}
}

// TestRelease: a marked node is released only after every GPU has been
// healthy for Clean, its agent reporting, and a preflight check run after
// that passed; a failed check keeps it marked and is tried again after
// another Clean; a check older than the GPUs' last change does not count.
func TestRelease(t *testing.T) {
	r := newRig(t, "")
	at := *r.clock
	r.c.marks["h100-3"] = quarantine.Mark{Node: "h100-3", Index: 2, Reason: xid79, At: at.Add(-24 * time.Hour)}
	healthy := node("h100-3", at, "", "", "")
	r.h.nodes = []telemetry.Node{healthy}
	r.advance(10 * time.Minute)
	r.pass(t)
	if r.c.started != 0 {
		t.Fatal("a preflight ran before the GPUs were healthy for Clean")
	}
	stale := healthy
	stale.Stale = true
	r.h.nodes = []telemetry.Node{stale}
	r.advance(10 * time.Minute)
	r.pass(t)
	if r.c.started != 0 {
		t.Fatal("a preflight ran on a node whose agent is away")
	}
	r.h.nodes = []telemetry.Node{healthy}
	r.pass(t)
	if r.c.started != 1 || len(r.c.marks) != 1 {
		t.Fatalf("preflights %d, marks %v", r.c.started, r.c.marks)
	}
	r.pass(t) // still running
	r.c.preflight["h100-3"] = quarantine.Preflight{State: quarantine.PreflightFailed, Done: *r.clock, Why: "BackoffLimitExceeded"}
	r.advance(time.Minute)
	r.pass(t)
	if len(r.c.marks) != 1 || r.c.cleared != 0 {
		t.Fatalf("a failed check released the node or was tried again at once: marks %v, cleared %d", r.c.marks, r.c.cleared)
	}
	r.advance(15 * time.Minute)
	r.pass(t)
	if r.c.cleared != 1 || !slices.Contains(r.a.actions(), "preflight failed nodes/h100-3") {
		t.Fatalf("failed check not cleared after Clean: cleared %d, audit %v", r.c.cleared, r.a.actions())
	}
	r.pass(t) // a new check
	if r.c.started != 2 {
		t.Fatalf("preflights %d", r.c.started)
	}
	r.c.preflight["h100-3"] = quarantine.Preflight{State: quarantine.PreflightPassed, Done: at.Add(-time.Minute)}
	r.pass(t)
	if len(r.c.marks) != 1 || r.c.cleared != 2 {
		t.Fatalf("a check from before the GPUs turned healthy counted: marks %v, cleared %d", r.c.marks, r.c.cleared)
	}
	r.pass(t)
	r.c.preflight["h100-3"] = quarantine.Preflight{State: quarantine.PreflightPassed, Done: *r.clock}
	if n := r.pass(t); n != 1 || len(r.c.marks) != 0 || !slices.Contains(r.a.actions(), "release node nodes/h100-3") {
		t.Fatalf("not released: acted %d, marks %v, audit %v", n, r.c.marks, r.a.actions())
	}
	// An unmarked node is never released or checked.
	r.pass(t)
	if r.c.started != 3 {
		t.Errorf("preflights %d after the release", r.c.started)
	}
}

// TestResumesOnItsNodeOnceReleased: with no other node to go to, a moved
// Job waits while its node is quarantined — a pod of it there does not
// count as running again, nor while the node is unhealthy though its mark
// was taken off — and resumes there once the node is released (from the
// pass after the release), the notice saying the node is no longer
// quarantined. A notebook's pod from before the move that never left is
// not taken for it running again: it is evicted again.
func TestResumesOnItsNodeOnceReleased(t *testing.T) {
	r := newRig(t, quarantine.NoSchedule)
	at := *r.clock
	r.w["job1"] = workload.Workload{ID: "job1", Name: "train", Team: "vision", Owner: "alice", Kind: "job", Status: workload.Running}
	r.w["nb1"] = workload.Workload{ID: "nb1", Name: "lab", Team: "vision", Owner: "alice", Kind: "notebook", Status: workload.Running}
	r.c.pods["job1"] = []fakePod{{name: "train-0", node: "cpu-1", running: true, created: at.Add(-time.Hour)}}
	r.c.pods["nb1"] = []fakePod{{name: "lab-0", node: "cpu-1", running: true, created: at.Add(-time.Hour)}}
	failed := holding(holding(node("cpu-1", at, xid79), 0, "job1"), 0, "nb1")
	r.h.nodes = []telemetry.Node{failed}
	r.pass(t)
	r.c.pods["job1"] = nil
	r.queuedAgain(t, "job1")
	// Kueue admitted it again and a pod of it runs on the marked node (an
	// operator's toleration, say): not resumed while the mark stands.
	r.runsOn("job1", "train-1", "cpu-1")
	r.r.from = 70
	r.pass(t)
	if mv := r.s.move(t, "job1"); mv.Phase != quarantine.Moving {
		t.Fatalf("resumed on its quarantined node: %+v", mv)
	}
	// The mark taken off while the GPU is still unhealthy: marked again,
	// and still not resumed.
	delete(r.c.marks, "cpu-1")
	r.pass(t)
	if mv := r.s.move(t, "job1"); mv.Phase != quarantine.Moving || len(r.c.marks) != 1 {
		t.Fatalf("resumed on a node unhealthy still: %+v, marks %v", mv, r.c.marks)
	}
	// Healthy for Clean, the check passed: released in a pass that still
	// counts the node as quarantined, and the next finds the Job running
	// there.
	healthy := node("cpu-1", *r.clock, "")
	r.h.nodes = []telemetry.Node{holding(holding(healthy, 0, "job1"), 0, "nb1")}
	r.advance(16 * time.Minute)
	r.pass(t)
	r.c.preflight["cpu-1"] = quarantine.Preflight{State: quarantine.PreflightPassed, Done: *r.clock}
	evicted := len(r.c.evicted)
	r.pass(t)
	if mv := r.s.move(t, "job1"); len(r.c.marks) != 0 || mv.Phase != quarantine.Moving {
		t.Fatalf("released: marks %v, move %+v; want the move Moving until the next pass", r.c.marks, mv)
	}
	r.pass(t)
	mv := r.s.move(t, "job1")
	want := "moved off node cpu-1: GPU 0 " + xid79 + ", at 10:42; requeued through Kueue, its retries not used up; running again on node cpu-1 (no longer quarantined), resumed from step 70"
	if mv.Phase != quarantine.Resumed || mv.ResumedOn != "cpu-1" || mv.ResumedFrom != 70 || mv.Notice() != want {
		t.Fatalf("resumed: %+v\n got %q\nwant %q", mv, mv.Notice(), want)
	}
	if nb := r.s.move(t, "nb1"); nb.Phase != quarantine.Moving || len(r.c.evicted) <= evicted || r.c.evicted[len(r.c.evicted)-1] != "lab-0" {
		t.Errorf("the notebook's pod that never left: move %+v, evicted %v", nb, r.c.evicted)
	}
	got := map[string]int{}
	for _, m := range r.s.sent {
		got[m.Event]++
	}
	if got[quarantine.EventMoved] != 2 || got[quarantine.EventResumed] != 1 {
		t.Errorf("webhooks: %v", r.s.events())
	}
}

// TestOptions: what New refuses; the open phases (the store's partial
// index moves_open names the same two).
func TestOptions(t *testing.T) {
	if got := quarantine.OpenPhases(); !slices.Equal(got, []quarantine.Phase{quarantine.Moving, quarantine.Requeueing}) {
		t.Errorf("open phases %v", got)
	}
	if _, err := quarantine.New(quarantine.Options{}); err == nil {
		t.Error("no parts: accepted")
	}
	_, err := quarantine.New(quarantine.Options{Cluster: newCluster(), Health: &health{}, Workloads: workloads{}, Store: &store{}, Audit: &auditLog{},
		Namespace: func(team.Name) string { return "" }, Now: time.Now, Effect: "PreferNoSchedule"})
	if err == nil || !strings.Contains(err.Error(), "PreferNoSchedule") {
		t.Errorf("effect PreferNoSchedule: %v", err)
	}
}
