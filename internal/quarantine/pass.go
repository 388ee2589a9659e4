package quarantine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// Phase is where a move stands.
type Phase string

// Phases of a move. A Job is Requeueing until Kueue has taken it off the
// node and it is queued again; every move is then Moving until the
// workload runs again on another node, or on its own once that is no
// longer quarantined (Resumed), or ends first (Ended). A workload whose
// volume only the failed node reaches is Kept there.
const (
	Requeueing Phase = "requeueing"
	Moving     Phase = "moving"
	Resumed    Phase = "resumed"
	Kept       Phase = "kept"
	Ended      Phase = "ended"
)

// next is the transition table of moves: a phase not listed is final.
var next = map[Phase][]Phase{
	Requeueing: {Moving, Ended},
	Moving:     {Resumed, Ended},
}

// Open reports whether a move in this phase still has something to do.
func (p Phase) Open() bool { return len(next[p]) > 0 }

// OpenPhases are the phases with something left to do, sorted.
func OpenPhases() []Phase {
	var out []Phase
	for p := range next {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Move is the work of one workload moved off (or kept on) a quarantined
// node.
type Move struct {
	Workload string
	Node     string
	MarkAt   time.Time // the mark it moved for: one move per workload, node and mark
	GPU      string
	Index    int
	Reason   string // why the GPU is unhealthy
	Kind     string // the workload's kind (job, notebook, service, vm)
	Phase    Phase
	Detail   string    // what Gantry did, or why it did not
	At       time.Time // when Gantry decided
	// ResumedAt, ResumedOn and ResumedFrom say when it ran again, on which
	// node and from which checkpoint step (-1: its run did not say).
	ResumedAt   time.Time
	ResumedOn   string
	ResumedFrom int64
	UpdatedAt   time.Time
}

// Notice is the sentence the owner reads: "moved off node h100-3: GPU 2
// XID 79 at 10:42; resumed from step 1,200 on node h100-7".
func (m Move) Notice() string {
	var b strings.Builder
	switch m.Phase {
	case Kept:
		fmt.Fprintf(&b, "kept on node %s (GPU %d unhealthy: %s at %s): %s", m.Node, m.Index, m.Reason, m.At.UTC().Format("15:04"), m.Detail)
		return b.String()
	case Ended:
		fmt.Fprintf(&b, "was moving off node %s (GPU %d unhealthy: %s) and ended before it ran again", m.Node, m.Index, m.Reason)
		return b.String()
	}
	fmt.Fprintf(&b, "moved off node %s: GPU %d %s, at %s; %s", m.Node, m.Index, m.Reason, m.At.UTC().Format("15:04"), m.Detail)
	if m.Phase == Resumed {
		b.WriteString("; running again")
		if m.ResumedOn != "" {
			b.WriteString(" on node " + m.ResumedOn)
		}
		if slices.Contains(strings.Split(m.ResumedOn, ","), m.Node) {
			b.WriteString(" (no longer quarantined)")
		}
		if m.ResumedFrom > 0 {
			b.WriteString(", resumed from step " + thousands(m.ResumedFrom))
		} else if m.ResumedFrom == 0 {
			b.WriteString(", from the beginning (no checkpoint)")
		}
	}
	return b.String()
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// resumeWait is how long a moved workload that reported its progress
// before runs again before its move is called resumed without saying from
// which step.
const resumeWait = 5 * time.Minute

// Events of the webhooks a move sends.
const (
	EventMoved   = "workload.moved"   // Gantry moved it off (or kept it on) a quarantined node
	EventResumed = "workload.resumed" // it runs again on a healthy node (or ended first)
)

// Pass does one round: marks every node with an unhealthy GPU, moves the
// work off its failed GPUs, takes each open move a step further, and
// releases the nodes healthy again for Clean whose preflight passed. It
// returns how many things it did.
func (q *Quarantine) Pass(ctx context.Context) (acted int, err error) {
	nodes, err := q.o.Health.Nodes(ctx)
	if err != nil {
		return 0, fmt.Errorf("quarantine: GPU health: %w", err)
	}
	marks, err := q.o.Cluster.Marks(ctx)
	if err != nil {
		return 0, fmt.Errorf("quarantine: marked nodes: %w", err)
	}
	fresh := map[string]bool{} // moves decided (and stepped) in this pass
	marked := map[string]Mark{}
	quarantined := map[string]bool{} // marked as the pass began, or unhealthy now
	for _, m := range marks {
		marked[m.Node], quarantined[m.Node] = m, true
	}
	var errs []error
	for _, n := range nodes {
		bad := unhealthy(n)
		if len(bad) > 0 {
			quarantined[n.Name] = true
		}
		m, isMarked := marked[n.Name]
		if len(bad) == 0 {
			if isMarked {
				done, err := q.release(ctx, n, m)
				if err != nil {
					errs = append(errs, err)
				}
				if done {
					acted++
				}
			}
			continue
		}
		if !isMarked {
			if m, err = q.mark(ctx, n.Name, bad[0]); err != nil {
				errs = append(errs, err)
				continue
			}
			acted++
		}
		if !q.o.Move {
			continue
		}
		for _, g := range bad {
			for _, id := range holders(n, g.State.GPU) {
				moved, err := q.moveOff(ctx, id, m, g)
				if err != nil {
					errs = append(errs, fmt.Errorf("quarantine: move workload %s off node %s: %w", id, n.Name, err))
				}
				if moved {
					acted++
					fresh[id+"\x00"+n.Name] = true
				}
			}
		}
	}
	n, err := q.advance(ctx, fresh, quarantined)
	return acted + n, errors.Join(append(errs, err)...)
}

// unhealthy are a node's unhealthy GPUs, by index.
func unhealthy(n telemetry.Node) []telemetry.GPURecord {
	var bad []telemetry.GPURecord
	for _, g := range n.GPUs {
		if !g.Healthy {
			bad = append(bad, g)
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].State.Index < bad[j].State.Index })
	return bad
}

// holders are the workloads whose pods the agent last saw on a GPU (or one
// of its MIG instances), sorted.
func holders(n telemetry.Node, gpuUUID string) []string {
	var ids []string
	for _, l := range n.InUse {
		if l.Series.Key.Device.GPU == gpuUUID && l.Series.Key.Workload != "" && !slices.Contains(ids, l.Series.Key.Workload) {
			ids = append(ids, l.Series.Key.Workload)
		}
	}
	sort.Strings(ids)
	return ids
}

func (q *Quarantine) mark(ctx context.Context, node string, g telemetry.GPURecord) (Mark, error) {
	m, added, err := q.o.Cluster.Mark(ctx, Mark{Node: node, GPU: g.State.GPU, Index: g.State.Index, Reason: g.Reason, At: q.o.Now().UTC()}, q.o.Effect)
	if err != nil {
		return m, fmt.Errorf("quarantine: mark node %s: %w", node, err)
	}
	if !added {
		// Tainted already, its label or record gone: put back, and the
		// mark it has kept.
		q.o.Log.Warn("quarantined node's label or record put back", "node", node, "marked_at", m.At)
		return m, nil
	}
	q.o.Log.Warn("node quarantined", "node", node, "gpu", g.State.GPU, "index", g.State.Index, "reason", g.Reason, "effect", q.o.Effect)
	return m, q.audit(ctx, "quarantine node", "nodes/"+node, fmt.Sprintf("GPU %d (%s) unhealthy: %s; tainted %s", g.State.Index, g.State.GPU, g.Reason, q.o.Effect))
}

func (q *Quarantine) audit(ctx context.Context, action, object, reason string) error {
	if _, err := q.o.Audit.AppendAudit(ctx, audit.Record{At: q.o.Now(), Actor: "gantry", Action: action, Object: object,
		Decision: audit.Allow, Reason: reason, Source: "quarantine"}); err != nil {
		return fmt.Errorf("quarantine: audit %s of %s: %w", action, object, err)
	}
	return nil
}

// moveOff decides what to do with one workload on a failed GPU, records it
// (once per mark) with its webhook, and does it.
func (q *Quarantine) moveOff(ctx context.Context, id string, m Mark, g telemetry.GPURecord) (bool, error) {
	w, err := q.o.Workloads.Workload(ctx, id)
	var nf *fault.NotFound
	if errors.As(err, &nf) {
		return false, nil // not Gantry's (any more)
	}
	if err != nil {
		return false, err
	}
	if w.Status.Ended() {
		return false, nil
	}
	ref := q.ref(w)
	pods, err := q.o.Cluster.PodsOn(ctx, ref.Namespace, id, m.Node)
	if err != nil || len(pods) == 0 {
		return false, err // nothing of it there any more
	}
	now := q.o.Now().UTC()
	mv := Move{Workload: id, Node: m.Node, MarkAt: m.At, GPU: g.State.GPU, Index: g.State.Index, Reason: g.Reason, Kind: w.Kind,
		At: now, UpdatedAt: now, ResumedFrom: -1}
	var pinned []string
	for _, p := range pods {
		pinned = append(pinned, p.Pinned...)
	}
	switch {
	case len(pinned) > 0:
		mv.Phase = Kept
		mv.Detail = fmt.Sprintf("its volume claim %s is bound to a volume only this node reaches, and moving would leave it behind; it goes on here and the node takes no new work — stop it and start it again once the node is healthy, or copy the data off", strings.Join(pinned, ", "))
	case w.Kind == template.Job:
		mv.Phase = Requeueing
		mv.Detail = "requeued through Kueue, its retries not used up"
	case w.Kind == template.VM:
		mv.Phase = Moving
		mv.Detail = "restarted on a healthy node"
	default:
		mv.Phase = Moving
		mv.Detail = "its pod evicted to start again on a healthy node, with its volumes"
	}
	msg, err := q.message(EventMoved, w, mv, now)
	if err != nil {
		return false, err
	}
	recorded, err := q.o.Store.RecordMove(ctx, mv, msg)
	if err != nil || !recorded {
		return false, err // decided in an earlier pass: advance takes it on
	}
	q.o.Log.Warn("moving a workload off a quarantined node", "workload_id", id, "node", m.Node, "gpu", g.State.Index, "phase", mv.Phase, "detail", mv.Detail)
	q.event(ctx, ref, mv)
	if err := q.audit(ctx, "move workload", "/api/v1/workloads/"+id, mv.Notice()); err != nil {
		return true, err
	}
	if mv.Phase == Kept {
		return true, nil
	}
	return true, q.step(ctx, mv, w, false)
}

// step takes an open move one step further; it is idempotent. released
// says the node it moved off is quarantined no more (Gantry released it,
// healthy again and checked, or an operator took the mark off): a new pod
// running there then counts as resumed, as a cluster with one node of the
// class resumes its work where it was.
func (q *Quarantine) step(ctx context.Context, mv Move, w workload.Workload, released bool) error {
	ref := q.ref(w)
	switch mv.Phase {
	case Requeueing:
		done, err := q.o.Cluster.Requeue(ctx, ref, mv.Node)
		if err != nil {
			return fmt.Errorf("requeue %s: %w", ref, err)
		}
		if !done {
			return nil
		}
		return q.o.Store.UpdateMove(ctx, mv.Workload, mv.MarkAt, mv.Node, func(old Move) (Move, *notify.Message, error) {
			return q.to(old, Moving, nil)
		})
	case Moving:
		pods, err := q.o.Cluster.PodsOn(ctx, ref.Namespace, mv.Workload, mv.Node)
		if err != nil {
			return err
		}
		if released {
			// On its own node again: a pod made since the move is the
			// workload running there anew; one from before never left.
			// (The API server keeps creation times to the second.)
			pods = slices.DeleteFunc(pods, func(p Pod) bool { return !p.Created.Before(mv.At.Truncate(time.Second)) })
		}
		if len(pods) > 0 {
			switch mv.Kind {
			case template.Job:
				// Queued again by Kueue, but a pod still there (Kueue
				// admitted it before its old pods went): the next pass
				// looks again.
			case template.VM:
				return q.o.Cluster.RestartVM(ctx, ref)
			default:
				var errs []error
				for _, p := range pods {
					errs = append(errs, q.o.Cluster.Evict(ctx, p.Namespace, p.Name))
				}
				return errors.Join(errs...)
			}
			return nil
		}
		if w.Status != workload.Running {
			return nil
		}
		on, err := q.o.Cluster.PodNodes(ctx, ref.Namespace, mv.Workload)
		if err != nil || len(on) == 0 || (!released && slices.Contains(on, mv.Node)) {
			return err
		}
		from := int64(-1)
		if q.o.Resumes != nil {
			f, waiting, err := q.o.Resumes.ResumedSince(ctx, mv.Workload, mv.At)
			switch {
			case err != nil:
				q.o.Log.Warn("quarantine: where the moved run resumed", "workload_id", mv.Workload, "err", err)
			case waiting && q.o.Now().Sub(w.RunningSince) < resumeWait:
				return nil // it reports its progress: wait a little for where it resumed
			case !waiting:
				from = f
			}
		}
		now := q.o.Now().UTC()
		var resumed Move
		err = q.o.Store.UpdateMove(ctx, mv.Workload, mv.MarkAt, mv.Node, func(old Move) (Move, *notify.Message, error) {
			old.ResumedAt, old.ResumedOn, old.ResumedFrom = now, strings.Join(on, ","), from
			var err error
			resumed, _, err = q.to(old, Resumed, nil)
			if err != nil {
				return old, nil, err
			}
			msg, err := q.message(EventResumed, w, resumed, now)
			return resumed, &msg, err
		})
		if err == nil {
			q.o.Log.Info("moved workload runs again", "workload_id", mv.Workload, "from", mv.Node, "on", resumed.ResumedOn, "resumed_from", from)
			q.event(ctx, ref, resumed)
		}
		return err
	}
	return nil
}

// to moves a move to phase by the transition table.
func (q *Quarantine) to(m Move, p Phase, msg *notify.Message) (Move, *notify.Message, error) {
	if m.Phase == p {
		return m, nil, nil
	}
	if !slices.Contains(next[m.Phase], p) {
		return m, nil, &fault.Conflict{Kind: "move", Name: m.Workload, Reason: fmt.Sprintf("a %s move cannot turn %s", m.Phase, p)}
	}
	m.Phase, m.UpdatedAt = p, q.o.Now().UTC()
	return m, msg, nil
}

// advance takes every open move a step further: a Job queued again once
// its pods left the node, a pod still there evicted again, a workload
// running on another node (or on its own once that is no longer
// quarantined: neither marked as the pass began nor unhealthy now)
// resumed, one that ended meanwhile ended.
func (q *Quarantine) advance(ctx context.Context, fresh, quarantined map[string]bool) (int, error) {
	moves, err := q.o.Store.OpenMoves(ctx, 500)
	if err != nil {
		return 0, fmt.Errorf("quarantine: open moves: %w", err)
	}
	var errs []error
	n := 0
	for _, mv := range moves {
		if fresh[mv.Workload+"\x00"+mv.Node] {
			continue
		}
		w, err := q.o.Workloads.Workload(ctx, mv.Workload)
		var nf *fault.NotFound
		if errors.As(err, &nf) {
			w = workload.Workload{ID: mv.Workload, Name: mv.Workload} // deleted: its id is what is left
		}
		if errors.As(err, &nf) || (err == nil && w.Status.Ended()) {
			now := q.o.Now().UTC()
			err = q.o.Store.UpdateMove(ctx, mv.Workload, mv.MarkAt, mv.Node, func(old Move) (Move, *notify.Message, error) {
				ended, _, err := q.to(old, Ended, nil)
				if err != nil {
					return old, nil, err
				}
				msg, err := q.message(EventResumed, w, ended, now)
				return ended, &msg, err
			})
			if err == nil {
				n++
			}
		} else if err == nil {
			err = q.step(ctx, mv, w, !quarantined[mv.Node])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("quarantine: move of workload %s off node %s: %w", mv.Workload, mv.Node, err))
		}
	}
	return n, errors.Join(errs...)
}

// Reasons of the Kubernetes events a move records on its workload.
const (
	ReasonMoved   = "MovedOffUnhealthyGPU" // Warning: taken off the node, to run elsewhere
	ReasonKept    = "KeptOnUnhealthyGPU"   // Warning: left where it is (a volume only that node reaches)
	ReasonResumed = "ResumedAfterMove"     // Normal: running again on a healthy node
)

// event records a move's Kubernetes event, its notice as the message. The
// move is recorded, audited and its webhook queued already: an event the
// cluster refuses is logged, and the move goes on.
func (q *Quarantine) event(ctx context.Context, ref workload.ObjectRef, mv Move) {
	typ, reason := "Warning", ReasonMoved
	switch mv.Phase {
	case Kept:
		reason = ReasonKept
	case Resumed:
		typ, reason = "Normal", ReasonResumed
	}
	if err := q.o.Cluster.Event(ctx, ref, typ, reason, mv.Notice()); err != nil {
		q.o.Log.Warn("quarantine: the move's event not recorded", "workload_id", mv.Workload, "reason", reason, "err", err)
	}
}

// ref is the workload's primary object on Gantry's own cluster: a fleet's VMs run
// on its workers, never on a node here.
func (q *Quarantine) ref(w workload.Workload) workload.ObjectRef {
	return workload.ObjectRef{Namespace: q.o.Namespace(w.Team), Kind: render.PrimaryKind(w.Kind, false), Name: w.Name, WorkloadID: w.ID}
}

// message is a move's webhook, with its notice as the text.
func (q *Quarantine) message(event string, w workload.Workload, mv Move, now time.Time) (notify.Message, error) {
	fields := map[string]any{"workload": w.ID, "name": w.Name, "team": w.Team.String(), "owner": w.Owner, "node": mv.Node,
		"gpu": mv.GPU, "gpuIndex": mv.Index, "reason": mv.Reason, "phase": string(mv.Phase)}
	if mv.Phase == Resumed {
		fields["resumedOn"] = mv.ResumedOn
		if mv.ResumedFrom >= 0 {
			fields["resumedFrom"] = mv.ResumedFrom
		}
	}
	return notify.New(event, fmt.Sprintf("Workload %s (%s, team %s): %s", w.Name, w.ID, w.Team, mv.Notice()), fields, now)
}

// release lets a marked node take work again once its agent has reported
// every GPU healthy for Clean and a preflight check run after that passed.
func (q *Quarantine) release(ctx context.Context, n telemetry.Node, m Mark) (bool, error) {
	if n.Stale || len(n.GPUs) == 0 {
		return false, nil // not heard from: nothing says it is healthy
	}
	var since time.Time
	for _, g := range n.GPUs {
		if g.Since.After(since) {
			since = g.Since
		}
	}
	now := q.o.Now()
	if now.Sub(since) < q.o.Clean {
		return false, nil
	}
	p, err := q.o.Cluster.Preflight(ctx, n.Name)
	if err != nil {
		return false, fmt.Errorf("quarantine: preflight of node %s: %w", n.Name, err)
	}
	switch p.State {
	case PreflightPassed:
		if p.Done.Before(since) {
			// A check from before the GPUs' last change does not count.
			return false, q.o.Cluster.ClearPreflight(ctx, n.Name)
		}
		if err := q.o.Cluster.Unmark(ctx, n.Name); err != nil {
			return false, fmt.Errorf("quarantine: release node %s: %w", n.Name, err)
		}
		q.o.Log.Info("node released from quarantine", "node", n.Name, "healthy_since", since, "marked_at", m.At)
		if err := q.audit(ctx, "release node", "nodes/"+n.Name, fmt.Sprintf("every GPU healthy since %s and the preflight check passed; Gantry's taint removed (quarantined at %s for GPU %d: %s)",
			since.UTC().Format(time.RFC3339), m.At.UTC().Format(time.RFC3339), m.Index, m.Reason)); err != nil {
			return true, err
		}
		return true, q.o.Cluster.ClearPreflight(ctx, n.Name)
	case PreflightFailed:
		if now.Sub(p.Done) < q.o.Clean {
			return false, nil
		}
		// Tried again after another Clean: the failure is audited as the
		// check is cleared.
		if err := q.audit(ctx, "preflight failed", "nodes/"+n.Name, "the node stays quarantined: "+p.Why); err != nil {
			return false, err
		}
		return false, q.o.Cluster.ClearPreflight(ctx, n.Name)
	}
	return false, nil
}
