package cull_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/cull"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/interactive"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/overrides"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/governance"
	"github.com/gantryhq/gantry/internal/store/runsdb"
	"github.com/gantryhq/gantry/internal/store/telemetrydb"
	"github.com/gantryhq/gantry/internal/store/workloads"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/internal/workload/workloadtest"
)

// TestDecide: the rule, on its edges.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const timeout = time.Hour
	started := now.Add(-5 * time.Hour)
	covered := telemetry.Activity{First: now.Add(-timeout), Last: now.Add(-10 * time.Second)}
	for _, tc := range []struct {
		name   string
		gpu    telemetry.Activity
		person time.Time
		since  time.Time
		stop   bool
		noGPU  bool
		// progress: when its run's reports last went forward
		progress time.Time
	}{
		{"idle GPUs, nobody", covered, time.Time{}, started, true, false, time.Time{}},
		{"GPU busy a minute ago (a quiet web UI does not matter)", telemetry.Activity{First: covered.First, Last: covered.Last, LastActive: now.Add(-time.Minute)}, time.Time{}, started, false, false, time.Time{}},
		{"GPU busy just past the timeout", telemetry.Activity{First: covered.First, Last: covered.Last, LastActive: now.Add(-timeout - time.Second)}, time.Time{}, started, true, false, time.Time{}},
		{"a person used it 10 minutes ago", covered, now.Add(-10 * time.Minute), started, false, false, time.Time{}},
		{"started again 20 minutes ago", covered, time.Time{}, now.Add(-20 * time.Minute), false, false, time.Time{}},
		{"no samples: unknown is not idle", telemetry.Activity{}, time.Time{}, started, false, false, time.Time{}},
		{"the agent went away 10 minutes ago", telemetry.Activity{First: covered.First, Last: now.Add(-10 * time.Minute)}, time.Time{}, started, false, false, time.Time{}},
		{"samples only for the last 20 minutes", telemetry.Activity{First: now.Add(-20 * time.Minute), Last: covered.Last}, time.Time{}, started, false, false, time.Time{}},
		// A CPU-only workload has no GPU samples: its people's use decides.
		{"no GPUs, nobody", telemetry.Activity{}, time.Time{}, started, true, true, time.Time{}},
		{"no GPUs, a person 10 minutes ago", telemetry.Activity{}, now.Add(-10 * time.Minute), started, false, true, time.Time{}},
		{"no GPUs, started 20 minutes ago", telemetry.Activity{}, time.Time{}, now.Add(-20 * time.Minute), false, true, time.Time{}},
		// A run that reports progress is not idle while its GPU waits on
		// data.
		{"idle GPUs, its run progressed 5 minutes ago", covered, time.Time{}, started, false, false, now.Add(-5 * time.Minute)},
		{"idle GPUs, its run's last progress past the timeout", covered, time.Time{}, started, true, false, now.Add(-timeout - time.Second)},
		{"no GPUs, its run progressed 5 minutes ago", telemetry.Activity{}, time.Time{}, started, false, true, now.Add(-5 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := cull.Decide(now, timeout, tc.since, tc.noGPU, tc.gpu, tc.person, tc.progress)
			if v.Stop != tc.stop {
				t.Fatalf("stop %v (%s), want %v", v.Stop, v.Reason, tc.stop)
			}
			if v.Stop && !strings.Contains(v.Reason, "idle timeout") {
				t.Errorf("reason %q", v.Reason)
			}
		})
	}
}

// TestRun: on the real store and workload service, a pass stops the
// notebook whose GPU replayed idle for its template's timeout, and leaves a
// GPU-busy notebook, one its owner kept alive, one without samples, one
// whose GPU idled while its run reported progress, and a service without
// an idle timeout alone.
func TestRun(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	e := newEnv(t, t0)
	ctx, svc, set := e.ctx, e.svc, e.set
	start := func(d time.Duration) time.Time { return t0.Add(d) }
	launch := func(tpl string) workload.Workload {
		w, _, err := svc.Create(ctx, "", workload.Request{Template: tpl, Team: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Report(ctx, w.ID, workload.Running, ""); err != nil {
			t.Fatal(err)
		}
		return w
	}
	idle, busy, kept, blind, rescued := launch("jupyter-notebook"), launch("jupyter-notebook"), launch("jupyter-notebook"), launch("jupyter-notebook"), launch("jupyter-notebook")
	earlyBusy := launch("jupyter-notebook") // busy for its first half hour only
	waiting := launch("jupyter-notebook")   // its GPU idle, waiting on data, while its run reports progress
	service := launch("vllm-inference")
	// Samples every 30 s from start to end: idle, busy at the end, idle.
	samples := func(from, to time.Time) {
		t.Helper()
		var rs []telemetry.Stored
		for at := from; at.Before(to); at = at.Add(30 * time.Second) {
			for i, w := range []workload.Workload{idle, busy, kept, service, rescued, earlyBusy, waiting} {
				util := 0.0
				if w.ID == busy.ID && at.After(start(170*time.Minute)) || w.ID == service.ID || w.ID == earlyBusy.ID && at.Before(start(30*time.Minute)) {
					util = 60
				}
				v := telemetry.NoValues()
				v[telemetry.GPUUtil] = util
				rs = append(rs, telemetry.Stored{Series: telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-" + w.ID, Index: i}, Workload: w.ID}, Time: at, Share: 1, Values: v})
			}
		}
		if err := e.telemetry.AppendSamples(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	// Three hours later (the notebook's idle timeout is 2 h).
	samples(start(0), start(3*time.Hour))
	// waiting's run reported every ten minutes, each a step on from the last.
	for at, step := start(0), int64(1); at.Before(start(3 * time.Hour)); at, step = at.Add(10*time.Minute), step+1 {
		rs := []runs.Report{{Time: at, Step: step, Epoch: math.NaN(), ResumedFrom: -1}}
		if _, err := e.runs.AppendReports(ctx, []runs.Append{{Workload: waiting.ID, Reports: rs, Update: func(old runs.Summary) runs.Summary { return runs.Apply(old, rs) }}}); err != nil {
			t.Fatal(err)
		}
	}
	set(start(3*time.Hour - 30*time.Minute))
	if _, err := svc.KeepAlive(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
	set(start(3 * time.Hour))
	// The first pass warns the idle ones and stops nothing.
	if n, err := e.pass(t); err != nil || n != 0 {
		t.Fatalf("first pass stopped %d (%v), want only warnings", n, err)
	}
	for _, w := range []workload.Workload{idle, rescued, earlyBusy} {
		got, _ := svc.Get(ctx, w.ID)
		if got.Status != workload.Running || !strings.Contains(got.Reason, "will be stopped at 2026-12-01T12:10:00Z unless used") {
			t.Fatalf("warned: %s (%s)", got.Status, got.Reason)
		}
	}
	due, err := e.governance.DueNotifications(ctx, start(4*time.Hour), 10)
	if err != nil || len(due) != 3 || due[0].Event != cull.EventIdleWarning || !strings.Contains(string(due[0].Body), "keepalive") {
		t.Fatalf("warning webhooks: %+v %v", due, err)
	}
	// Its owner keeps one; ten minutes later the other is stopped.
	set(start(3*time.Hour + 5*time.Minute))
	if _, err := svc.KeepAlive(ctx, rescued.ID); err != nil {
		t.Fatal(err)
	}
	samples(start(3*time.Hour), start(3*time.Hour+10*time.Minute))
	set(start(3*time.Hour + 9*time.Minute))
	if n, err := e.pass(t); err != nil || n != 0 {
		t.Fatalf("before the warned time: stopped %d (%v)", n, err)
	}
	set(start(3*time.Hour + 10*time.Minute))
	// The one busy early is stopped too, warned once: the GPU use its
	// warning counted from has left the window since.
	if n, err := e.pass(t); err != nil || n != 2 {
		t.Fatalf("stopped %d (%v), want 2", n, err)
	}
	if due, _ := e.governance.DueNotifications(ctx, start(4*time.Hour), 10); len(due) != 3 {
		t.Fatalf("%d warnings, want the 3 of the first pass only", len(due))
	}
	for _, tc := range []struct {
		w    workload.Workload
		want workload.Status
	}{{idle, workload.IdleStopped}, {busy, workload.Running}, {kept, workload.Running}, {blind, workload.Running}, {service, workload.Running}, {rescued, workload.Running}, {earlyBusy, workload.IdleStopped},
		{waiting, workload.Running}} {
		got, err := svc.Get(ctx, tc.w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != tc.want {
			t.Errorf("%s (%s): %s (%s), want %s", tc.w.ID, tc.w.Template, got.Status, got.Reason, tc.want)
		}
		if tc.want == workload.IdleStopped && !strings.Contains(got.Reason, "idle culler") {
			t.Errorf("reason %q", got.Reason)
		}
		if tc.w.ID == rescued.ID && got.Reason != "" {
			t.Errorf("the kept one's warning stays: %q", got.Reason)
		}
	}
	// Started again, it is not culled at once: its idle time counts anew.
	if _, err := svc.Start(ctx, idle.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Report(ctx, idle.ID, workload.Running, ""); err != nil {
		t.Fatal(err)
	}
	if n, err := e.pass(t); err != nil || n != 0 {
		t.Fatalf("second pass stopped %d (%v), want none", n, err)
	}
}

// TestRunKernelBusy: a notebook whose GPU and people have been quiet past
// its timeout is neither warned nor stopped while its app says a kernel is
// executing (a cell left running with no tab open); once the kernel is
// idle it is warned and stopped as any other. An app that does not answer
// says nothing: its notebook is judged on the rest.
func TestRunKernelBusy(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	e := newEnv(t, t0)
	ctx, svc := e.ctx, e.svc
	var ws []workload.Workload
	for range 3 {
		w, _, err := svc.Create(ctx, "", workload.Request{Template: "jupyter-notebook", Team: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Report(ctx, w.ID, workload.Running, ""); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	executing, quiet, unreachable := ws[0], ws[1], ws[2]
	// Idle GPUs, sampled every 30 s.
	samples := func(from, to time.Time) {
		t.Helper()
		var rs []telemetry.Stored
		for at := from; at.Before(to); at = at.Add(30 * time.Second) {
			for i, w := range ws {
				v := telemetry.NoValues()
				v[telemetry.GPUUtil] = 0
				rs = append(rs, telemetry.Stored{Series: telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-" + w.ID, Index: i}, Workload: w.ID}, Time: at, Share: 1, Values: v})
			}
		}
		if err := e.telemetry.AppendSamples(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	samples(t0, t0.Add(3*time.Hour))
	e.apps.set(executing.ID, "busy")
	e.apps.set(quiet.ID, "idle")
	e.apps.mu.Lock()
	e.apps.down[unreachable.ID] = true
	e.apps.mu.Unlock()
	status := func(w workload.Workload) workload.Workload {
		got, err := svc.Get(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	e.set(t0.Add(3 * time.Hour))
	if n, err := e.pass(t); err != nil || n != 0 {
		t.Fatalf("first pass stopped %d (%v), want only warnings", n, err)
	}
	if got := status(executing); got.Status != workload.Running || got.Reason != "" {
		t.Fatalf("the executing notebook: %s (%q), want Running and not warned", got.Status, got.Reason)
	}
	for _, w := range []workload.Workload{quiet, unreachable} {
		if got := status(w); !strings.Contains(got.Reason, "will be stopped") {
			t.Fatalf("%s not warned: %s (%q)", w.ID, got.Status, got.Reason)
		}
	}
	if last, err := e.workloads.WorkloadActivity(ctx, executing.ID); err != nil || !last.Equal(t0.Add(3*time.Hour)) {
		t.Fatalf("the executing kernel not recorded as use: last used %v (%v)", last, err)
	}
	// The warned quiet one runs a cell before its stop: its warning goes;
	// the unreachable one is stopped.
	e.apps.set(quiet.ID, "busy")
	samples(t0.Add(3*time.Hour), t0.Add(5*time.Hour+30*time.Minute))
	e.set(t0.Add(3*time.Hour + 10*time.Minute))
	if n, err := e.pass(t); err != nil || n != 1 || status(unreachable).Status != workload.IdleStopped {
		t.Fatalf("second pass stopped %d (%v), want the unreachable one", n, err)
	}
	for _, w := range []workload.Workload{executing, quiet} {
		if got := status(w); got.Status != workload.Running || got.Reason != "" {
			t.Fatalf("%s: %s (%q), want Running and not warned", w.ID, got.Status, got.Reason)
		}
	}
	// Their cells end: idle time counts from the last pass that saw them
	// run (3:10), so the warning comes 1 h 50 min after it, not at once.
	e.apps.set(executing.ID, "idle")
	e.apps.set(quiet.ID, "idle")
	e.set(t0.Add(3*time.Hour + 20*time.Minute))
	if n, err := e.pass(t); err != nil || n != 0 || status(executing).Reason != "" {
		t.Fatalf("just after its cell: stopped %d (%v), reason %q; want nothing", n, err, status(executing).Reason)
	}
	e.set(t0.Add(5 * time.Hour))
	if n, err := e.pass(t); err != nil || n != 0 || !strings.Contains(status(executing).Reason, "will be stopped at 2026-12-01T14:10:00Z") {
		t.Fatalf("stopped %d (%v), reason %q; want a warning", n, err, status(executing).Reason)
	}
	e.set(t0.Add(5*time.Hour + 10*time.Minute))
	if n, err := e.pass(t); err != nil || n != 2 || status(executing).Status != workload.IdleStopped || status(quiet).Status != workload.IdleStopped {
		t.Fatalf("stopped %d (%v): %s, %s", n, err, status(executing).Status, status(quiet).Status)
	}
}

// TestOffHours: a workload running when its template's off-hours window
// begins is stopped with the schedule on the record; one started during
// the window runs on; at the same time tomorrow evening, after a restart in
// the day, it is stopped again.
func TestOffHours(t *testing.T) {
	e := newEnv(t, time.Date(2026, 12, 1, 18, 30, 0, 0, time.UTC)) // Tue 19:30 in Berlin
	ctx, cat, svc, clock, set := e.ctx, e.cat, e.svc, e.clock, e.set
	dev, err := cat.Get(ctx, "dev-environment", 0)
	if err != nil {
		t.Fatal(err)
	}
	night := *dev.Template
	night.Metadata.Name = "night-env"
	night.Spec.Lifecycle.Sleep = "weekdays 20:00-08:00 Europe/Berlin"
	night.Spec.Lifecycle.IdleTimeout = ""
	if _, err := cat.Create(ctx, "alice", &night); err != nil {
		t.Fatal(err)
	}
	run := func() workload.Workload {
		w, _, err := svc.Create(ctx, "", workload.Request{Template: "night-env", Team: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Report(ctx, w.ID, workload.Running, ""); err != nil {
			t.Fatal(err)
		}
		return w
	}
	status := func(id string) workload.Workload {
		w, err := svc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	early := run()
	// The team gives dev-environment (which has no schedule) its own.
	if _, err := e.governance.PutTeamSettings(ctx, "vision", overrides.Settings{Templates: map[string]overrides.Template{
		"dev-environment": {Sleep: "weekdays 20:00-08:00 Europe/Berlin"}}, UpdatedBy: "lee", UpdatedAt: clock()}, nil); err != nil {
		t.Fatal(err)
	}
	devEnv, _, err := svc.Create(ctx, "", workload.Request{Template: "dev-environment", Team: "vision"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Report(ctx, devEnv.ID, workload.Running, ""); err != nil {
		t.Fatal(err)
	}
	if n, err := e.pass(t); err != nil || n != 0 {
		t.Fatalf("before the window: stopped %d (%v)", n, err)
	}
	if w := status(early.ID); w.Reason != "" {
		t.Fatalf("warned 35 minutes ahead: %q", w.Reason)
	}
	// Ten minutes before the window: warned, once.
	set(time.Date(2026, 12, 1, 18, 50, 0, 0, time.UTC))
	for range 2 {
		if n, err := e.pass(t); err != nil || n != 0 {
			t.Fatalf("warning pass: stopped %d (%v)", n, err)
		}
	}
	if w := status(early.ID); !strings.Contains(w.Reason, "will be stopped at 2026-12-01T19:00:00Z for its off-hours") {
		t.Fatalf("off-hours warning: %q", w.Reason)
	}
	if w := status(devEnv.ID); !strings.HasPrefix(w.Reason, "off-hours: it will be stopped at 2026-12-01T19:00:00Z") {
		t.Fatalf("the team's schedule's warning, after a second pass: %q", w.Reason)
	}
	if due, _ := e.governance.DueNotifications(ctx, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), 10); len(due) != 2 {
		t.Fatalf("%d off-hours warnings, want 2 (the template's schedule and the team's)", len(due))
	}
	set(time.Date(2026, 12, 1, 19, 5, 0, 0, time.UTC)) // 20:05 in Berlin
	late := run()
	if n, err := e.pass(t); err != nil || n != 2 {
		t.Fatalf("in the window: stopped %d (%v), want the two running before it", n, err)
	}
	if w := status(devEnv.ID); w.Status != workload.IdleStopped {
		t.Errorf("by the team's own schedule: %s (%s)", w.Status, w.Reason)
	}
	if w := status(early.ID); w.Status != workload.IdleStopped || !strings.Contains(w.Reason, "off-hours (weekdays 20:00-08:00 Europe/Berlin") {
		t.Errorf("running before the window: %s (%s)", w.Status, w.Reason)
	}
	if w := status(late.ID); w.Status != workload.Running {
		t.Errorf("started during the window: %s (%s), want it left running", w.Status, w.Reason)
	}
	// Wednesday: started in the morning, stopped again in the evening.
	set(time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC))
	if _, err := svc.Start(ctx, early.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Report(ctx, early.ID, workload.Running, ""); err != nil {
		t.Fatal(err)
	}
	set(time.Date(2026, 12, 2, 19, 1, 0, 0, time.UTC))
	if _, err := e.pass(t); err != nil {
		t.Fatal(err)
	}
	if w := status(early.ID); w.Status != workload.IdleStopped {
		t.Errorf("the next evening: %s (%s)", w.Status, w.Reason)
	}
}

// env is a real SQLite database with the starter catalog and the workload
// service, on a clock the test sets.
type env struct {
	ctx        context.Context
	workloads  *workloads.Store   // the workloads and their GPUs' activity
	governance *governance.Store  // the catalog, the webhook outbox, teams' settings
	telemetry  *telemetrydb.Store // the GPU samples
	runs       *runsdb.Store      // runs' progress reports
	progress   *runs.Service
	cat        *catalog.Service
	svc        *workload.Service
	kernels    *interactive.Kernels // asks the fake Jupyter server, apps
	apps       *jupyters
	mu         sync.Mutex
	now        time.Time
}

// jupyters stands in for every notebook's Jupyter server: GET
// /w/{id}/api/kernels answers the kernels' states it was told (none: an
// empty list); a workload marked down does not answer at all.
type jupyters struct {
	mu    sync.Mutex
	state map[string]string // by workload: a kernel's execution_state
	down  map[string]bool
}

func (j *jupyters) set(id, state string) { j.mu.Lock(); j.state[id] = state; j.mu.Unlock() }

func (j *jupyters) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, rest, _ := interactive.Split(r.URL.Path)
	j.mu.Lock()
	state, down := j.state[id], j.down[id]
	j.mu.Unlock()
	switch {
	case down:
		panic(http.ErrAbortHandler) // the connection dropped, no answer
	case rest != "/api/kernels" || r.Method != http.MethodGet:
		http.NotFound(w, r)
	case state == "":
		fmt.Fprint(w, `[]`)
	default:
		fmt.Fprintf(w, `[{"id": "k1", "name": "python3", "last_activity": "2026-12-01T09:00:00Z", "execution_state": %q, "connections": 0}]`, state)
	}
}

func newEnv(t *testing.T, at time.Time) *env {
	t.Helper()
	e := &env{ctx: identity.With(context.Background(), identity.Identity{Issuer: "https://idp.test", Subject: "alice"}), now: at}
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(e.ctx, store.SQLite, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e.workloads, e.governance, e.telemetry, e.runs = workloads.New(db), governance.New(db), telemetrydb.New(db), runsdb.New(db)
	if e.progress, err = runs.New(runs.Options{Store: e.runs, Workloads: noRuns{}, Notifier: e.governance, Now: e.clock}); err != nil {
		t.Fatal(err)
	}
	_, images, err := devregistry.StartDir(e.ctx, "../../images", classes)
	if err != nil {
		t.Fatal(err)
	}
	if e.cat, err = catalog.New(catalog.Options{Store: e.governance, Classes: classes, Images: images.Catalog, Now: time.Now}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.Seed(e.ctx, "seed", files); err != nil {
		t.Fatal(err)
	}
	e.apps = &jupyters{state: map[string]string{}, down: map[string]bool{}}
	app := httptest.NewServer(e.apps)
	t.Cleanup(app.Close)
	// Every notebook's Service name leads to the one fake server.
	toApp := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, app.Listener.Addr().String())
	}}
	e.svc, err = workload.New(workload.Options{Store: e.workloads, Templates: e.cat, Images: images, Authorizer: workloadtest.AllowAll{}, NodeGroups: &nodegroup.Set{}, Budgets: workloadtest.NoBudgets{},
		Namespace: func(t team.Name) string { return "gantry-" + t.String() }, Cluster: workloadtest.NewCluster(), Now: e.clock, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if e.kernels, err = interactive.NewKernels(e.svc, toApp, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// pass is one pass of the idle culler — each by a new Culler, as if the
// leader changed between every two: what it warned of lives on the
// workloads' records, not in a culler.
func (e *env) pass(t *testing.T) (int, error) {
	t.Helper()
	c, err := cull.New(cull.Options{Store: e.workloads, Templates: e.cat, Stopper: e.svc, Progress: e.progress, Kernels: e.kernels, Settings: e.governance, Now: e.clock, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c.Run(e.ctx)
}

func (e *env) clock() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now }
func (e *env) set(t time.Time)  { e.mu.Lock(); e.now = t; e.mu.Unlock() }

// noRuns is the runs service's view of workloads where the culler's tests
// only read progress.
type noRuns struct{}

func (noRuns) Visible(context.Context, string) error    { return errors.New("not in this test") }
func (noRuns) Manageable(context.Context, string) error { return errors.New("not in this test") }
func (noRuns) ForRun(context.Context, string) (runs.RunInfo, error) {
	return runs.RunInfo{}, errors.New("not in this test")
}
func (noRuns) EarlierRuns(context.Context, string, int) ([]string, error) { return nil, nil }
func (noRuns) StopForRule(context.Context, string, string) error          { return nil }
func (noRuns) Resume(context.Context, string) error                       { return nil }
