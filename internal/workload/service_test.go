package workload_test

import (
	"context"
	"database/sql"
	"errors"
	batchv1 "k8s.io/api/batch/v1"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/governance"
	"github.com/gantryhq/gantry/internal/store/telemetrydb"
	"github.com/gantryhq/gantry/internal/store/workloads"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/internal/workload/workloadtest"
)

// harness is the workload service on a real SQLite store with the starter
// catalog, an in-memory cluster and a clock the test moves.
type harness struct {
	svc       *workload.Service
	db        *store.DB
	store     *workloads.Store   // the workloads
	telemetry *telemetrydb.Store // GPU samples, for the used and idle split
	cluster   *workloadtest.Cluster
	cat       *catalog.Service
	dbPath    string
	mu        sync.Mutex
	now       time.Time
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = h.now.Add(d)
}

func newHarness(t testing.TB) *harness { return newHarnessWith(t, nil, false) }

// newHarnessWith is newHarness with a budget service made by budgets (nil:
// none) and Kueue on or off.
func newHarnessWith(t testing.TB, budgets func(*harness) workload.Budgets, kueue bool, edit ...func(*workload.Options)) *harness {
	t.Helper()
	ctx := asAlice()
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "w.db")
	db, err := store.Open(ctx, store.SQLite, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := workloads.New(db)
	_, images, err := devregistry.StartDir(ctx, "../../images", classes)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New(catalog.Options{Store: governance.New(db), Classes: classes, Images: images.Catalog, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Seed(ctx, "seed", files); err != nil {
		t.Fatal(err)
	}
	h := &harness{db: db, store: st, telemetry: telemetrydb.New(db), dbPath: dbPath, cluster: workloadtest.NewCluster(), now: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	h.cat = cat
	var b workload.Budgets = workloadtest.NoBudgets{}
	if budgets != nil {
		b = budgets(h)
	}
	o := workload.Options{Store: st, Templates: cat, Images: images, Authorizer: workloadtest.AllowAll{}, NodeGroups: &nodegroup.Set{}, Budgets: b, Kueue: kueue,
		Namespace: func(t team.Name) string { return "gantry-" + t.String() }, Cluster: h.cluster, Now: h.clock, Log: slog.New(slog.DiscardHandler)}
	for _, e := range edit {
		e(&o)
	}
	h.svc, err = workload.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) launch(t *testing.T, tmpl string) workload.Workload {
	t.Helper()
	req := workload.Request{Template: tmpl, Team: "vision"}
	if tmpl == "gpu-vm" {
		req.Choice.Params = map[string]any{"sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKubeTestKey0000000000000000000000000000 bob@host"}
	}
	w, _, err := h.svc.Create(asAlice(), "alice", req)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Applied() || w.Status != workload.Pending {
		t.Fatalf("launched %+v, want applied and Pending", w)
	}
	return w
}

func (h *harness) status(t *testing.T, id string) workload.Workload {
	t.Helper()
	w, err := h.store.Workload(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (h *harness) running(t *testing.T, id string) bool {
	t.Helper()
	o, ok := h.cluster.Object(id)
	if !ok {
		t.Fatalf("workload %s has no object on the cluster", id)
	}
	return o.Running
}

// asAlice is a context for a signed-in user (the authorizer allows all).
func asAlice() context.Context {
	return identity.With(context.Background(), identity.Identity{Issuer: "https://idp.test", Subject: "alice"})
}

func TestNewNeedsEveryDependency(t *testing.T) {
	_, err := workload.New(workload.Options{})
	if err == nil || !strings.Contains(err.Error(), "Authorizer, Budgets, Images, Namespace, NodeGroups, Now, Store, Templates") {
		t.Fatalf("err = %v, want every missing dependency named", err)
	}
}

// TestStopStartEveryKind: every kind stops without losing its objects, a
// late report cannot revive it, and it starts again with its max runtime
// counted afresh.
func TestStopStartEveryKind(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	for _, tmpl := range []string{"pytorch-train", "vllm-inference", "jupyter-notebook", "gpu-vm"} {
		t.Run(tmpl, func(t *testing.T) {
			w := h.launch(t, tmpl)
			if _, err := h.svc.Report(ctx, w.ID, workload.Running, ""); err != nil {
				t.Fatal(err)
			}
			w, err := h.svc.Stop(ctx, w.ID)
			if err != nil || w.Status != workload.Stopped || h.running(t, w.ID) {
				t.Fatalf("stop: %+v %v; cluster running=%v", w, err, h.running(t, w.ID))
			}
			_, err = h.svc.Report(ctx, w.ID, workload.Running, "")
			var c *fault.Conflict
			if !errors.As(err, &c) || h.status(t, w.ID).Status != workload.Stopped {
				t.Fatalf("late report: %v; status %s, want refused and Stopped", err, h.status(t, w.ID).Status)
			}
			h.advance(time.Hour)
			w, err = h.svc.Start(ctx, w.ID)
			if err != nil || w.Status != workload.Pending || !h.running(t, w.ID) {
				t.Fatalf("start: %+v %v", w, err)
			}
			if tmpl == "jupyter-notebook" && !w.ExpiresAt.Equal(h.clock().Add(168*time.Hour)) {
				t.Fatalf("expiry after start %v, want 168h from now", w.ExpiresAt)
			}
			if err := h.svc.Delete(ctx, w.ID); err != nil {
				t.Fatal(err)
			}
			if _, ok := h.cluster.Object(w.ID); ok || h.status(t, w.ID).Status != workload.Deleted {
				t.Fatal("deleted workload still on the cluster, or not recorded as deleted")
			}
			if _, err := h.svc.Start(ctx, w.ID); !errors.As(err, &c) {
				t.Fatalf("start after delete: %v, want a conflict", err)
			}
		})
	}
}

// TestEndedCannotBeStopped: a finished job cannot be stopped or started, and
// reports after it ended are refused.
func TestEndedCannotBeStopped(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	w := h.launch(t, "pytorch-train")
	if _, err := h.svc.Report(ctx, w.ID, workload.Succeeded, ""); err != nil {
		t.Fatal(err)
	}
	var c *fault.Conflict
	if _, err := h.svc.Stop(ctx, w.ID); !errors.As(err, &c) {
		t.Fatalf("stop after success: %v, want a conflict", err)
	}
	if _, err := h.svc.Start(ctx, w.ID); !errors.As(err, &c) {
		t.Fatalf("start after success: %v, want a conflict", err)
	}
	if _, err := h.svc.Report(ctx, w.ID, workload.Failed, "late"); !errors.As(err, &c) {
		t.Fatalf("report after success: %v, want refused", err)
	}
	if got := h.status(t, w.ID); got.Status != workload.Succeeded {
		t.Fatalf("status %s, want Succeeded", got.Status)
	}
}

// TestClusterAwayDuringStop: a stop the cluster does not answer is recorded
// at once and carried out by Converge once the cluster is back.
func TestClusterAwayDuringStop(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	w := h.launch(t, "vllm-inference")
	h.cluster.SetErr(&fault.Unavailable{What: "kubernetes API server", Err: errors.New("connection refused")})
	w, err := h.svc.Stop(ctx, w.ID)
	if err != nil || w.Status != workload.Stopped {
		t.Fatalf("stop with the cluster away: %+v %v, want Stopped recorded", w, err)
	}
	h.cluster.SetErr(nil)
	if !h.running(t, w.ID) {
		t.Fatal("the cluster did not answer, yet the object was stopped")
	}
	actions, err := h.svc.Converge(ctx, h.cluster, false)
	if err != nil || len(actions) != 1 || actions[0].Do != "stop" || !actions[0].Done || h.running(t, w.ID) {
		t.Fatalf("converge: %+v %v", actions, err)
	}
	if actions, _ := h.svc.Converge(ctx, h.cluster, false); len(actions) != 0 {
		t.Fatalf("a second converge did %+v, want nothing", actions)
	}
}

// staleObjects is a cache a moment behind the cluster: it lists what it
// was given.
type staleObjects []workload.ObjectRef

func (s staleObjects) Managed(context.Context) ([]workload.ObjectRef, error) { return s, nil }

// TestConvergeConfirmsWithTheCluster: a stop or start that a cache behind
// the cluster calls for is not carried out when the API server already
// shows the object as its record says (a start just after a stop, the
// cache still showing it running, is not undone); one the API server
// confirms is.
func TestConvergeConfirmsWithTheCluster(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	w := h.launch(t, "vllm-inference")
	obj, _ := h.cluster.Object(w.ID)
	if _, err := h.svc.Stop(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	// The cache still shows it running; the cluster has it stopped.
	obj.Running = true
	if acts, err := h.svc.Converge(ctx, staleObjects{obj}, false); err != nil || len(acts) != 0 {
		t.Fatalf("stopped, a stale cache showing it running: %+v %v, want nothing done", acts, err)
	}
	if _, err := h.svc.Start(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	// Started again; the cache still shows it stopped.
	obj.Running = false
	if acts, err := h.svc.Converge(ctx, staleObjects{obj}, false); err != nil || len(acts) != 0 || !h.running(t, w.ID) {
		t.Fatalf("started, a stale cache showing it stopped: %+v %v (running %v), want nothing done", acts, err, h.running(t, w.ID))
	}
	// A stop the cluster missed: the cache and the API server agree.
	h.cluster.SetErr(&fault.Unavailable{What: "kubernetes API server", Err: errors.New("connection refused")})
	if _, err := h.svc.Stop(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	h.cluster.SetErr(nil)
	obj.Running = true
	acts, err := h.svc.Converge(ctx, staleObjects{obj}, false)
	if err != nil || len(acts) != 1 || acts[0].Do != "stop" || !acts[0].Done || h.running(t, w.ID) {
		t.Fatalf("a stop the cluster missed: %+v %v, want it stopped", acts, err)
	}
}

// TestConvergeOrphansAndDeleted: an object of no workload is reported and
// removed only when asked; a deleted workload's object is always removed.
func TestConvergeOrphansAndDeleted(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	orphan := workload.ObjectRef{Namespace: "gantry-x", Kind: "Job", Name: "stray", WorkloadID: "zzzzzzzzzz", Running: true}
	h.cluster.Put(orphan)
	acts, err := h.svc.Converge(ctx, h.cluster, false)
	if err != nil || len(acts) != 1 || acts[0].Do != "delete" || acts[0].Done {
		t.Fatalf("orphan without removal: %+v %v", acts, err)
	}
	if _, ok := h.cluster.Object(orphan.WorkloadID); !ok {
		t.Fatal("orphan removed though removal was not asked for")
	}
	if _, err := h.svc.Converge(ctx, h.cluster, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.cluster.Object(orphan.WorkloadID); ok {
		t.Fatal("orphan kept though removal was asked for")
	}
}

// TestExpire: services, notebooks and VMs past their max runtime are stopped
// with the reason on the record; jobs are left to the cluster's deadline.
func TestExpire(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	nb := h.launch(t, "jupyter-notebook") // 168h
	job := h.launch(t, "pytorch-train")   // 72h, activeDeadlineSeconds
	dev := h.launch(t, "dev-environment") // 72h
	h.advance(71 * time.Hour)
	if n, err := h.svc.Expire(ctx); err != nil || n != 0 {
		t.Fatalf("before any max runtime: stopped %d, %v", n, err)
	}
	h.advance(2 * time.Hour)
	if n, err := h.svc.Expire(ctx); err != nil || n != 1 {
		t.Fatalf("past 72h: stopped %d, %v; want the dev environment only", n, err)
	}
	if got := h.status(t, dev.ID); got.Status != workload.Stopped || !strings.Contains(got.Reason, "max runtime") || h.running(t, dev.ID) {
		t.Fatalf("dev environment: %+v", got)
	}
	if got := h.status(t, job.ID); got.Status != workload.Pending {
		t.Fatalf("job stopped by the loop: %+v", got)
	}
	if got := h.status(t, nb.ID); got.Status != workload.Pending {
		t.Fatalf("notebook stopped early: %+v", got)
	}
	h.advance(100 * time.Hour)
	if n, _ := h.svc.Expire(ctx); n != 1 || h.status(t, nb.ID).Status != workload.Stopped {
		t.Fatalf("notebook past 168h not stopped (%d)", n)
	}
}

// TestRefusedApplyFails: objects the API server refuses fail the launch with
// its reason.
func TestRefusedApplyFails(t *testing.T) {
	h := newHarness(t)
	h.cluster.SetErr(&fault.Invalid{Fields: []fault.Field{{Path: "objects.Job/x.spec", Message: "rejected by the Kubernetes API server: no"}}})
	w, _, err := h.svc.Create(asAlice(), "alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	if err == nil || w.Status != workload.Failed || !strings.Contains(w.Reason, "rejected") {
		t.Fatalf("%+v %v", w, err)
	}
}

// TestConcurrentReportsAndStop: reports racing a stop never leave the
// workload anything but Stopped.
func TestConcurrentReportsAndStop(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	w := h.launch(t, "vllm-inference")
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if i == 25 {
				if _, err := h.svc.Stop(ctx, w.ID); err != nil {
					t.Error(err)
				}
				return
			}
			st := []workload.Status{workload.Scheduled, workload.Running}[i%2]
			h.svc.Report(ctx, w.ID, st, "")
		})
	}
	wg.Wait()
	if got := h.status(t, w.ID); got.Status != workload.Stopped {
		t.Fatalf("after reports racing a stop: %s, want Stopped", got.Status)
	}
}

// TestReconcileFailsWhatCanNeverApply: a recorded launch whose objects can no
// longer be rendered as recorded is failed with the reason and leaves the
// unapplied list, while the rest of the lifecycle goes on.
func TestReconcileFailsWhatCanNeverApply(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	h.cluster.SetErr(&fault.Unavailable{What: "kubernetes API server", Err: errors.New("connection refused")})
	w, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "vllm-inference", Team: "vision"})
	if err != nil || w.Applied() {
		t.Fatalf("launch with the cluster away: %+v %v", w, err)
	}
	h.cluster.SetErr(nil)
	// Its record no longer matches what rendering gives (as after a change
	// of the renderer), written behind the store's back.
	db, err := sql.Open("sqlite", "file:"+h.dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "UPDATE workloads SET objects_hash = 'other' WHERE id = ?", w.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Reconcile(ctx); err == nil {
		t.Fatal("reconcile reported no problem")
	}
	got := h.status(t, w.ID)
	if got.Status != workload.Failed || !strings.Contains(got.Reason, "rendering it again gives other objects") {
		t.Fatalf("after reconcile: %s %q, want Failed with the reason", got.Status, got.Reason)
	}
	if n, err := h.svc.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("a second pass: applied %d, %v; want nothing left to apply", n, err)
	}
}

// TestReconcileAppliesAsRecorded: a Job recorded by a replica whose pods
// could not report progress (no run URL) is applied, as recorded, by one
// that can: re-rendering tries the launch without progress reports too.
func TestReconcileAppliesAsRecorded(t *testing.T) {
	var opts workload.Options
	h := newHarnessWith(t, nil, false, func(o *workload.Options) { opts = *o })
	ctx := asAlice()
	h.cluster.SetErr(&fault.Unavailable{What: "kubernetes API server", Err: errors.New("connection refused")})
	w, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	if err != nil || w.Applied() {
		t.Fatalf("launch with the cluster away: %+v %v", w, err)
	}
	h.cluster.SetErr(nil)
	opts.RunURL = "http://gantry.gantry-system.svc:8080"
	reporting, err := workload.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := reporting.Reconcile(ctx); err != nil || n != 1 {
		t.Fatalf("reconcile by a replica with a run URL: applied %d, %v", n, err)
	}
	if got := h.status(t, w.ID); !got.Applied() || got.Status == workload.Failed {
		t.Fatalf("after reconcile: %s %q applied %v", got.Status, got.Reason, got.Applied())
	}
}

// TestReconcileAppliesATrialsRunAsRecorded: a trial's run, recorded while
// the cluster was away, renders again as launched — its max runtime the
// trial's cap, its trial's label and variables — and is applied.
func TestReconcileAppliesATrialsRunAsRecorded(t *testing.T) {
	h := newHarnessWith(t, nil, false, func(o *workload.Options) { o.RunURL = "http://gantry.gantry-system.svc:8080" })
	ctx := asAlice()
	h.cluster.SetErr(&fault.Unavailable{What: "kubernetes API server", Err: errors.New("connection refused")})
	caps := &workload.Trial{ID: "trial0001", Steps: 200, MaxRuntime: 20 * time.Minute}
	w, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision", Trial: caps,
		Choice: template.Choice{Class: "A100-80GB", Count: 2}})
	if err != nil || w.Applied() {
		t.Fatalf("launch with the cluster away: %+v %v", w, err)
	}
	if w.ExpiresAt.Sub(w.CreatedAt) != 20*time.Minute {
		t.Fatalf("expires %s after its launch, want the trial's 20m (the template says 72h)", w.ExpiresAt.Sub(w.CreatedAt))
	}
	h.cluster.SetErr(nil)
	if n, err := h.svc.Reconcile(ctx); err != nil || n != 1 {
		t.Fatalf("reconcile: applied %d, %v", n, err)
	}
	if got := h.status(t, w.ID); !got.Applied() || got.Status == workload.Failed {
		t.Fatalf("after reconcile: %s %q applied %v", got.Status, got.Reason, got.Applied())
	}
	var job *batchv1.Job
	for _, o := range h.cluster.Applied(w.ID) {
		if j, ok := o.(*batchv1.Job); ok {
			job = j
		}
	}
	if job == nil {
		t.Fatal("no Job applied")
	}
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != 1200 || job.Labels["gantry.dev/trial"] != "trial0001" ||
		env["GANTRY_TRIAL_ID"] != "trial0001" || env["GANTRY_TRIAL_STEPS"] != "200" || env["GANTRY_RUN_URL"] == "" {
		t.Fatalf("the trial's Job: deadline %v, labels %v, env %v", d, job.Labels, env)
	}
}

// TestMetering: a workload costs its price per hour — its GPUs' share at the
// class's spot or on-demand price when it was launched — over the time it
// was Running, across an eviction and a stop, on a fixed clock; the record
// keeps it through the store.
func TestMetering(t *testing.T) {
	profiles, err := carbon.ParseProfiles("carbon.yaml", []byte("apiVersion: gantry.dev/v1\nkind: CarbonProfiles\nsites:\n  eu-west: ["+strings.Repeat("200, ", 23)+"200]\n"))
	if err != nil {
		t.Fatal(err)
	}
	site := "eu-west"
	h := newHarnessWith(t, nil, false, func(o *workload.Options) {
		o.PUE = func(string) float64 { return 1.4 }
		o.Carbon, o.Location = profiles, func(string) string { return site }
	})
	ctx := asAlice()
	classes, _, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := classes.Get("H100-80GB")
	// A 3g.40gb slice of an H100 (half the GPU) for a batch job that runs
	// on spot, and two whole H100s on demand for training.
	mig, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "batch-inference", Team: "vision",
		Choice: template.Choice{Class: "H100-80GB", MIGProfile: "3g.40gb", Params: map[string]any{"input": "p.jsonl"}}})
	if err != nil {
		t.Fatal(err)
	}
	train, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if mig.PricePerHour != 0.5*h100.Price.Spot || train.PricePerHour != 2*h100.Price.OnDemand {
		t.Fatalf("prices %v and %v, want %v and %v", mig.PricePerHour, train.PricePerHour, 0.5*h100.Price.Spot, 2*h100.Price.OnDemand)
	}
	report := func(id string, st workload.Status) {
		t.Helper()
		if _, err := h.svc.Report(ctx, id, st, ""); err != nil {
			t.Fatal(err)
		}
	}
	h.advance(10 * time.Minute) // pending: not billed
	report(mig.ID, workload.Running)
	report(train.ID, workload.Running)
	h.advance(2 * time.Hour)
	report(mig.ID, workload.Pending) // evicted, waiting again: not billed
	h.advance(30 * time.Minute)
	report(mig.ID, workload.Running)
	h.advance(time.Hour)
	if _, err := h.svc.Stop(ctx, mig.ID); err != nil {
		t.Fatal(err)
	}
	h.advance(5 * time.Hour) // stopped: not billed; training runs on
	now := h.clock()
	got, err := h.svc.Get(ctx, mig.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * 0.5 * h100.Price.Spot; math.Abs(got.CostAt(now)-want) > 1e-9 {
		t.Errorf("the slice cost %v over 3 h running, want %v", got.CostAt(now), want)
	}
	got, err = h.svc.Get(ctx, train.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := 8.5 * 2 * h100.Price.OnDemand; math.Abs(got.CostAt(now)-want) > 1e-9 {
		t.Errorf("training cost %v over 8.5 h running, want %v", got.CostAt(now), want)
	}

	// Showback over periods, from the runs: the whole day, and one hour
	// (the slice's first run and the training, one hour each).
	start := now.Add(-8*time.Hour - 40*time.Minute) // the launches
	slice, whole := 0.5*h100.Price.Spot, 2*h100.Price.OnDemand
	cents := func(v float64) float64 { return math.Round(v*100) / 100 }
	for _, tc := range []struct {
		from, to time.Time
		groupBy  string
		want     map[string]float64
	}{
		{start, now, "team", map[string]float64{"vision": cents(3*slice + 8.5*whole)}},
		{start, now, "template", map[string]float64{"batch-inference": cents(3 * slice), "pytorch-train": cents(8.5 * whole)}},
		{start, now, "costCenter", map[string]float64{"ml-serving": cents(3 * slice), "ml-training": cents(8.5 * whole)}},
		{start.Add(time.Hour), start.Add(2 * time.Hour), "gpuClass", map[string]float64{"H100-80GB": cents(slice + whole)}},
		{start.Add(-time.Hour), start, "team", map[string]float64{}}, // before any run
	} {
		c, err := h.svc.Costs(ctx, tc.from, tc.to, tc.groupBy)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, l := range c.Lines {
			got[l.Key] = l.Cost
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s by %s: %v, want %v", tc.from.Format(time.Kitchen), tc.groupBy, got, tc.want)
		}
		for k, v := range tc.want {
			if math.Abs(got[k]-v) > 0.011 {
				t.Errorf("%s by %s: %s cost %v, want %v", tc.from.Format(time.Kitchen), tc.groupBy, k, got[k], v)
			}
		}
	}
	// Used and idle, from the GPU series: in the second hour the training's
	// GPUs were active 45 of 60 minutes; the slice sent no samples.
	hour := start.Add(time.Hour)
	series := telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-a"}, Workload: train.ID}
	v := telemetry.NoValues()
	v[telemetry.GPUUtil] = 80
	if err := h.telemetry.AppendSamples(context.Background(), []telemetry.Stored{{Series: series, Time: hour, Share: 1, Values: v}}); err != nil {
		t.Fatal(err)
	}
	recs, err := h.telemetry.WorkloadSeries(context.Background(), train.ID)
	if err != nil || len(recs) != 1 {
		t.Fatalf("series %v %v", recs, err)
	}
	for i := range 60 {
		avg := telemetry.NoValues()
		avg[telemetry.GPUUtil] = 0
		if i < 45 {
			avg[telemetry.GPUUtil] = 80
		}
		b := hour.Add(time.Duration(i) * time.Minute)
		// Its GPU drew 700 W the whole hour: 0.7 kWh.
		if err := h.telemetry.WriteRollups(context.Background(), telemetry.Minute, telemetry.Pending{Bucket: b},
			[]telemetry.Rollup{{Series: recs[0].ID, Bucket: b, N: 6, Avg: avg, Max: avg, P95: avg, Joules: 700 * 60}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := h.svc.Costs(ctx, hour, hour.Add(time.Hour), "template")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range c.Lines {
		want := map[string][3]float64{"pytorch-train": {cents(0.75 * whole), cents(0.25 * whole), 0}, "batch-inference": {0, 0, cents(slice)}}[l.Key]
		if got := [3]float64{l.Used, l.Idle, l.Unmeasured}; math.Abs(got[0]-want[0]) > 0.011 || math.Abs(got[1]-want[1]) > 0.011 || math.Abs(got[2]-want[2]) > 0.011 {
			t.Errorf("%s: used, idle, unmeasured %v, want %v", l.Key, got, want)
		}
	}
	for _, l := range c.Lines {
		want := map[string][2]float64{"pytorch-train": {0.7, 0.98}}[l.Key] // the slice sent no samples: none
		if l.KWh != want[0] || l.FacilityKWh != want[1] {
			t.Errorf("%s: %v kWh, %v facility kWh; want %v", l.Key, l.KWh, l.FacilityKWh, want)
		}
	}
	if c.KWh != 0.7 || c.FacilityKWh != 0.98 {
		t.Errorf("total %v kWh, %v facility kWh; want 0.7 and 0.98 (PUE 1.4)", c.KWh, c.FacilityKWh)
	}
	// 0.98 facility kWh at 200 gCO2e/kWh.
	if c.KgCO2e != 0.196 || c.UnratedKWh != 0 || !strings.Contains(c.CarbonSource, "carbon.yaml") {
		t.Errorf("carbon %v kg (%v kWh unrated) from %q; want 0.196 kg from the profiles", c.KgCO2e, c.UnratedKWh, c.CarbonSource)
	}
	// A site the profiles do not rate: its energy is unrated, not guessed.
	site = "mars"
	if c, err := h.svc.Costs(ctx, hour, hour.Add(time.Hour), "template"); err != nil || c.KgCO2e != 0 || c.UnratedKWh != 0.98 || c.CarbonSource == "" {
		t.Errorf("an unrated site: %v kg, %v kWh unrated, source %q, %v", c.KgCO2e, c.UnratedKWh, c.CarbonSource, err)
	}
	if math.Abs(c.Used+c.Idle+c.Unmeasured-c.Total) > 0.02 {
		t.Errorf("used %v + idle %v + unmeasured %v != total %v", c.Used, c.Idle, c.Unmeasured, c.Total)
	}
	if _, err := h.svc.Costs(ctx, now, start, "planet"); err == nil || !strings.Contains(err.Error(), "groupBy") || !strings.Contains(err.Error(), "from") {
		t.Errorf("a bad request: %v", err)
	}
}

// TestMeteredToTheClustersTimes: a run is billed from when the cluster
// says it started to when the cluster says it ended, not from and to when
// Gantry looked — a Job that ended while no replica led (a failover) is
// billed to its end, to the cent — and a time the cluster gives that is
// ahead of Gantry's clock, or before the record's last change, is bounded
// by them.
func TestMeteredToTheClustersTimes(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	w, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	h.advance(time.Minute)
	scheduled := h.clock()
	if _, err := h.svc.Observe(ctx, w.ID, workload.Observed{Status: workload.Scheduled}); err != nil {
		t.Fatal(err)
	}
	// Its containers started 20 s after it was scheduled; Gantry sees it
	// 40 s later.
	started := scheduled.Add(20 * time.Second)
	h.advance(time.Minute)
	if got, err := h.svc.Observe(ctx, w.ID, workload.Observed{Status: workload.Running, At: started}); err != nil || !got.RunningSince.Equal(started) {
		t.Fatalf("running since %v, want the containers' start %v (%v)", got.RunningSince, started, err)
	}
	// It completes after 3 h; the leader dies just before, and the next one
	// first looks 47 s after the end.
	ended := started.Add(3 * time.Hour)
	h.advance(ended.Sub(h.clock()) + 47*time.Second)
	code := 0
	got, err := h.svc.Observe(ctx, w.ID, workload.Observed{Status: workload.Succeeded, At: ended, ExitCode: &code})
	if err != nil {
		t.Fatal(err)
	}
	want := w.PricePerHour * 3
	if !got.EndedAt.Equal(ended) || got.RunningFor != 3*time.Hour || math.Abs(got.CostAt(h.clock())-want) > 0.005 {
		t.Fatalf("ended %v after running %v for $%.4f; want %v, 3h, $%.2f", got.EndedAt, got.RunningFor, got.CostAt(h.clock()), ended, want)
	}
	// A cluster clock ahead of Gantry's, or a time before the record's last
	// change, is taken as Gantry's now or that change.
	other, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	created := h.clock()
	h.advance(time.Minute)
	if got, _ := h.svc.Observe(ctx, other.ID, workload.Observed{Status: workload.Running, At: created.Add(-time.Hour)}); !got.RunningSince.Equal(created) {
		t.Errorf("a start before its launch: running since %v, want %v", got.RunningSince, created)
	}
	h.advance(time.Minute)
	if got, _ := h.svc.Observe(ctx, other.ID, workload.Observed{Status: workload.Failed, At: h.clock().Add(time.Hour)}); !got.EndedAt.Equal(h.clock()) {
		t.Errorf("an end in the future: ended %v, want now %v", got.EndedAt, h.clock())
	}
}

// TestObserveWritesOnlyChanges: a report that changes nothing on the
// record opens no transaction (the database refuses every write here and
// it still answers), while one that changes the record writes it.
func TestObserveWritesOnlyChanges(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	w, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	running := workload.Observed{Status: workload.Running, Reason: "", At: h.clock()}
	first, err := h.svc.Observe(ctx, w.ID, running)
	if err != nil || first.Status != workload.Running {
		t.Fatalf("the first report: %v, %v", first.Status, err)
	}
	h.db.CrashAfter(0)
	defer h.db.CrashAfter(-1)
	h.advance(time.Minute)
	again, err := h.svc.Observe(ctx, w.ID, running)
	if err != nil || !workload.SameRecord(first, again) || !again.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("the same report again: %+v, %v; want the record as it was, nothing written", again, err)
	}
	if _, err := h.svc.Observe(ctx, w.ID, workload.Observed{Status: workload.Succeeded, At: h.clock()}); !errors.Is(err, store.ErrCrashed) {
		t.Fatalf("a report that changes the record: %v, want it written (and refused here)", err)
	}
	h.db.CrashAfter(-1)
	if got, err := h.svc.Observe(ctx, w.ID, workload.Observed{Status: workload.Succeeded, At: h.clock()}); err != nil || got.Status != workload.Succeeded {
		t.Fatalf("the end, written: %v, %v", got.Status, err)
	}
}

// TestNodeGroupsBoundLaunches: a class with node groups is judged by its
// groups at their max, not by the nodes it has now: a pod larger than the
// largest machine is refused with the numbers, one that a group could boot
// a machine for is accepted; spot groups count only for launches that may
// use spot.
func TestNodeGroupsBoundLaunches(t *testing.T) {
	groups, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind, Groups: []nodegroup.Group{
		{Name: "h100-small", Class: "H100-80GB", Purchase: nodegroup.OnDemand, GPUsPerNode: 4, Max: 1},
		{Name: "h100-spot", Class: "H100-80GB", Purchase: nodegroup.Spot, GPUsPerNode: 8, Max: 1},
	}}, []string{"H100-80GB"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, nil, false, func(o *workload.Options) { o.NodeGroups = groups })
	_, _, err = h.svc.Create(asAlice(), "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Count: 8}})
	var bad *fault.Invalid
	if !errors.As(err, &bad) || bad.Fields[0].Path != "gpu.count" ||
		!strings.Contains(err.Error(), "each pod asks for 8 H100-80GB GPUs, but the largest machine in its node groups has 4 (h100-small: 1 × 4)") {
		t.Fatalf("8 GPUs where the groups' machines have 4: %v", err)
	}
	// Four fit a machine the group can boot, whatever the nodes now are.
	w, _, err := h.svc.Create(asAlice(), "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Count: 4}})
	if err != nil || w.Status != workload.Pending {
		t.Fatalf("4 GPUs: %v %+v", err, w)
	}
}

// TestShowbackAtNodeGroupPrices: a run is billed at the price of the node
// group its pods run on — reserved, on-demand and spot machines each at
// their own price per GPU-hour — to the cent on a fixed clock, a run whose
// place the cluster says late is priced whole at its group's price, and a
// reserved group's hours no run used are the platform's idle cost.
func TestShowbackAtNodeGroupPrices(t *testing.T) {
	groups, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind, Groups: []nodegroup.Group{
		{Name: "h100-reserved", Class: "H100-80GB", Purchase: nodegroup.Reserved, GPUsPerNode: 8, Min: 1, Max: 1, PricePerNodeHour: 32}, // $4/GPU-h
		{Name: "h100-od", Class: "H100-80GB", Purchase: nodegroup.OnDemand, GPUsPerNode: 8, Max: 2, PricePerNodeHour: 60},               // $7.5/GPU-h
		{Name: "h100-spot", Class: "H100-80GB", Purchase: nodegroup.Spot, GPUsPerNode: 8, Max: 2, PricePerNodeHour: 24},                 // $3/GPU-h
	}}, []string{"H100-80GB"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, nil, false, func(o *workload.Options) { o.NodeGroups = groups })
	ctx := asAlice()
	start := h.clock()
	train, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	mig, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "batch-inference", Team: "vision",
		Choice: template.Choice{Class: "H100-80GB", MIGProfile: "3g.40gb", Params: map[string]any{"input": "p.jsonl"}}})
	if err != nil {
		t.Fatal(err)
	}
	observe := func(id string, st workload.Status, groups ...string) workload.Workload {
		t.Helper()
		w, err := h.svc.Observe(ctx, id, workload.Observed{Status: st, NodeGroups: groups})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// The training runs 3 h on the reserved machine (2 × $4), is evicted,
	// waits 30 min and runs 1 h on an on-demand one (2 × $7.5). The half
	// H100 runs 4 h on spot ($3 × 0.5); the cluster names its node 10
	// minutes into the run.
	if w := observe(train.ID, workload.Running, "h100-reserved"); w.NodeGroup != "h100-reserved" || w.RunPricePerHour() != 8 {
		t.Fatalf("on the reserved machine: group %q at $%v/h, want h100-reserved at $8", w.NodeGroup, w.RunPricePerHour())
	}
	if w := observe(mig.ID, workload.Running); w.NodeGroup != "" || w.RunPricePerHour() != mig.PricePerHour {
		t.Fatalf("placed nowhere yet: group %q at $%v/h, want its class's $%v", w.NodeGroup, w.RunPricePerHour(), mig.PricePerHour)
	}
	h.advance(10 * time.Minute)
	observe(mig.ID, workload.Running, "h100-spot")
	h.advance(170 * time.Minute)
	observe(train.ID, workload.Pending)
	h.advance(30 * time.Minute)
	if w := observe(train.ID, workload.Running, "h100-od"); w.RunPricePerHour() != 15 || w.NodeGroup != "h100-od" {
		t.Fatalf("the second run: group %q at $%v/h, want h100-od at $15", w.NodeGroup, w.RunPricePerHour())
	}
	h.advance(30 * time.Minute)
	if _, err := h.svc.Stop(ctx, mig.ID); err != nil {
		t.Fatal(err)
	}
	h.advance(30 * time.Minute)
	if _, err := h.svc.Stop(ctx, train.ID); err != nil {
		t.Fatal(err)
	}
	h.advance(30 * time.Minute)
	now := h.clock() // 5 h after start

	for id, want := range map[string]float64{train.ID: 3*8 + 1*15, mig.ID: 4 * 1.5} {
		w, err := h.svc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.CostAt(now); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s cost %v, want %v", w.Template, got, want)
		}
	}
	// Machines of the on-demand group were kept warm for $2.50 that day.
	if err := h.store.ChargeWarm(ctx, "h100-od", start, start.Add(20*time.Minute), 1, 7.5); err != nil {
		t.Fatal(err)
	}
	c, err := h.svc.Costs(ctx, start, now, "nodeGroup")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, l := range c.Lines {
		got[l.Key] = l.Cost
	}
	if want := map[string]float64{"h100-reserved": 24, "h100-od": 15, "h100-spot": 6}; !maps.Equal(got, want) || c.Total != 45 {
		t.Errorf("by node group %v (total %v), want %v (total 45)", got, c.Total, want)
	}
	// The reserved machine: 5 h × $32 paid, $24 charged to the training,
	// $136 the platform's; 40 GPU-hours, 6 used. With the warm machines,
	// the platform's idle cost is $138.50.
	want := []workload.ReservedCost{{Group: "h100-reserved", Class: "H100-80GB", Nodes: 1, Cost: 160, Charged: 24, Idle: 136, GPUHours: 40, UsedGPUHours: 6}}
	if !slices.Equal(c.Reserved, want) || !slices.Equal(c.Warm, []workload.WarmCost{{Group: "h100-od", Class: "H100-80GB", Cost: 2.5, GPUHours: 0.333}}) || c.PlatformIdle != 138.5 {
		t.Errorf("reserved %+v, warm %+v (platform idle %v), want %+v, $2.50 warm (138.5)", c.Reserved, c.Warm, c.PlatformIdle, want)
	}
	// An hour inside the training's first run: a third of its cost.
	c, err = h.svc.Costs(ctx, start.Add(time.Hour), start.Add(2*time.Hour), "nodeGroup")
	if err != nil {
		t.Fatal(err)
	}
	if c.Total != 8+1.5 || c.Reserved[0].Charged != 8 || c.Reserved[0].Idle != 24 {
		t.Errorf("one hour: total %v, reserved %+v, want 9.5 with 8 charged and 24 idle", c.Total, c.Reserved)
	}
}

// TestFleetLaunches: with worker clusters, a Job is handed to MultiKueue,
// a CPU-only one too; a service and a notebook are too (their pods through
// Kueue's pod integration); a VM, which cannot be dispatched yet, is refused
// naming the template — never left waiting for a dispatch that never
// comes — and nothing of it is recorded or applied.
func TestFleetLaunches(t *testing.T) {
	h := newHarnessWith(t, nil, true, func(o *workload.Options) { o.Fleet = true })
	h.launch(t, "pytorch-train")
	h.launch(t, "vllm-inference")
	h.launch(t, "jupyter-notebook")
	h.launch(t, "cpu-job")
	// The manager's nodes do not judge what its workers may run: two
	// cores where the manager's CPU node has one are launched.
	h.cluster.CPUCores = 1
	if _, _, err := h.svc.Create(asAlice(), "alice", workload.Request{Template: "cpu-job", Team: "vision", Choice: template.Choice{CPUOnly: true, Params: map[string]any{"cpu": "2"}}}); err != nil {
		t.Errorf("two cores in a fleet whose manager has a 1-core CPU node: %v", err)
	}
	// A VM is a FleetVM, which MultiKueue copies to its worker.
	if _, _, err := h.svc.Create(asAlice(), "alice", workload.Request{Template: "gpu-vm", Team: "vision", Choice: template.Choice{
		Params: map[string]any{"sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKubeTestKey0000000000000000000000000000 bob@host"}}}); err != nil {
		t.Errorf("a VM in a fleet: %v", err)
	}
	objs, _ := h.cluster.Managed(context.Background())
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.Kind)
	}
	slices.Sort(kinds)
	if want := []string{"Deployment", "FleetVM", "Job", "Job", "Job", "StatefulSet"}; !slices.Equal(kinds, want) {
		t.Errorf("on the cluster: %v, want %v (the Jobs, the service, the notebook and the VM's FleetVM)", kinds, want)
	}
}

// TestShowbackAtClusterPrices: a run dispatched to a worker cluster is
// billed at that cluster's price for it (a GPU run at its GPU-hour price
// times its GPUs; the hourly price when only that is said), each run at
// its own cluster's, to the cent on a fixed clock; a run the cluster names
// no price for stays at its class's; a CPU-only run at the hourly price
// its cluster's cores make.
func TestShowbackAtClusterPrices(t *testing.T) {
	h := newHarnessWith(t, nil, true, func(o *workload.Options) { o.Fleet = true })
	ctx := asAlice()
	train, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "A100-80GB", Count: 4}})
	if err != nil {
		t.Fatal(err)
	}
	observe := func(st workload.Status, cluster string, price float64) workload.Workload {
		t.Helper()
		w, err := h.svc.Observe(ctx, train.ID, workload.Observed{Status: st, Cluster: cluster, GPUHourPrice: price})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// 2 h on premises at $1.10, evicted, 1 h in the cloud at $3.20.
	if w := observe(workload.Running, "onprem", 1.10); w.Cluster != "onprem" || math.Abs(w.RunPricePerHour()-4.4) > 1e-9 {
		t.Fatalf("on premises: %q at $%v/h", w.Cluster, w.RunPricePerHour())
	}
	h.advance(2 * time.Hour)
	observe(workload.Queued, "", 0)
	if w := observe(workload.Running, "cloud", 3.20); w.Cluster != "cloud" || math.Abs(w.RunPricePerHour()-12.8) > 1e-9 {
		t.Fatalf("in the cloud: %q at $%v/h", w.Cluster, w.RunPricePerHour())
	}
	h.advance(time.Hour)
	w, err := h.svc.Get(ctx, train.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.CostAt(h.clock()); math.Abs(got-(2*4.4+12.8)) > 1e-9 {
		t.Errorf("cost %v, want %v", got, 2*4.4+12.8)
	}
	// Showback by cluster: each run under the cluster it ran on.
	c, err := h.svc.Costs(ctx, h.clock().Add(-4*time.Hour), h.clock(), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, l := range c.Lines {
		got[l.Key] = math.Round(l.Cost*100) / 100
	}
	if len(got) != 2 || got["onprem"] != 8.8 || got["cloud"] != 12.8 {
		t.Errorf("costs by cluster %v, want onprem 8.80, cloud 12.80", got)
	}
	// A restart on a cluster that names no price: its class's.
	observe(workload.Queued, "", 0)
	if w := observe(workload.Running, "onprem", 0); w.Cluster != "onprem" || w.RunPricePerHour() != train.PricePerHour {
		t.Errorf("no price said: %q at $%v/h, want $%v", w.Cluster, w.RunPricePerHour(), train.PricePerHour)
	}
	// A GPU run whose cluster says only the hourly price: that; both:
	// the GPU-hour's, times its GPUs.
	for _, tc := range []struct {
		o    workload.Observed
		want float64
	}{
		{workload.Observed{Status: workload.Running, Cluster: "cloud", HourPrice: 12.5}, 12.5},
		{workload.Observed{Status: workload.Running, Cluster: "cloud", HourPrice: 99, GPUHourPrice: 3.2}, 12.8},
	} {
		h.advance(time.Minute)
		observe(workload.Queued, "", 0)
		if w, err := h.svc.Observe(ctx, train.ID, tc.o); err != nil || math.Abs(w.RunPricePerHour()-tc.want) > 1e-9 {
			t.Errorf("%+v: $%v/h (%v), want $%v", tc.o, w.RunPricePerHour(), err, tc.want)
		}
	}
	// A CPU-only run: its cores at the cluster's core-hour.
	cpu, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "cpu-job", Team: "vision"})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := h.svc.Observe(ctx, cpu.ID, workload.Observed{Status: workload.Running, Cluster: "onprem", HourPrice: 0.02}); err != nil || w.Cluster != "onprem" || math.Abs(w.RunPricePerHour()-0.02) > 1e-9 || w.PricePerHour == 0.02 {
		t.Errorf("a CPU-only run on onprem: %q at $%v/h (list $%v, %v), want $0.02", w.Cluster, w.RunPricePerHour(), w.PricePerHour, err)
	}
}
