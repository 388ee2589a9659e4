// Package quarantine owns what Gantry does about a GPU that turned unhealthy
// (package telemetry judges that: a critical XID, double-bit ECC errors, a
// failed row remapping): the node is marked — tainted, so nothing new lands
// there — and the work on the failed GPU is moved, each kind its own way (a
// Job requeued through Kueue without using up its retries, a notebook or
// service's pod evicted so that it starts on a healthy node, a VM restarted)
// unless its volume lives on that node only; the owner is told (a webhook, a
// notice on the workload) when it moves and when it runs again. A node
// whose GPUs have been healthy for a while runs a preflight check, and then
// Gantry removes its own taint — never one an operator set. Every decision is
// audited. One leader loop (Pass) does it all, level-triggered: what it
// reads each pass (the GPU records, the marks on the nodes, the open moves)
// says what is left to do, so a restart or a failed step is taken up again.
package quarantine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/workload"
)

// Mark is Gantry's quarantine of a node: its taint there, with the GPU that
// failed first and why.
type Mark struct {
	Node   string
	GPU    string // the GPU's UUID
	Index  int
	Reason string    // telemetry's words: "critical XID 79 at …"
	At     time.Time // when Gantry marked the node
}

// Preflight is the state of a node's preflight check.
type Preflight struct {
	State string    // "" (none), PreflightRunning, PreflightPassed or PreflightFailed
	Done  time.Time // when it passed or failed
	Why   string    // why it failed
}

// Preflight states.
const (
	PreflightRunning = "running"
	PreflightPassed  = "passed"
	PreflightFailed  = "failed"
)

// Pod is one of a workload's pods on the quarantined node.
type Pod struct {
	Namespace string
	Name      string
	// Pinned are its volume claims bound to a volume that only that node
	// can reach (a local volume): the pod cannot run anywhere else.
	Pinned []string
	// Created is when the API server made it.
	Created time.Time
}

// Cluster is what a pass asks of the cluster (package kube).
type Cluster interface {
	// Marks lists the nodes that carry Gantry's quarantine taint.
	Marks(ctx context.Context) ([]Mark, error)
	// Mark taints and labels the node and records m on it; a node tainted
	// already keeps its recorded mark (its label and record put back if
	// removed). It returns the mark in force and whether it tainted now.
	Mark(ctx context.Context, m Mark, effect string) (Mark, bool, error)
	// Unmark removes Gantry's taint, label and record from the node, and
	// nothing else.
	Unmark(ctx context.Context, node string) error
	// PodsOn lists a workload's pods on a node that are not terminating.
	PodsOn(ctx context.Context, namespace, workloadID, node string) ([]Pod, error)
	// Requeue moves a Job off node through Kueue: the first call takes it
	// off (its Kueue Workload deactivated, so that Kueue suspends the Job
	// and its pods end; suspended, without Kueue), the calls after queue
	// it again once its pods are gone. Done reports that it is queued.
	Requeue(ctx context.Context, o workload.ObjectRef, node string) (done bool, err error)
	// PodNodes lists the nodes a workload's running pods are on.
	PodNodes(ctx context.Context, namespace, workloadID string) ([]string, error)
	// Evict evicts a pod (the Eviction API: its controller makes another).
	Evict(ctx context.Context, namespace, name string) error
	// RestartVM stops a VM's running instance so that KubeVirt starts
	// another (its run strategy keeps it running).
	RestartVM(ctx context.Context, o workload.ObjectRef) error
	// Event records a Kubernetes event on a workload's primary object
	// (where kubectl describe and the workload's events show it): Warning
	// or Normal, a reason and the notice.
	Event(ctx context.Context, o workload.ObjectRef, eventType, reason, message string) error
	// Preflight starts the node's preflight check if none is there, and
	// says where it stands; ClearPreflight removes it.
	Preflight(ctx context.Context, node string) (Preflight, error)
	ClearPreflight(ctx context.Context, node string) error
}

// Health is the GPU nodes as their agents report them (telemetry.Service).
type Health interface {
	Nodes(ctx context.Context) ([]telemetry.Node, error)
}

// Workloads reads workload records (the store).
type Workloads interface {
	Workload(ctx context.Context, id string) (workload.Workload, error)
}

// Resumes says the checkpoint step the run of a workload that began
// reporting after since resumed from (package runs; -1: not said), or that
// it reported before and no run of it began after since yet (waiting).
type Resumes interface {
	ResumedSince(ctx context.Context, workloadID string, since time.Time) (from int64, waiting bool, err error)
}

// Store keeps the moves. RecordMove stores a new move and queues its
// webhook in one transaction, and does nothing when the workload already
// has a move off that node for that mark (recorded false).
type Store interface {
	RecordMove(ctx context.Context, m Move, msg notify.Message) (recorded bool, err error)
	// UpdateMove replaces a move with what fn returns, given the current
	// one, in one transaction, and queues msg with it when fn returns one.
	UpdateMove(ctx context.Context, workloadID string, markAt time.Time, node string, fn func(Move) (Move, *notify.Message, error)) error
	// OpenMoves lists the moves not yet ended, oldest first.
	OpenMoves(ctx context.Context, limit int) ([]Move, error)
	// Moves lists a workload's moves, newest first.
	Moves(ctx context.Context, workloadID string) ([]Move, error)
}

// Auditor appends to the audit log.
type Auditor interface {
	AppendAudit(ctx context.Context, r audit.Record) (audit.Record, error)
}

// Taint effects.
const (
	NoSchedule = "NoSchedule" // nothing new lands there; Gantry moves its own work
	NoExecute  = "NoExecute"  // and the cluster evicts every pod that does not tolerate it
)

// Options configure a Quarantine. Cluster, Health, Workloads, Store, Audit,
// Namespace and Now are required.
type Options struct {
	Cluster   Cluster
	Health    Health
	Workloads Workloads
	Store     Store
	Audit     Auditor
	// Resumes says where a moved run resumed (nil: not said).
	Resumes Resumes
	// Effect is the taint's effect (default NoSchedule).
	Effect string
	// Clean is how long every GPU of a node must have been healthy, with
	// its agent reporting, before its preflight check runs (default 15m).
	Clean time.Duration
	// Move moves the work off a failed GPU (default true through config).
	Move bool
	// Namespace is a team's namespace.
	Namespace func(team.Name) string
	Now       func() time.Time
	Log       *slog.Logger
}

// Quarantine marks nodes with a failed GPU, moves the work off them and
// releases them once healthy again.
type Quarantine struct{ o Options }

// New is a Quarantine.
func New(o Options) (*Quarantine, error) {
	if o.Cluster == nil || o.Health == nil || o.Workloads == nil || o.Store == nil || o.Audit == nil || o.Namespace == nil || o.Now == nil {
		return nil, errors.New("quarantine.New: Cluster, Health, Workloads, Store, Audit, Namespace and Now (the server's clock) are required")
	}
	switch o.Effect {
	case "":
		o.Effect = NoSchedule
	case NoSchedule, NoExecute:
	default:
		return nil, fmt.Errorf("quarantine.New: effect %q: want %s or %s", o.Effect, NoSchedule, NoExecute)
	}
	if o.Clean <= 0 {
		o.Clean = 15 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Quarantine{o: o}, nil
}
