// Package workload owns workloads: launching a template version for a team (the
// choices checked, the image verified and pinned, the objects rendered, recorded
// and applied), previewing what a launch would create, their lifecycle (a
// transition table every status change goes through, in one store transaction),
// stopping, starting and deleting them, the loops that converge the cluster on
// what was recorded (unapplied launches, stopped or deleted workloads whose
// objects still run, max runtimes), and reading them. It declares the store,
// cluster, authorizer and image verifier it needs; adapters implement them.
package workload

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
)

// Status is where a workload is in its lifecycle.
type Status string

// Statuses. Pending means recorded and rendered, not yet running;
// lifecycle.go says which event moves a workload from one to another.
const (
	PendingApproval Status = "PendingApproval" // held until an approver lets it go ahead
	Pending         Status = "Pending"
	Queued          Status = "Queued" // waiting in the quota engine's queue
	Scheduled       Status = "Scheduled"
	Running         Status = "Running"
	Succeeded       Status = "Succeeded"
	Failed          Status = "Failed"
	Stopped         Status = "Stopped"     // by a person or past its max runtime; may be started again
	IdleStopped     Status = "IdleStopped" // by the idle culler; may be started again
	Deleted         Status = "Deleted"
)

// Statuses lists every status.
var Statuses = []Status{PendingApproval, Pending, Queued, Scheduled, Running, Succeeded, Failed, Stopped, IdleStopped, Deleted}

// Workload is the record of one launch.
type Workload struct {
	ID              string
	Name            string
	Team            team.Name
	Owner           string
	Template        string
	TemplateVersion int
	Kind            string
	GPUClass        string
	MIGProfile      string
	GPUCount        int
	Parameters      map[string]string
	ObjectsHash     string
	AppliedHash     string // the ObjectsHash last applied to the cluster; "" until then
	Status          Status
	Reason          string // why the workload is stuck or failed
	// Held: a team's spent budget holds it in the team's queue (Reason
	// says the budget's words).
	Held     bool
	Endpoint string // in-cluster address of a service or notebook
	// LastUsed is when a person last used it (its API, its app, a
	// keep-alive): read with the record inside UpdateWorkload's
	// transaction, so that an update can depend on it; zero elsewhere.
	LastUsed       time.Time
	Image          string    // the verified image, pinned by digest
	TEE            string    // the TEE of a confidential workload, "" for others
	ExpiresAt      time.Time // when its max runtime ends; zero: never
	IdempotencyKey string    // the caller's key for this launch, if any
	RequestHash    string    // fingerprint of the launch request, to tell repeats from reuse
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// PricePerHour is what it costs running, in USD, at its class's price
	// when it was launched (spot or on demand, a MIG slice at its share).
	// RunningFor is the time it ran before its current run; RunningSince
	// when its current run began (zero: not running). Metering reads them.
	PricePerHour float64
	RunningFor   time.Duration
	RunningSince time.Time
	// NodeGroup is the node group its current (or last) run is on, and
	// RunPrice that run's price per hour at its groups' prices (its pods on
	// the machines they run on); "" and 0 until the cluster says where it
	// runs (or when it runs on no group's nodes): then PricePerHour holds.
	// RanCost is what its runs before the current one cost.
	NodeGroup string
	RunPrice  float64
	RanCost   float64
	// Cluster is the worker cluster its current (or last) run is on when
	// it was dispatched to one ("": the cluster Gantry drives); its run is
	// priced at that cluster's offer (RunPrice).
	Cluster string
	// Its history: when it first turned Running (zero: never yet), when it
	// ended (Succeeded, Failed, Stopped, IdleStopped or Deleted; zero while
	// live; kept while a start again waits for approval), how many times it
	// started running (a Job's retry, a start after a stop, a restart after
	// an eviction each count), and its main container's exit code when it
	// ended (nil: not known).
	StartedAt time.Time
	EndedAt   time.Time
	Attempts  int
	ExitCode  *int
	// Approval is why the launch needed a team-admin's approval and what
	// became of it (zero when it needed none).
	Approval Approval
	// SpotEvictions are the UIDs of a spot job's pods the cluster evicted:
	// it started again after each, up to its template's spotRequeues.
	SpotEvictions []string
	// Trial is the trial it is a run of (package trial), with the caps
	// every run of it has; nil for every other launch.
	Trial *Trial
	// Deferral is a flexible job's wait for cleaner power; nil when it
	// did not wait.
	Deferral *Deferral
	// Warned is what the idle culler has warned its owner of while it
	// runs (zero: nothing); any change of status ends it.
	Warned Warned

	// TemplateStatus is its template version's standing (deprecated,
	// revoked; "" when active), looked up when the workload is read, not stored.
	TemplateStatus       catalog.Status
	TemplateStatusReason string
	// Related says which records of other kinds it has, read with it in
	// the same statement by Store.Workload; nil where a read did not say
	// (a listing, the record inside an update). Not stored.
	Related *Related
}

// Related says whether a workload has records of other kinds, so that its
// page reads them only when there are some: most workloads have neither.
type Related struct {
	Progress bool // its run has reported progress (package runs)
	Moves    bool // Gantry moved it off (or kept it on) a failed GPU's node (package quarantine)
}

// SameRecord reports whether an update that turns a into b writes nothing:
// every field an update may change is equal (UpdatedAt aside, which moves
// only with them). The store writes nothing then, and an updater that
// finds so on a read need not write.
func SameRecord(a, b Workload) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.AppliedHash == b.AppliedHash && a.Endpoint == b.Endpoint && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.RunningFor == b.RunningFor && a.RunningSince.Equal(b.RunningSince) && a.Approval == b.Approval &&
		slices.Equal(a.SpotEvictions, b.SpotEvictions) && a.StartedAt.Equal(b.StartedAt) && a.EndedAt.Equal(b.EndedAt) &&
		a.Attempts == b.Attempts && sameCode(a.ExitCode, b.ExitCode) && a.Held == b.Held &&
		a.NodeGroup == b.NodeGroup && a.RunPrice == b.RunPrice && a.RanCost == b.RanCost && a.Cluster == b.Cluster &&
		sameDeferral(a.Deferral, b.Deferral) && a.Warned.Equal(b.Warned)
}

func sameCode(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func sameDeferral(a, b *Deferral) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Until.Equal(b.Until) && a.Released.Equal(b.Released) && a.ReleasedBy == b.ReleasedBy
}

// Warned is what the idle culler told a running workload's owner, kept
// with the record so that a new leader neither warns twice nor stops it
// sooner than the warning said.
type Warned struct {
	// QuietFrom is when the quiet stretch an idle warning counted from
	// began, and StopAt when it said the stop may come (zero: no idle
	// warning).
	QuietFrom time.Time `json:"quietFrom,omitzero"`
	StopAt    time.Time `json:"stopAt,omitzero"`
	// SleepAt is the start of the off-hours window a warning said it
	// will be stopped at (zero: none).
	SleepAt time.Time `json:"sleepAt,omitzero"`
}

// Equal reports whether two warnings say the same.
func (a Warned) Equal(b Warned) bool {
	return a.QuietFrom.Equal(b.QuietFrom) && a.StopAt.Equal(b.StopAt) && a.SleepAt.Equal(b.SleepAt)
}

// IsZero reports whether nothing was warned of.
func (a Warned) IsZero() bool { return a.Equal(Warned{}) }

// Approval is a launch's approval: why it was needed, until when a decision
// may come, and the decision.
type Approval struct {
	Why     string    // "": none was needed
	Expires time.Time // when an undecided launch is refused
	// Decision is "approved", "denied" or "expired" ("" while it waits);
	// a start again taken back before a decision is "withdrawn".
	Decision string
	By       string    // who decided (issuer#subject); "gantry" for an expiry
	Note     string    // the decision's reason
	At       time.Time // when it was decided; zero while it waits
	// Restart: it is for starting a stopped workload again (its volumes,
	// a job's checkpoints, kept), not for its launch; denied, the
	// workload is Stopped as it was.
	Restart bool
}

// Needed reports whether the launch needed approval.
func (a Approval) Needed() bool { return a.Why != "" }

// CostAt is what the workload cost up to now: each run's price per hour
// over the time it was Running.
func (w Workload) CostAt(now time.Time) float64 {
	c := w.RanCost
	if !w.RunningSince.IsZero() && now.After(w.RunningSince) {
		c += w.RunPricePerHour() * now.Sub(w.RunningSince).Hours()
	}
	return c
}

// RunPricePerHour is what its current (or last) run costs an hour: at its
// node groups' prices when known, else at its class's (PricePerHour).
func (w Workload) RunPricePerHour() float64 {
	if w.RunPrice > 0 {
		return w.RunPrice
	}
	return w.PricePerHour
}

// RanFor is how long it has been Running, over all its runs, up to now.
func (w Workload) RanFor(now time.Time) time.Duration {
	d := w.RunningFor
	if !w.RunningSince.IsZero() && now.After(w.RunningSince) {
		d += now.Sub(w.RunningSince)
	}
	return d
}

// Applied reports whether the workload's objects are on the cluster.
func (w Workload) Applied() bool { return w.AppliedHash != "" && w.AppliedHash == w.ObjectsHash }

// Filter selects workloads; After continues a listing after that key.
type Filter struct {
	Team  team.Name   // "": every team the caller may read
	Teams []team.Name // when set, only these teams

	Owner    string
	Template string
	Trial    string // only the runs of this trial
	Status   Status
	Ended    bool // only workloads that have ended (Status.Ended)
	Limit    int
	After    *Key
}

// Key orders workloads, newest first.
type Key struct {
	CreatedAt time.Time
	ID        string
}

// Store keeps workload records.
type Store interface {
	// CreateWorkload records a new workload. One held for approval
	// (PendingApproval) is recorded only while fewer than
	// MaxPendingApprovals of its owner's launches in its team wait, decided
	// in the transaction that inserts it: *PendingLimit otherwise.
	CreateWorkload(ctx context.Context, w Workload) error
	// Workload returns one record, with Related; *fault.NotFound if none.
	Workload(ctx context.Context, id string) (Workload, error)
	// WorkloadByIdempotencyKey returns the owner's workload launched with key.
	WorkloadByIdempotencyKey(ctx context.Context, owner, key string) (Workload, error)
	// ListWorkloads returns up to f.Limit records, newest first.
	ListWorkloads(ctx context.Context, f Filter) ([]Workload, error)
	// UpdateWorkload changes a record atomically: fn gets the record as it
	// is (with LastUsed; a use recorded meanwhile waits for the
	// transaction) and returns the one to write (only status, reason, applied hash,
	// endpoint, expiry and running time change), in one transaction; an error from fn
	// writes nothing and is returned. *fault.NotFound if there is no record.
	// A record moved into PendingApproval (a start again held) is written
	// only under the same cap as CreateWorkload's: *PendingLimit otherwise.
	UpdateWorkload(ctx context.Context, id string, fn func(Workload) (Workload, error)) (Workload, error)
	// UpdateWorkloadNotify is UpdateWorkload whose fn may also return a
	// webhook to queue (nil: none), in the same transaction: the change
	// and its message are kept together or not at all.
	UpdateWorkloadNotify(ctx context.Context, id string, fn func(Workload) (Workload, *notify.Message, error)) (Workload, error)
	// UnappliedWorkloads returns up to limit live workloads not yet
	// applied (those held for approval only with withHeld).
	UnappliedWorkloads(ctx context.Context, limit int, withHeld bool) ([]Workload, error)
	// ExpiredApprovals returns up to limit launches held for approval past
	// their time to decide.
	ExpiredApprovals(ctx context.Context, now time.Time, limit int) ([]Workload, error)
	// DueDeferrals returns up to limit Queued workloads held for cleaner
	// power whose release time is at or before now, earliest first.
	DueDeferrals(ctx context.Context, now time.Time, limit int) ([]Workload, error)
	// ExpiredWorkloads returns up to limit live workloads, other than Jobs
	// (the cluster ends those by activeDeadlineSeconds), whose max runtime
	// ended at or before now.
	ExpiredWorkloads(ctx context.Context, now time.Time, limit int) ([]Workload, error)
	// TouchWorkload records that a person used the workload at at (the
	// idle culler counts from the newest).
	TouchWorkload(ctx context.Context, id string, at time.Time) error
	// WorkloadRuns lists the runs overlapping [from, to) of the teams'
	// workloads (every team's when teams is nil; none when it is empty).
	WorkloadRuns(ctx context.Context, from, to time.Time, teams []team.Name) ([]Run, error)
	// GPUMinutes counts, per workload, the one-minute buckets in [from,
	// to) its GPU series measured, and those it was active in.
	GPUMinutes(ctx context.Context, from, to time.Time) (map[string]GPUMinutes, error)
	// GPUEnergy is, per workload, the energy its pods used on their GPUs
	// in [from, to), in kWh by hour (UTC, its start; the telemetry
	// rollups' joules); absent: none measured.
	GPUEnergy(ctx context.Context, from, to time.Time) (map[string]map[time.Time]float64, error)
	// WarmSpend lists what machines kept warm cost per node group on each
	// day (UTC) overlapping [from, to).
	WarmSpend(ctx context.Context, from, to time.Time) ([]WarmSpend, error)
}

// Cluster is where workloads run.
type Cluster interface {
	// MostOnOneNode is the most of resource (a GPU or a MIG slice) any one
	// node of class has at all (allocatable, cordoned nodes too): more
	// than that can never be placed; nodes is how many nodes the class has.
	MostOnOneNode(ctx context.Context, class gpu.Class, resource string) (most, nodes int, err error)
	// FreeCPU is the millicores no pod requests on the freest CPU node
	// (labelled label=true), the most any one has allocatable (cordoned
	// ones too), and how many there are.
	FreeCPU(ctx context.Context, label string) (onOneNode, mostOnOneNode int64, nodes int, err error)
	EnsureNamespace(ctx context.Context, name string, t team.Name) error
	Apply(ctx context.Context, objs []render.Object) error
	Delete(ctx context.Context, namespace, kind, name string) error
	// Events returns the events of objects whose names start with prefix,
	// those of workload id (wherever it runs).
	Events(ctx context.Context, namespace, prefix, id string) ([]Event, error)
	// Logs streams the log of the main container of the newest pod labelled
	// with the workload id; *fault.Conflict when there is no pod yet.
	Logs(ctx context.Context, namespace, workloadID string, follow bool, tailLines int64) (io.ReadCloser, error)
	// Primary reads a primary object as the API server has it now (not a
	// cache): *fault.NotFound when it is gone.
	Primary(ctx context.Context, o ObjectRef) (ObjectRef, error)
	// SetRunning starts (true) or stops (false) a workload's primary object
	// and keeps it, with its volumes: a Job is suspended, a Deployment or
	// StatefulSet scaled to zero, a VirtualMachine halted.
	SetRunning(ctx context.Context, o ObjectRef, run bool) error
	// SetAdmission sets Gantry's AdmissionCheck on the Kueue Workloads of
	// the workload id in namespace (with Kueue; none yet is not an error).
	SetAdmission(ctx context.Context, namespace, id string, a Admission) error
	// HoldQueue holds the team's Kueue queue (stopPolicy Hold) at once,
	// ahead of the next quota sync, which keeps it so.
	HoldQueue(ctx context.Context, t team.Name) error
}

// ObjectRef names a workload's primary object on the cluster.
type ObjectRef struct {
	Namespace  string
	Kind       string
	Name       string
	WorkloadID string
	Running    bool // asked to run: not suspended, scaled to zero or halted
}

func (o ObjectRef) String() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// Event is something the cluster reported about a workload's objects.
type Event struct {
	Time    time.Time
	Type    string // Normal or Warning
	Reason  string
	Message string
	Object  string // Kind/name
	Count   int
}

// Authorizer decides what the caller (the identity in the context) may do in a
// team.
type Authorizer interface {
	Allowed(id identity.Identity, team team.Name, permission access.Permission) bool
	Teams(id identity.Identity, permission access.Permission) (all bool, teams []string)
	MayUse(team team.Name, u access.Use) error
}

// Templates finds template versions and the GPU classes they are checked against.
type Templates interface {
	Get(ctx context.Context, name string, version int) (catalog.Version, error)
	// Status is a version's status and its reason, without its document.
	Status(ctx context.Context, name string, version int) (catalog.Status, string, error)
	Classes() *gpu.Catalog
}

// Images verifies a template's catalog image (signature, annotations,
// attestations) and pins it by digest. A refusal says which check failed.
type Images interface {
	// PinImage verifies the catalog image ref and returns the reference that
	// runs (pinned by digest) and its TEE ("" unless a confidential image).
	PinImage(ctx context.Context, ref string) (pinned, tee string, err error)
}

// Budgets say what a team's budget and approval rules make of a launch
// (package budget's Service).
type Budgets interface {
	// Verdict decides on a launch in team costing pricePerHour for hours
	// (its max runtime; 0: none): held, waiting for approval (for how
	// long), or neither.
	Verdict(ctx context.Context, t team.Name, pricePerHour, hours float64) (budget.Verdict, time.Duration, error)
	// Held says whether the team's spent budget holds its launches, and why.
	Held(ctx context.Context, t team.Name) (why string, held bool, err error)
	// Month is the team's monthly budget against spent in [from, to) and
	// the alerts it sent then (nil status: no monthly budget).
	Month(ctx context.Context, t team.Name, spent float64, from, to time.Time) (*budget.Status, []budget.Alert, error)
}

// Options is what a Service is made of. Store, Templates, Namespace,
// Authorizer, Images and Budgets are required: there is no nil that means
// "allow" or "unverified".
type Options struct {
	Store     Store
	Templates Templates
	Namespace func(team.Name) string // a team's namespace
	// Authorizer checks every user-facing operation against the caller's
	// permissions in the workload's team.
	Authorizer Authorizer
	// Images verifies and pins every launch's image.
	Images Images
	// Budgets hold or send for approval the launches the teams' budgets
	// and approval rules say.
	Budgets Budgets
	// Cluster is where launches are applied; nil: they are recorded and
	// rendered, not applied (gantry serve without a kubeconfig).
	Cluster Cluster
	// KBSURL enables confidential launches: their pods carry Kata init data
	// pointing the attestation agent at this key broker. "": refused.
	KBSURL string
	// Kueue renders workloads queued for Kueue (render.Meta.Kueue).
	Kueue bool
	// Fleet, with Kueue, hands Jobs to MultiKueue for the worker clusters
	// (render.Meta.MultiKueue) and refuses the other workloads.
	Fleet bool
	// RunURL is how a Job's pods reach Gantry to report their progress
	// (render.Meta.RunURL); "": they do not.
	RunURL string
	// PUE is the power usage effectiveness of a cluster's site (showback's
	// facility kWh); nil: 1 everywhere.
	PUE func(cluster string) float64
	// Carbon rates energy in gCO2e/kWh where (Location: a cluster's, ""
	// the one Gantry drives) and when it was used; nil: no carbon figures.
	Carbon   carbon.Source
	Location func(cluster string) string
	// Forecast plans flexible jobs' starts (spec.scheduling.flexible) at
	// Location(""); nil: they start at once.
	Forecast carbon.Forecaster
	// Sites, with Fleet, are the worker clusters a flexible job may run
	// on: its start is planned with its cluster, on each one's forecast.
	// nil: at Location("") alone.
	Sites Sites
	// NodeGroups refuse launches their class's groups could never hold
	// (an empty set: none declared, nothing refused for size).
	NodeGroups *nodegroup.Set
	Log        *slog.Logger // default: slog.Default()
	Now        func() time.Time
}

// Service is the workload domain logic.
type Service struct {
	store     Store
	templates Templates
	namespace func(team.Name) string
	cluster   Cluster // nil: workloads are recorded, not applied
	authz     Authorizer
	images    Images
	budgets   Budgets
	groups    *nodegroup.Set
	meter     *Meter
	initData  string // "": confidential launches are refused
	kueue     bool
	fleet     bool
	runURL    string
	forecast  carbon.Forecaster
	sites     Sites
	location  func(cluster string) string
	log       *slog.Logger
	now       func() time.Time
	newID     func() string
	touched   sync.Map // workload id → time.Time of the last activity written
	touchedN  atomic.Int64
	// replanned is when held flexible launches were last planned again
	// (Unix nanoseconds by the service's clock; ReleaseDeferred).
	replanned atomic.Int64
}

// New returns a workload service, complete: every required dependency is
// checked here.
func New(o Options) (*Service, error) {
	var missing []string
	for name, nilValue := range map[string]bool{
		"Store": o.Store == nil, "Templates": o.Templates == nil, "Namespace": o.Namespace == nil,
		"Authorizer": o.Authorizer == nil, "Images": o.Images == nil, "Budgets": o.Budgets == nil, "Now": o.Now == nil,
		"NodeGroups": o.NodeGroups == nil,
	} {
		if nilValue {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("workload.New: missing %s", strings.Join(missing, ", "))
	}
	s := &Service{store: o.Store, templates: o.Templates, namespace: o.Namespace, cluster: o.Cluster,
		authz: o.Authorizer, images: o.Images, budgets: o.Budgets, groups: o.NodeGroups, kueue: o.Kueue, fleet: o.Fleet && o.Kueue, runURL: o.RunURL, forecast: o.Forecast, sites: o.Sites, location: o.Location, log: o.Log, now: o.Now, newID: NewID}
	if s.location == nil {
		s.location = func(string) string { return "" }
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	var err error
	if s.meter, err = NewMeter(MeterOptions{Store: o.Store, Templates: o.Templates, Now: s.now, PUE: o.PUE, Carbon: o.Carbon, Location: o.Location}); err != nil {
		return nil, err
	}
	if o.KBSURL != "" {
		d, err := render.InitData(o.KBSURL)
		if err != nil {
			return nil, fmt.Errorf("confidential key broker: %w", err)
		}
		s.initData = d
	}
	return s, nil
}

// clock is the service's time, as stored (UTC, microseconds).
func (s *Service) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// may reports whether the caller may do permission in team.
func (s *Service) may(ctx context.Context, t team.Name, permission access.Permission) bool {
	id, ok := identity.From(ctx)
	return ok && s.authz.Allowed(id, t, permission)
}

// flag sets each workload's TemplateStatus, one lookup per template version.
func (s *Service) flag(ctx context.Context, ws []Workload) {
	type key struct {
		name    string
		version int
	}
	type flag struct {
		status catalog.Status
		reason string
	}
	seen := map[key]flag{}
	for i := range ws {
		k := key{ws[i].Template, ws[i].TemplateVersion}
		f, ok := seen[k]
		if !ok {
			var err error
			if f.status, f.reason, err = s.templates.Status(ctx, k.name, k.version); err != nil {
				continue // flags are advice: a failed lookup leaves the workload unflagged
			}
			seen[k] = f
		}
		if f.status != catalog.Active {
			ws[i].TemplateStatus, ws[i].TemplateStatusReason = f.status, f.reason
		}
	}
}

// visible returns the workload if the caller may read it; another team's
// workload is not found, so that its existence does not leak.
func (s *Service) visible(ctx context.Context, id string) (Workload, error) {
	w, err := s.store.Workload(ctx, id)
	if err != nil {
		return w, err
	}
	if !s.may(ctx, w.Team, access.WorkloadsRead) {
		return Workload{}, &fault.NotFound{Kind: "workload", Name: id, Denied: fmt.Sprintf("may not read workloads of team %q", w.Team)}
	}
	return w, nil
}

// Visible says whether the caller may read the workload (a run's progress,
// say): nil, or a *fault.NotFound that does not leak another team's.
func (s *Service) Visible(ctx context.Context, id string) error {
	_, err := s.visible(ctx, id)
	return err
}

// manageable returns a workload the caller may stop, start or delete.
func (s *Service) manageable(ctx context.Context, id string) (Workload, error) {
	w, err := s.visible(ctx, id)
	if err != nil {
		return w, err
	}
	caller, _ := identity.From(ctx)
	if !s.may(ctx, w.Team, access.WorkloadsManage) && !(w.Owner == caller.String() && s.may(ctx, w.Team, access.OwnWorkloadsManage)) {
		return w, &fault.Forbidden{Reason: fmt.Sprintf("only its owner or a team-admin of %q may stop, start or delete this workload", w.Team)}
	}
	return w, nil
}

// ref is the workload's primary object on the cluster.
func (s *Service) ref(w Workload) ObjectRef {
	return ObjectRef{Namespace: s.namespace(w.Team), Kind: render.PrimaryKind(w.Kind, s.fleet), Name: w.Name, WorkloadID: w.ID}
}

func validStatus(st Status) bool { return slices.Contains(Statuses, st) }

func encodeCursor(k Key) string {
	b, _ := json.Marshal([]any{k.CreatedAt.UnixMicro(), k.ID})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(c string) (*Key, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, err
	}
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil || len(v) != 2 {
		return nil, fmt.Errorf("bad cursor")
	}
	var at int64
	var id string
	if json.Unmarshal(v[0], &at) != nil || json.Unmarshal(v[1], &id) != nil || !ValidID(id) {
		return nil, fmt.Errorf("bad cursor")
	}
	return &Key{CreatedAt: time.UnixMicro(at).UTC(), ID: id}, nil
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// IDLength is the length of a workload id.
const IDLength = 10

// NewID returns a random workload id: 10 characters from [a-z0-9], starting with a
// letter (about 51 bits).
func NewID() string {
	b := make([]byte, IDLength)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	for i := range b {
		n := len(idAlphabet)
		if i == 0 {
			n = 26
		}
		b[i] = idAlphabet[int(b[i])%n]
	}
	return string(b)
}

// ValidID reports whether s looks like a workload id.
func ValidID(s string) bool {
	if len(s) != IDLength || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return strings.Trim(s, idAlphabet) == ""
}
