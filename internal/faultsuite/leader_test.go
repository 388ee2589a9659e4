package faultsuite_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/cull"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/auditlog"
	"github.com/gantryhq/gantry/internal/store/governance"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/store/telemetrydb"
	"github.com/gantryhq/gantry/internal/store/workloads"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/internal/workload/workloadtest"
)

// TestLeaderKilledAtEveryWrite kills the leader in the middle of its work —
// idle culling (a warning, then the stop), metering (a Job that ends while
// no replica leads), budget alerts and the webhooks that carry them — at
// every one of its writes in turn: for k = 0, 1, 2, … the first leader's
// database handle dies after k writes (store.DB.CrashAfter: the writes of a
// killed process, its transaction in flight rolled back), and a second
// leader takes over on a handle of its own 15 s later, as a lease would
// pass, and carries on. After each: every idle warning and every budget
// alert queued once and delivered (at least once, always under its one
// X-Gantry-Delivery id, so that a receiver that drops repeats sees it
// once); no notebook stopped before the time its warning gave; each alert
// audited once; the Job billed to the second it ended, to the cent.
func TestLeaderKilledAtEveryWrite(t *testing.T) {
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	_, images, err := devregistry.StartDir(context.Background(), "../../images", classes)
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []struct {
		driver string
		fresh  func(t testing.TB) string // a new, empty database
	}{
		{store.SQLite, func(t testing.TB) string { return filepath.Join(t.TempDir(), "gantry.db") }},
		{store.Postgres, storetest.PostgresDSN},
	} {
		t.Run(backend.driver, func(t *testing.T) {
			backend.fresh(t) // without this backend (no PostgreSQL), skip it whole
			repeats := 0
			for k := 0; ; k++ {
				if k > 40 {
					t.Fatal("the first leader never lived through its work: more writes than this test expects")
				}
				var crashedAt time.Time
				var again int
				t.Run(fmt.Sprintf("killed after %d", k), func(t *testing.T) {
					crashedAt, again = killedAfter(t, k, backend.driver, backend.fresh(t), files, classes, images)
				})
				if t.Failed() {
					return
				}
				repeats += again
				if crashedAt.IsZero() && k == 0 {
					t.Fatal("the first leader wrote nothing: the test tested nothing")
				}
				if crashedAt.IsZero() {
					t.Logf("killed after each of its %d writes in turn: nothing lost or duplicated; %d webhooks delivered twice (the same delivery id)", k, repeats)
					return
				}
			}
		})
	}
}

// t0 is when the notebooks start; the leaders work from t0 + 3 h.
var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// killedAfter runs the scenario with the first leader killed after k
// writes and checks the outcome. It returns when the first leader died
// (zero: it lived through its work) and how many deliveries repeated one
// already made.
func killedAfter(t *testing.T, k int, driver, dsn string, files []template.File, classes *gpu.Catalog, images *imageverify.Images) (time.Time, int) {
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(at time.Time) { mu.Lock(); now = at; mu.Unlock() }
	rx := newReceiver(t)
	a := newLeader(t, driver, dsn, classes, images, rx.url, clock)
	ctx := identity.With(context.Background(), identity.Identity{Issuer: "https://idp.test", Subject: "alice"})
	if _, err := a.cat.Seed(ctx, "seed", files); err != nil {
		t.Fatal(err)
	}
	// Two notebooks, idle from the start (their GPUs at 0 % for four
	// hours), and a training Job, running since t0.
	var notebooks []workload.Workload
	for range 2 {
		w, _, err := a.svc.Create(ctx, "", workload.Request{Template: "jupyter-notebook", Team: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.svc.Observe(ctx, w.ID, workload.Observed{Status: workload.Running, At: t0}); err != nil {
			t.Fatal(err)
		}
		notebooks = append(notebooks, w)
	}
	job, _, err := a.svc.Create(ctx, "", workload.Request{Template: "pytorch-train", Team: "vision"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.Observe(ctx, job.ID, workload.Observed{Status: workload.Running, At: t0}); err != nil {
		t.Fatal(err)
	}
	var samples []telemetry.Stored
	for at := t0; at.Before(t0.Add(4 * time.Hour)); at = at.Add(30 * time.Second) {
		for i, w := range notebooks {
			v := telemetry.NoValues()
			v[telemetry.GPUUtil] = 0
			samples = append(samples, telemetry.Stored{Series: telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-" + w.ID, Index: i}, Workload: w.ID},
				Time: at, Share: 1, Values: v})
		}
	}
	if err := a.telemetry.AppendSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	// The Job completes, by the cluster's clock, at t0 + 3 h 12 min.
	jobEnd := t0.Add(3*time.Hour + 12*time.Minute)
	code := 0
	tick := func(l *leader) error {
		var errs []error
		// The controller reports what the cluster says once it has
		// changed: the Job's end, with the cluster's time.
		if w, err := l.svc.Get(ctx, job.ID); err != nil {
			errs = append(errs, err)
		} else if w.Status == workload.Running && !clock().Before(jobEnd) {
			_, err := l.svc.Observe(ctx, job.ID, workload.Observed{Status: workload.Succeeded, At: jobEnd, ExitCode: &code})
			errs = append(errs, err)
		}
		_, err := l.culler.Run(ctx)
		errs = append(errs, err)
		_, err = l.budgets.Run(ctx)
		errs = append(errs, err)
		_, err = l.sender.Run(ctx)
		return errors.Join(append(errs, err)...)
	}

	// The first leader works a tick a minute from t0 + 3 h until it dies
	// or 20 minutes pass.
	a.db.CrashAfter(k)
	var crashedAt time.Time
	at := t0.Add(3 * time.Hour)
	for ; at.Before(t0.Add(3*time.Hour + 20*time.Minute)); at = at.Add(time.Minute) {
		set(at)
		if err := tick(a); errors.Is(err, store.ErrCrashed) {
			crashedAt = at
			break
		} else if err != nil {
			t.Fatalf("the first leader at %s: %v", at.Format("15:04"), err)
		}
	}
	a.db.Close()
	// The second leader takes over 15 s later and works until t0 + 3 h 40.
	b := newLeader(t, driver, dsn, classes, images, rx.url, clock)
	for at = at.Add(15 * time.Second); at.Before(t0.Add(3*time.Hour + 40*time.Minute)); at = at.Add(time.Minute) {
		set(at)
		if err := tick(b); err != nil {
			t.Fatalf("the second leader at %s: %v", at.Format("15:04:05"), err)
		}
	}

	// Every message queued was delivered; each at least once, repeats
	// under its own id.
	if due, err := b.gov.DueNotifications(ctx, at.Add(48*time.Hour), 100); err != nil || len(due) != 0 {
		t.Fatalf("%d webhooks never delivered (%v)", len(due), err)
	}
	byEvent, again := rx.delivered()
	warned := map[string]time.Time{} // notebook → the stop time its warning gave
	for _, body := range byEvent[cull.EventIdleWarning] {
		var m struct {
			Gantry struct {
				Workload string    `json:"workload"`
				StopAt   time.Time `json:"stopAt"`
			} `json:"gantry"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		if _, twice := warned[m.Gantry.Workload]; twice {
			t.Errorf("notebook %s warned twice (killed after %d writes, at %v)", m.Gantry.Workload, k, crashedAt)
		}
		warned[m.Gantry.Workload] = m.Gantry.StopAt
	}
	for _, nb := range notebooks {
		w, err := b.svc.Get(ctx, nb.ID)
		if err != nil {
			t.Fatal(err)
		}
		stopAt, ok := warned[nb.ID]
		switch {
		case w.Status != workload.IdleStopped:
			t.Errorf("notebook %s: %s (%s), want IdleStopped", nb.ID, w.Status, w.Reason)
		case !ok:
			t.Errorf("notebook %s stopped at %v without a warning", nb.ID, w.EndedAt)
		case w.EndedAt.Before(stopAt):
			t.Errorf("notebook %s stopped at %v, before the %v its warning gave", nb.ID, w.EndedAt, stopAt)
		}
	}
	if n := len(byEvent[budget.EventThreshold]); n != 2 {
		t.Errorf("%d budget alerts delivered, want 2 (80 %% and 100 %%)", n)
	}
	if alerts, err := b.gov.BudgetAlerts(ctx, "vision", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)); err != nil || len(alerts) != 2 {
		t.Errorf("%d budget alerts recorded (%v), want 2", len(alerts), err)
	}
	recs, err := auditlog.New(b.db).AuditRecords(ctx, audit.Filter{Actor: "gantry", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	audited := 0
	for _, r := range recs {
		if r.Action == "budget alert" {
			audited++
		}
	}
	if audited != 2 {
		t.Errorf("%d budget alerts audited, want 2", audited)
	}
	// The Job: billed from t0 to the second it ended.
	jw, err := b.svc.Get(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := jw.PricePerHour * jobEnd.Sub(t0).Hours(); jw.Status != workload.Succeeded || !jw.EndedAt.Equal(jobEnd) || math.Abs(jw.CostAt(at)-want) > 0.005 {
		t.Errorf("the Job: %s, ended %v, billed $%.4f; want Succeeded at %v, $%.2f", jw.Status, jw.EndedAt, jw.CostAt(at), jobEnd, want)
	}
	return crashedAt, again
}

// leader is what one replica runs while it leads, on its own database
// handle: the workload service, the idle culler, the budget alerts and
// the webhook sender, built as the server builds them.
type leader struct {
	db        *store.DB
	gov       *governance.Store
	telemetry *telemetrydb.Store
	cat       *catalog.Service
	svc       *workload.Service
	culler    *cull.Culler
	budgets   *budget.Service
	sender    *notify.Sender
}

func newLeader(t *testing.T, driver, dsn string, classes *gpu.Catalog, images *imageverify.Images, url string, clock func() time.Time) *leader {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.UseClock(clock)
	log := slog.New(slog.DiscardHandler)
	l := &leader{db: db, gov: governance.New(db), telemetry: telemetrydb.New(db)}
	ws := workloads.New(db)
	if l.cat, err = catalog.New(catalog.Options{Store: l.gov, Classes: classes, Images: images.Catalog, Now: clock}); err != nil {
		t.Fatal(err)
	}
	if l.svc, err = workload.New(workload.Options{Store: ws, Templates: l.cat, Images: images, Authorizer: workloadtest.AllowAll{}, NodeGroups: &nodegroup.Set{},
		Budgets: workloadtest.NoBudgets{}, Namespace: func(t team.Name) string { return "gantry-" + t.String() }, Cluster: workloadtest.NewCluster(), Now: clock, Log: log}); err != nil {
		t.Fatal(err)
	}
	if l.culler, err = cull.New(cull.Options{Store: ws, Templates: l.cat, Stopper: l.svc, Progress: noProgress{}, Kernels: noKernels{}, Settings: l.gov, Now: clock, Log: log}); err != nil {
		t.Fatal(err)
	}
	// Team vision's budget is $100 a month; it has spent $120: the 80 %
	// and 100 % alerts are due.
	rules := budgets{"vision": {Amount: 100}}
	if l.budgets, err = budget.New(budget.Options{Rules: rules, Readers: rules, Spender: spent(120), Store: l.gov, Log: log, Now: clock, Fresh: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	if l.sender, err = notify.NewSender(notify.Options{Outbox: l.gov, URL: url, Secret: []byte(webhookSecret), Log: log, Now: clock}); err != nil {
		t.Fatal(err)
	}
	return l
}

const webhookSecret = "a-webhook-secret-of-the-faults"

// receiver is a webhook receiver that verifies each delivery and keeps
// them by delivery id.
type receiver struct {
	url string
	mu  sync.Mutex
	got map[string][]delivery // by X-Gantry-Delivery
}

type delivery struct {
	event string
	body  []byte
}

func newReceiver(t *testing.T) *receiver {
	rx := &receiver{got: map[string][]delivery{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// The fake clock is hours from the wall clock: the signature is
		// checked, its timestamp's age is not.
		if err := notify.Verify([]byte(webhookSecret), r.Header, body, time.Unix(mustInt(r.Header.Get(notify.HeaderTimestamp)), 0), time.Second); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		rx.mu.Lock()
		id := r.Header.Get(notify.HeaderDelivery)
		rx.got[id] = append(rx.got[id], delivery{event: r.Header.Get(notify.HeaderEvent), body: body})
		rx.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	rx.url = srv.URL
	return rx
}

// delivered is each delivery id's first body by event — what a receiver
// that drops repeats sees — and how many deliveries were repeats. A
// repeat must carry the body of the first.
func (rx *receiver) delivered() (map[string][][]byte, int) {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	out, again := map[string][][]byte{}, 0
	for _, ds := range rx.got {
		out[ds[0].event] = append(out[ds[0].event], ds[0].body)
		for _, d := range ds[1:] {
			again++
			if string(d.body) != string(ds[0].body) {
				panic("a repeated delivery id with another body")
			}
		}
	}
	return out, again
}

func mustInt(s string) int64 {
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}

// noProgress: the runs report nothing (progress is not what is tested).
type noProgress struct{}

// noKernels: the notebooks' apps do not answer here (no kernel is known to
// execute).
type noKernels struct{}

func (noKernels) Busy(context.Context, workload.Workload) (bool, error) {
	return false, errors.New("no app in this suite")
}

func (noProgress) ProgressAt(context.Context, string) (time.Time, error) { return time.Time{}, nil }

// budgets are the teams' budgets, readable by everyone.
type budgets map[string]budget.Budget

func (b budgets) Budget(t team.Name) *budget.Budget {
	if x, ok := b[t.String()]; ok {
		return &x
	}
	return nil
}
func (budgets) Approval(team.Name) *budget.Approval { return nil }
func (b budgets) Budgets() map[string]budget.Budget { return b }
func (budgets) Teams(identity.Identity, access.Permission) (bool, []string) {
	return true, nil
}

// spent is a team's spend: the same every period.
type spent float64

func (s spent) Spend(context.Context, team.Name, time.Time, time.Time) (float64, map[string]float64, error) {
	return float64(s), nil, nil
}
