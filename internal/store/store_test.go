package store_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/overrides"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/accounts"
	"github.com/gantryhq/gantry/internal/store/governance"
	"github.com/gantryhq/gantry/internal/store/stores"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/internal/workload/workloadtest"
)

// The databases the last backends() opener made, for benchmark baselines.
var lastSQLite, lastPostgres string

// openStores opens a database and builds its stores; it is closed when t ends.
func openStores(t testing.TB, driver, dsn string) *stores.All {
	t.Helper()
	db, err := store.Open(context.Background(), driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return stores.New(db)
}

// backends opens a fresh, empty database of each kind. PostgreSQL comes from
// GANTRY_TEST_POSTGRES_DSN (make test starts one); each test gets its own schema.
func backends(t testing.TB) map[string]func(testing.TB) *stores.All {
	m := map[string]func(testing.TB) *stores.All{
		"sqlite": func(t testing.TB) *stores.All {
			lastSQLite = filepath.Join(t.TempDir(), "gantry.db")
			return openStores(t, store.SQLite, lastSQLite)
		},
	}
	dsn := os.Getenv("GANTRY_TEST_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("GANTRY_TEST_POSTGRES_DSN is not set: CI must test PostgreSQL (run make test)")
		}
		t.Log("GANTRY_TEST_POSTGRES_DSN not set: PostgreSQL skipped (make test runs it)")
		return m
	}
	m["postgres"] = func(t testing.TB) *stores.All {
		lastPostgres = storetest.PostgresDSN(t)
		return openStores(t, store.Postgres, lastPostgres)
	}
	return m
}

// newCatalog is the template catalog over s (images unchecked).
func newCatalog(t testing.TB, s catalog.Store, classes *gpu.Catalog) *catalog.Service {
	t.Helper()
	c, err := catalog.New(catalog.Options{Store: s, Classes: classes, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func starter(t testing.TB) (*gpu.Catalog, map[string]*template.Template, []template.File) {
	t.Helper()
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*template.Template{}
	for _, f := range files {
		m[f.Template.Metadata.Name] = f.Template
	}
	return classes, m, files
}

func namespace(t team.Name) string { return "gantry-" + t.String() }

func TestConformance(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("template versions", func(t *testing.T) { testTemplateVersions(t, open(t)) })
			t.Run("atomic apply", func(t *testing.T) { testAtomicApply(t, open(t)) })
			t.Run("concurrent updates", func(t *testing.T) { testConcurrentUpdates(t, open(t)) })
			t.Run("concurrent seed", func(t *testing.T) { testConcurrentSeed(t, open(t)) })
			t.Run("workloads", func(t *testing.T) { testWorkloads(t, open(t)) })
			t.Run("atomic workload updates", func(t *testing.T) { testUpdateWorkload(t, open(t)) })
			t.Run("listed as stored on every replica", func(t *testing.T) {
				a := open(t)
				dsn := map[string]string{store.SQLite: lastSQLite, store.Postgres: lastPostgres}[name]
				testListedAsStored(t, a, openStores(t, name, dsn))
				testListedAfterAnotherWriter(t, a, openStores(t, name, dsn))
			})
			t.Run("tokens", func(t *testing.T) { testTokens(t, open(t)) })
			t.Run("credentials kept", func(t *testing.T) {
				a := open(t)
				dsn := map[string]string{store.SQLite: lastSQLite, store.Postgres: lastPostgres}[name]
				testCredentialCache(t, a, openStores(t, name, dsn))
			})
			t.Run("audit chain", func(t *testing.T) { testAudit(t, open(t)) })
			t.Run("audit checkpoints", func(t *testing.T) { testAuditCheckpoints(t, open(t)) })
			t.Run("logins and sessions", func(t *testing.T) { testSessions(t, open(t)) })
			t.Run("concurrent first sign-ins", func(t *testing.T) { testConcurrentSignIns(t, open(t)) })
			t.Run("telemetry", func(t *testing.T) { testTelemetry(t, open(t)) })
			t.Run("concurrent pushes", func(t *testing.T) { testConcurrentPushes(t, open(t)) })
			t.Run("workload activity", func(t *testing.T) { testActivity(t, open(t)) })
			t.Run("metering", func(t *testing.T) { testMetering(t, open(t)) })
			t.Run("governance", func(t *testing.T) { testGovernance(t, open(t)) })
			t.Run("platform edits", func(t *testing.T) { testOverlays(t, open(t)) })
			t.Run("runs", func(t *testing.T) { testRuns(t, open(t)) })
			t.Run("runs batch", func(t *testing.T) { testRunsBatch(t, open(t)) })
			t.Run("run series", func(t *testing.T) { testRunSeries(t, open(t)) })
			t.Run("run rollup bounds", func(t *testing.T) { testRunRollupBounds(t, open(t)) })
			t.Run("trials", func(t *testing.T) { testTrials(t, open(t)) })
			t.Run("moves", func(t *testing.T) { testMoves(t, open(t)) })
			t.Run("related records", func(t *testing.T) { testRelated(t, open(t)) })
			t.Run("energy", func(t *testing.T) { testEnergy(t, open(t)) })
			t.Run("deferrals", func(t *testing.T) { testDeferrals(t, open(t)) })
			t.Run("warnings", func(t *testing.T) { testWarnings(t, open(t)) })
		})
	}
}

func testTemplateVersions(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, tpls, _ := starter(t)
	cat := newCatalog(t, s.Governance, classes)
	nb := tpls["jupyter-notebook"]
	v1, err := cat.Create(ctx, "alice", nb)
	if err != nil || v1.Version != 1 || v1.CreatedBy != "alice" {
		t.Fatalf("create: %+v, %v", v1, err)
	}
	if _, err := cat.Create(ctx, "alice", nb); !isConflict(err) {
		t.Fatalf("second create: %v, want conflict", err)
	}
	changed := *nb
	changed.Metadata.Title = "JupyterLab (v2)"
	v2, ok, err := cat.Update(ctx, "bob", "jupyter-notebook", &changed, new(1)) // made from version 1, which is live
	if err != nil || !ok || v2.Version != 2 {
		t.Fatalf("update: %+v %v %v", v2, ok, err)
	}
	// A change made from version 1 after bob's: refused, nothing stored.
	stale := changed
	stale.Metadata.Title = "JupyterLab (from v1)"
	var st *fault.Stale
	if _, _, err := cat.Update(ctx, "dan", "jupyter-notebook", &stale, new(1)); !errors.As(err, &st) {
		t.Fatalf("an update made from version 1 after version 2: %v, want *fault.Stale", err)
	}
	if err := cat.Delete(ctx, "dan", "jupyter-notebook", new(1)); !errors.As(err, &st) {
		t.Fatalf("a delete made from version 1 after version 2: %v, want *fault.Stale", err)
	}
	same, ok, err := cat.Update(ctx, "bob", "jupyter-notebook", &changed, nil)
	if err != nil || ok || same.Version != 2 {
		t.Fatalf("no-op update: %+v %v %v", same, ok, err)
	}
	got, err := cat.Get(ctx, "jupyter-notebook", 1)
	if err != nil || got.Template.Metadata.Title != nb.Metadata.Title || got.Digest != nb.Digest() {
		t.Fatalf("version 1: %+v %v", got, err)
	}
	// What comes back is what went in, parameter defaults' types included.
	if got.Template.Digest() != nb.Digest() {
		t.Errorf("stored template does not round-trip:\n%s\nvs\n%s", catalog.YAML(got.Template), catalog.YAML(nb))
	}
	if err := cat.Delete(ctx, "carol", "jupyter-notebook", new(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Get(ctx, "jupyter-notebook", 0); !isNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := cat.Delete(ctx, "carol", "jupyter-notebook", nil); !isNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	if v, err := cat.Get(ctx, "jupyter-notebook", 2); err != nil || v.Version != 2 {
		t.Fatalf("history lost after delete: %v", err)
	}
	v3, err := cat.Create(ctx, "alice", nb)
	if err != nil || v3.Version != 3 {
		t.Fatalf("re-create: %+v %v", v3, err)
	}
	h, err := cat.History(ctx, "jupyter-notebook")
	if err != nil || len(h) != 3 || h[0].Version != 1 || h[2].Version != 3 {
		t.Fatalf("history: %d versions, %v", len(h), err)
	}
	list, err := cat.List(ctx)
	if err != nil || len(list) != 1 || list[0].Version != 3 {
		t.Fatalf("list: %+v %v", list, err)
	}
}

func testAtomicApply(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	cat := newCatalog(t, s.Governance, classes)
	seeded, err := cat.Seed(ctx, "gitops", files)
	if err != nil || !seeded {
		t.Fatalf("seed: %v %v", seeded, err)
	}
	if again, err := cat.Seed(ctx, "gitops", files); err != nil || again {
		t.Fatalf("second seed: %v %v", again, err)
	}
	// Two changes, the second planned against a stale version: neither lands.
	a := *files[0].Template
	a.Metadata.Title = "changed A"
	b := *files[1].Template
	b.Metadata.Title = "changed B"
	_, err = s.ApplyTemplates(ctx, []catalog.Change{
		{Name: a.Metadata.Name, Template: &a, Digest: a.Digest(), Expect: 1, Actor: "x", At: time.Now()},
		{Name: b.Metadata.Name, Template: &b, Digest: b.Digest(), Expect: 7, Actor: "x", At: time.Now()},
	})
	if !isConflict(err) {
		t.Fatalf("err = %v, want conflict", err)
	}
	live, _ := cat.Get(ctx, a.Metadata.Name, 0)
	if live.Version != 1 || live.Template.Metadata.Title == "changed A" {
		t.Fatalf("half-applied: %s is at version %d", a.Metadata.Name, live.Version)
	}
	// Prune plan: files without the first template delete it, with a diff.
	p, err := cat.Plan(ctx, "gitops", files[1:], catalog.PlanOptions{Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	var del []string
	for _, st := range p.Steps {
		if st.Action == catalog.Delete {
			del = append(del, st.Name)
			if !strings.Contains(st.Diff, "-  name: "+st.Name) {
				t.Errorf("delete diff lacks the removed name:\n%s", st.Diff)
			}
		} else if st.Action != catalog.Unchanged {
			t.Errorf("%s: %s, want unchanged", st.Name, st.Action)
		}
	}
	if len(del) != 1 || del[0] != files[0].Template.Metadata.Name {
		t.Fatalf("prune deletes %v", del)
	}
	if _, err := cat.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	if list, _ := cat.List(ctx); len(list) != len(files)-1 {
		t.Fatalf("%d live templates after prune, want %d", len(list), len(files)-1)
	}
	// No files and prune: refused, not the whole catalog retired.
	var inv *fault.Invalid
	if _, err := cat.Plan(ctx, "gitops", nil, catalog.PlanOptions{Prune: true}); !errors.As(err, &inv) {
		t.Fatalf("prune with no files: %v, want refused", err)
	}
	// Expect: each named template at the version the applier read (0: none).
	second := files[1].Template.Metadata.Name
	cur, _ := cat.Get(ctx, second, 0)
	var st *fault.Stale
	for _, tc := range []struct {
		expect map[string]int
		stale  bool
	}{
		{map[string]int{second: cur.Version}, false},
		{map[string]int{second: cur.Version + 1}, true},
		{map[string]int{files[0].Template.Metadata.Name: 0}, false}, // pruned: none live
		{map[string]int{"never-made": 1}, true},
	} {
		_, err := cat.Plan(ctx, "editor", files[1:2], catalog.PlanOptions{Expect: tc.expect})
		if got := errors.As(err, &st); got != tc.stale || !tc.stale && err != nil {
			t.Errorf("expect %v: %v, want stale %v", tc.expect, err, tc.stale)
		}
	}
}

func testConcurrentUpdates(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, tpls, _ := starter(t)
	cat := newCatalog(t, s.Governance, classes)
	base := tpls["vllm-inference"]
	if _, err := cat.Create(ctx, "a", base); err != nil {
		t.Fatal(err)
	}
	// Every writer plans against version 1: exactly one wins.
	wins, conflicts := race(t, 8, func(i int) error {
		c := *base
		c.Metadata.Title = fmt.Sprintf("writer %d", i)
		_, err := s.ApplyTemplates(ctx, []catalog.Change{{Name: c.Metadata.Name, Template: &c, Digest: c.Digest(), Expect: 1, Actor: "w", At: time.Now()}})
		return err
	})
	if wins != 1 || conflicts != 7 {
		t.Fatalf("%d wins, %d conflicts; want 1 and 7", wins, conflicts)
	}
	if h, _ := cat.History(ctx, "vllm-inference"); len(h) != 2 {
		t.Fatalf("%d versions, want 2", len(h))
	}
	// Concurrent creates of a new template: one wins, the others conflict.
	wins, conflicts = race(t, 8, func(int) error {
		_, err := cat.Create(ctx, "c", tpls["pytorch-train"])
		return err
	})
	if wins != 1 || conflicts != 7 {
		t.Fatalf("creates: %d wins, %d conflicts; want 1 and 7", wins, conflicts)
	}
	// Applies of the same two templates in opposite orders: each wins or
	// conflicts, never deadlocks (rows are locked by name, whatever the
	// order given).
	for round := range 10 {
		ca, _ := cat.Get(ctx, "vllm-inference", 0)
		cb, _ := cat.Get(ctx, "pytorch-train", 0)
		change := func(v catalog.Version, i int) catalog.Change {
			c := *v.Template
			c.Metadata.Title = fmt.Sprintf("round %d writer %d", round, i)
			return catalog.Change{Name: c.Metadata.Name, Template: &c, Digest: c.Digest(), Expect: v.Version, Actor: "w", At: time.Now()}
		}
		wins, conflicts = race(t, 4, func(i int) error {
			changes := []catalog.Change{change(ca, i), change(cb, i)}
			if i%2 == 1 {
				changes[0], changes[1] = changes[1], changes[0]
			}
			_, err := s.ApplyTemplates(ctx, changes)
			return err
		})
		if wins != 1 || conflicts != 3 {
			t.Fatalf("round %d, opposite orders: %d wins, %d conflicts; want 1 and 3", round, wins, conflicts)
		}
	}
}

// testConcurrentSeed: replicas of a first install seed one empty catalog at
// once: one seeds, the others find it seeded; none fails.
func testConcurrentSeed(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	fresh := newCatalog(t, s.Governance, classes)
	var seeded atomic.Int64
	if wins, conflicts := race(t, 4, func(int) error {
		ok, err := fresh.Seed(ctx, "gantry:initial-catalog", files)
		if ok {
			seeded.Add(1)
		}
		return err
	}); wins != 4 || conflicts != 0 || seeded.Load() != 1 {
		t.Fatalf("concurrent seeds: %d without error, %d conflicts, %d seeded; want 4, 0, 1", wins, conflicts, seeded.Load())
	}
}

// race runs n writers at once and counts successes and conflicts; any other
// error fails the test.
func race(t *testing.T, n int, write func(i int) error) (wins, conflicts int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := write(i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case isConflict(err):
				conflicts++
			default:
				t.Errorf("writer %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	return wins, conflicts
}

// testUpdateWorkload: 50 updaters racing on one record, each reading a
// counter and writing it plus one, lose none of their writes; an updater's
// error writes nothing; an unchanged record is not written; a missing one is
// not found.
func testUpdateWorkload(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	w := workload.Workload{ID: "race000001", Name: "x-race000001", Team: "vision", Owner: "alice", Template: "pytorch-train", TemplateVersion: 1,
		Kind: "service", GPUClass: "L4", GPUCount: 1, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Pending,
		Reason: "0", CreatedAt: at, UpdatedAt: at}
	if err := s.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	const n = 50
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
				var c int
				fmt.Sscan(old.Reason, &c)
				old.Reason = fmt.Sprint(c + 1)
				old.UpdatedAt = old.UpdatedAt.Add(time.Second)
				return old, nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := s.Workload(ctx, w.ID)
	if err != nil || got.Reason != fmt.Sprint(n) || !got.UpdatedAt.Equal(at.Add(n*time.Second)) {
		t.Fatalf("after %d racing updaters: counter %q, updated %v (%v); want %d and %v", n, got.Reason, got.UpdatedAt, err, n, at.Add(n*time.Second))
	}
	boom := errors.New("boom")
	if _, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		old.Status = workload.Failed
		return old, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("updater error: %v", err)
	}
	if again, _ := s.Workload(ctx, w.ID); again.Status != workload.Pending {
		t.Fatalf("a failed updater wrote %s", again.Status)
	}
	same, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		old.UpdatedAt = old.UpdatedAt.Add(time.Hour) // alone, not a change
		return old, nil
	})
	if again, _ := s.Workload(ctx, w.ID); err != nil || !again.UpdatedAt.Equal(got.UpdatedAt) || !same.UpdatedAt.Equal(got.UpdatedAt) {
		t.Fatalf("an unchanged record was written: %v %v", again.UpdatedAt, err)
	}
	exp := at.Add(72 * time.Hour)
	if _, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		old.ExpiresAt, old.AppliedHash, old.Endpoint = exp, "h", "http://x"
		return old, nil
	}); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Workload(ctx, w.ID); !again.ExpiresAt.Equal(exp) || !again.Applied() || again.Endpoint != "http://x" {
		t.Fatalf("mutable fields not written: %+v", again)
	}
	job := w
	job.ID, job.Name, job.Kind, job.ExpiresAt = "race000002", "x-race000002", "job", exp
	if err := s.CreateWorkload(ctx, job); err != nil {
		t.Fatal(err)
	}
	if due, err := s.ExpiredWorkloads(ctx, exp, 10); err != nil || len(due) != 1 || due[0].ID != w.ID {
		t.Fatalf("expired at its expiry: %v %v; want the service, not the job (the cluster ends Jobs)", due, err)
	}
	if due, _ := s.ExpiredWorkloads(ctx, exp.Add(-time.Second), 10); len(due) != 0 {
		t.Fatalf("expired before its expiry: %v", due)
	}
	if _, err := s.UpdateWorkload(ctx, "nosuch0001", func(old workload.Workload) (workload.Workload, error) { return old, nil }); !isNotFound(err) {
		t.Fatalf("missing record: %v", err)
	}
}

func testWorkloads(t *testing.T, s *stores.All) {
	ctx := identity.With(context.Background(), identity.Identity{Issuer: "https://idp.test", Subject: "tester"})
	classes, _, files := starter(t)
	cat := newCatalog(t, s.Governance, classes)
	if _, err := cat.Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	_, images, err := devregistry.StartDir(ctx, "../../images", classes)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := workload.New(workload.Options{Store: s.Workloads, Templates: cat, Namespace: namespace, Images: images, Authorizer: workloadtest.AllowAll{}, NodeGroups: &nodegroup.Set{}, Budgets: workloadtest.NoBudgets{}, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	var made []workload.Workload
	for i := range 7 {
		tm := team.Name("vision")
		if i%2 == 1 {
			tm = "nlp"
		}
		w, _, err := svc.Create(ctx, fmt.Sprintf("user%d", i%3), workload.Request{Template: "vllm-inference", Team: tm,
			Choice: template.Choice{Count: 1 + i%2, Params: map[string]any{"maxModelLen": 1024 * (i + 1)}}})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, w)
	}
	got, err := svc.Get(ctx, made[3].ID)
	if err != nil {
		t.Fatal(err)
	}
	want := made[3]
	if got.ID != want.ID || got.Team != "nlp" || got.Owner != "user0" || got.TemplateVersion != 1 || got.GPUCount != 2 ||
		got.Parameters["maxModelLen"] != "4096" || got.ObjectsHash != want.ObjectsHash || !got.CreatedAt.Equal(want.CreatedAt) || got.Status != workload.Pending {
		t.Fatalf("read back %+v\nwant %+v", got, want)
	}
	// Pages of 3 cover all 7, newest first, without repeats.
	seen := map[string]bool{}
	cursor, pages := "", 0
	var prev *workload.Workload
	for {
		p, err := svc.List(ctx, workload.Filter{Limit: 3}, cursor)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for i := range p.Items {
			w := p.Items[i]
			if seen[w.ID] {
				t.Fatalf("%s listed twice", w.ID)
			}
			seen[w.ID] = true
			if prev != nil && (w.CreatedAt.After(prev.CreatedAt) || (w.CreatedAt.Equal(prev.CreatedAt) && w.ID > prev.ID)) {
				t.Fatalf("not newest first")
			}
			prev = &w
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	if len(seen) != 7 || pages != 3 {
		t.Fatalf("%d workloads in %d pages", len(seen), pages)
	}
	nlp, err := svc.List(ctx, workload.Filter{Team: "nlp"}, "")
	if err != nil || len(nlp.Items) != 3 {
		t.Fatalf("team filter: %d, %v", len(nlp.Items), err)
	}
	if err := svc.Delete(ctx, made[0].ID); err != nil {
		t.Fatal(err)
	}
	if w, _ := svc.Get(ctx, made[0].ID); w.Status != workload.Deleted {
		t.Fatalf("status after delete: %s", w.Status)
	}
	del, _ := svc.List(ctx, workload.Filter{Status: workload.Deleted}, "")
	if len(del.Items) != 1 {
		t.Fatalf("status filter: %d", len(del.Items))
	}
	if _, err := svc.Get(ctx, "zzzzzzzzzz"); !isNotFound(err) {
		t.Fatalf("missing workload: %v", err)
	}
	if _, err := svc.List(ctx, workload.Filter{}, "not-a-cursor"); err == nil {
		t.Fatal("bad cursor accepted")
	}
	// A launch that fails validation writes nothing.
	if _, _, err := svc.Create(ctx, "u", workload.Request{Template: "vllm-inference", Team: "vision", Choice: template.Choice{Count: 99}}); err == nil {
		t.Fatal("oversized launch accepted")
	}
	if all, _ := svc.List(ctx, workload.Filter{}, ""); len(all.Items) != 7 {
		t.Fatalf("%d workloads after a refused launch, want 7", len(all.Items))
	}

	// Idempotency-Key: the same key and request return the same workload, even
	// when sent concurrently; the same key with another request conflicts; another
	// owner's key is theirs.
	req := workload.Request{Template: "dev-environment", Team: "vision", IdempotencyKey: "k-1"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]int{}
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, _, err := svc.Create(ctx, "alice", req)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ids[w.ID]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("one key, %d workloads: %v", len(ids), ids)
	}
	if _, replayed, err := svc.Create(ctx, "alice", req); err != nil || !replayed {
		t.Fatalf("repeat: replayed %v, %v", replayed, err)
	}
	other := req
	other.Choice = template.Choice{MIGProfile: "none", Class: "H100-80GB"}
	if _, _, err := svc.Create(ctx, "alice", other); !isConflict(err) {
		t.Fatalf("same key, other request: %v, want conflict", err)
	}
	if w, replayed, err := svc.Create(ctx, "bob", req); err != nil || replayed || ids[w.ID] != 0 {
		t.Fatalf("another owner's key: %v %v", replayed, err)
	}
	if list, _ := svc.List(ctx, workload.Filter{Template: "dev-environment"}, ""); len(list.Items) != 2 {
		t.Fatalf("%d dev-environment workloads, want 2", len(list.Items))
	}
}

// testListedAsStored lists workloads on replica b while replica a changes
// them: every list answers the rows as they are stored, whatever b read
// (and kept) before, and what a caller does to a listed workload stays its.
func testListedAsStored(t *testing.T, a, b *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, a.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	create := func(i int) workload.Workload {
		t.Helper()
		w := workload.Workload{ID: fmt.Sprintf("list%06d", i), Name: fmt.Sprintf("x-list%06d", i), Team: "vision", Owner: "alice", Template: "pytorch-train",
			TemplateVersion: 1, Kind: "job", GPUClass: "L4", GPUCount: 1, Parameters: map[string]string{"epochs": "3"}, ObjectsHash: "h",
			Status: workload.Pending, CreatedAt: at.Add(time.Duration(i) * time.Second), UpdatedAt: at}
		if err := a.CreateWorkload(ctx, w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	list := func(s *stores.All) []workload.Workload {
		t.Helper()
		ws, err := s.ListWorkloads(ctx, workload.Filter{Team: "vision", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	ids := func(ws []workload.Workload) (out []string) {
		for _, w := range ws {
			out = append(out, w.ID)
		}
		return out
	}
	for i := range 3 {
		create(i)
	}
	first := list(b)
	if got := ids(first); !slices.Equal(got, []string{"list000002", "list000001", "list000000"}) {
		t.Fatalf("listed %v, want the three newest first", got)
	}
	first[1].Parameters["epochs"] = "changed by the caller"
	first[1].SpotEvictions = append(first[1].SpotEvictions, "by the caller")

	// Two changes on a within the same clock reading: the version, not the
	// time, tells b its copy is old.
	for _, reason := range []string{"first", "second"} {
		if _, err := a.UpdateWorkload(ctx, "list000001", func(w workload.Workload) (workload.Workload, error) {
			w.Status, w.Reason, w.ExitCode = workload.Failed, reason, new(3)
			return w, nil
		}); err != nil {
			t.Fatal(err)
		}
		got := list(b)
		if w := got[1]; w.Status != workload.Failed || w.Reason != reason || w.ExitCode == nil || *w.ExitCode != 3 {
			t.Fatalf("after a's update %q, b lists %s %q exit %v", reason, w.Status, w.Reason, w.ExitCode)
		}
		if w := got[1]; w.Parameters["epochs"] != "3" || len(w.SpotEvictions) != 0 {
			t.Fatalf("a caller's change to a listed workload reached the next list: %v %v", w.Parameters, w.SpotEvictions)
		}
		*got[1].ExitCode = 99
	}
	if w := list(b)[1]; *w.ExitCode != 3 {
		t.Fatalf("a caller's change to a listed exit code reached the next list: %d", *w.ExitCode)
	}
	create(3)
	if got := ids(list(b)); !slices.Equal(got, []string{"list000003", "list000002", "list000001", "list000000"}) {
		t.Fatalf("after a's create, b lists %v", got)
	}
	for _, w := range list(b) {
		one, err := b.Workload(ctx, w.ID)
		if err == nil && (one.Related == nil || *one.Related != (workload.Related{})) {
			t.Fatalf("%s: related %v, want none", w.ID, one.Related)
		}
		one.Related = nil // a listing does not say
		if err != nil || !reflect.DeepEqual(one, w) {
			t.Fatalf("listed %+v, read by id %+v (%v)", w, one, err)
		}
	}
}

// testListedAfterAnotherWriter: a statement that is not the store's — an
// older release's UPDATE in a rolling upgrade, a fix made by hand — changes
// a row b has listed: b's next list answers the row as it now is.
func testListedAfterAnotherWriter(t *testing.T, a, b *stores.All) {
	ctx := context.Background()
	before, err := b.ListWorkloads(ctx, workload.Filter{Team: "vision", Limit: 10})
	if err != nil || len(before) == 0 {
		t.Fatalf("listed %d, %v", len(before), err)
	}
	id := before[0].ID
	if _, err := a.DB.ExecContext(ctx, a.DB.Q(`UPDATE workloads SET status = ?, reason = ? WHERE id = ?`), string(workload.Stopped), "by an older release", id); err != nil {
		t.Fatal(err)
	}
	after, err := b.ListWorkloads(ctx, workload.Filter{Team: "vision", Limit: 10})
	if err != nil || after[0].ID != id || after[0].Status != workload.Stopped || after[0].Reason != "by an older release" {
		t.Fatalf("after another writer's UPDATE, b lists %s %s %q (%v)", after[0].ID, after[0].Status, after[0].Reason, err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	for name, open := range map[string]string{"sqlite": filepath.Join(t.TempDir(), "g.db")} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			classes, tpls, _ := starter(t)
			s, err := store.Open(ctx, store.SQLite, open)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := newCatalog(t, governance.New(s), classes).Create(ctx, "a", tpls["dev-environment"]); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s, err = store.Open(ctx, store.SQLite, open) // migrations already applied
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if v, err := newCatalog(t, governance.New(s), classes).Get(ctx, "dev-environment", 0); err != nil || v.Version != 1 {
				t.Fatalf("after reopen: %v", err)
			}
		})
	}
}

// TestSQLiteWriterTempStore: the SQLite writer keeps its statement
// journals and sorts in memory (temp_store 2) once open, the migrations'
// temporary files (temp_store 1, while they ran) undone.
func TestSQLiteWriterTempStore(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, store.SQLite, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode int
	if err := s.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("the writer's temp_store is %d (%v), want 2 (memory)", mode, err)
	}
}

func isConflict(err error) bool {
	var c *fault.Conflict
	return errors.As(err, &c)
}

func isNotFound(err error) bool {
	var n *fault.NotFound
	return errors.As(err, &n)
}

func testTokens(t *testing.T, s *stores.All) {
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann", Email: "ann@example.com", Groups: []string{"ml-vision", "staff"}}
	ctx := identity.With(context.Background(), ann)
	users, err := user.New(user.Options{Store: s.Accounts, MaxGroupAge: 24 * time.Hour, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := users.Observe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	policy, err := authz.New(authz.InDir("../../policy"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := token.New(token.Options{Store: s.Accounts, Owners: users, Teams: policy, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	tk, secret, err := svc.Create(ctx, token.Request{Name: "nb", Lifetime: 24 * time.Hour, Team: "vision", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	who, err := svc.Authenticate(context.Background(), secret)
	if err != nil {
		t.Fatal(err)
	}
	if who.String() != ann.String() || len(who.Groups) != 2 || who.TokenID != tk.ID || who.TokenTeam != "vision" || !who.ReadOnly {
		t.Fatalf("token identity %+v", who)
	}
	testTokenAndOwner(t, s, users, svc, tk, secret)
	bob := identity.With(context.Background(), identity.Identity{Issuer: "https://idp", Subject: "bob"})
	if err := svc.Revoke(bob, tk.ID); !isNotFound(err) {
		t.Fatalf("revoking another's token: %v, want not found", err)
	}
	if list, _ := svc.List(bob); len(list) != 0 {
		t.Fatalf("bob sees %d tokens", len(list))
	}
	if err := svc.Revoke(ctx, tk.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(context.Background(), secret); err != token.ErrInvalid {
		t.Fatalf("revoked: %v", err)
	}
	list, err := svc.List(ctx)
	if err != nil || len(list) != 1 || list[0].RevokedAt.IsZero() {
		t.Fatalf("list after revoke: %+v %v", list, err)
	}
	// One person holds at most token.MaxLive live tokens (the revoked one
	// does not count); revoking one makes room again.
	dora := identity.With(context.Background(), identity.Identity{Issuer: "https://idp", Subject: "dora"})
	var last token.Token
	for i := range token.MaxLive {
		if last, _, err = svc.Create(dora, token.Request{Name: fmt.Sprintf("t%d", i), Lifetime: time.Hour}); err != nil {
			t.Fatalf("token %d of %d: %v", i+1, token.MaxLive, err)
		}
	}
	var cf *fault.Conflict
	if _, _, err := svc.Create(dora, token.Request{Name: "one more", Lifetime: time.Hour}); !errors.As(err, &cf) {
		t.Fatalf("token %d: %v, want a conflict", token.MaxLive+1, err)
	}
	if err := svc.Revoke(dora, last.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Create(dora, token.Request{Name: "one more", Lifetime: time.Hour}); err != nil {
		t.Fatalf("after a revoke: %v", err)
	}
	// Revoked and expired tokens stay listed, the newest
	// accounts.KeptDeadTokens of them: a create removes the rest.
	held, err := svc.List(dora)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range held {
		if tk.RevokedAt.IsZero() {
			if err := svc.Revoke(dora, tk.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := svc.Create(dora, token.Request{Name: "after the purge", Lifetime: time.Hour}); err != nil {
		t.Fatal(err)
	}
	held, err = svc.List(dora)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tk := range held {
		names[tk.Name] = true
	}
	if len(held) != accounts.KeptDeadTokens+1 || !names["after the purge"] || !names["one more"] || names["t0"] {
		t.Fatalf("%d tokens listed after 201 were revoked and one made (t0 listed: %v), want the newest %d dead and the new one", len(held), names["t0"], accounts.KeptDeadTokens)
	}
}

// testTokenAndOwner: a token is read with its owner's record in one
// statement, whether the owner has an issuer or not, has no record, or is
// deactivated — and acts only as its owner is now.
func testTokenAndOwner(t *testing.T, s *stores.All, users *user.Service, svc *token.Service, tk token.Token, secret string) {
	ctx := context.Background()
	got, owner, err := s.Accounts.TokenAndOwner(ctx, tk.ID)
	if err != nil || got.ID != tk.ID || got.SecretHash != tk.SecretHash || got.Owner.String() != tk.Owner.String() {
		t.Fatalf("token and owner: %+v %v", got, err)
	}
	if owner == nil || owner.Key != tk.Owner.String() || owner.ID != user.IDOf(owner.Key) || owner.Email != "ann@example.com" ||
		strings.Join(owner.Groups, ",") != "ml-vision,staff" || !owner.Active() || owner.GroupsAt.IsZero() {
		t.Fatalf("owner of %s: %+v", tk.ID, owner)
	}
	// The token acts with the groups the provider gave last, not those it
	// was made with.
	ann := tk.Owner
	ann.Groups = []string{"ml-nlp"}
	if _, err := users.Observe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	if who, err := svc.Authenticate(ctx, secret); err != nil || strings.Join(who.Groups, ",") != "ml-nlp" {
		t.Fatalf("after ann's groups changed, her token acts with %v (%v), want [ml-nlp]", who.Groups, err)
	}
	if _, _, err := s.Accounts.TokenAndOwner(ctx, "no-such-token"); !isNotFound(err) {
		t.Fatalf("unknown token: %v, want not found", err)
	}
	now := time.Now().UTC()
	mint := func(owner identity.Identity) (string, string) {
		secret := token.Prefix + "x" + owner.Subject + "_s3cret"
		id := "x" + owner.Subject
		if err := s.Accounts.CreateToken(ctx, token.Token{ID: id, Owner: owner, Name: "direct", SecretHash: token.Hash("s3cret"),
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		return id, secret
	}
	// An owner who never signed in since users were kept: no record.
	id, ghostSecret := mint(identity.Identity{Issuer: "https://idp", Subject: "ghost"})
	if _, owner, err := s.Accounts.TokenAndOwner(ctx, id); err != nil || owner != nil {
		t.Fatalf("owner without a record: %+v %v", owner, err)
	}
	if _, err := svc.Authenticate(ctx, ghostSecret); !errors.Is(err, user.ErrStale) {
		t.Fatalf("a token whose owner has no record: %v, want %v", err, user.ErrStale)
	}
	// An owner without an issuer is keyed by the subject alone.
	local := identity.Identity{Subject: "svc-batch", Groups: []string{"ml-vision"}}
	if _, err := users.Observe(ctx, local); err != nil {
		t.Fatal(err)
	}
	id, _ = mint(local)
	if _, owner, err := s.Accounts.TokenAndOwner(ctx, id); err != nil || owner == nil || owner.Key != "svc-batch" {
		t.Fatalf("owner without an issuer: %+v %v", owner, err)
	}
	// A deactivated owner's token acts no more.
	cara := identity.Identity{Issuer: "https://idp", Subject: "cara", Groups: []string{"ml-vision"}}
	if _, err := users.Observe(ctx, cara); err != nil {
		t.Fatal(err)
	}
	_, caraSecret := mint(cara)
	if _, err := svc.Authenticate(ctx, caraSecret); err != nil {
		t.Fatalf("cara's token before she is deactivated: %v", err)
	}
	if _, err := users.Deactivate(ctx, user.IDOf(cara.String())); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(ctx, caraSecret); !errors.Is(err, user.ErrDeactivated) {
		t.Fatalf("cara's token after she is deactivated: %v, want %v", err, user.ErrDeactivated)
	}
}

// testAudit: concurrent appends still make one unbroken chain.
func testAudit(t *testing.T, s *stores.All) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.AppendAudit(ctx, audit.Record{At: time.Now(), Actor: fmt.Sprint("u", i), Action: "POST /api/v1/workloads", Decision: audit.Allow, Status: 201}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	n, problems, err := audit.Verify(ctx, s.Audit)
	if err != nil || n != 10 || len(problems) != 0 {
		t.Fatalf("%d records, problems %v, %v", n, problems, err)
	}
	recs, err := s.AuditRecords(ctx, audit.Filter{Actor: "u3", Limit: 10})
	if err != nil || len(recs) != 1 {
		t.Fatalf("filter: %d, %v", len(recs), err)
	}
	// An actor's filter takes in their tokens' requests, and only theirs
	// (u3's prefix is not u30's; a LIKE wildcard in a name is plain text).
	for _, a := range []string{"u3 (token t1)", "u30 (token t2)", "u%", "u% (token t3)", "u_ (token t4)"} {
		if _, err := s.AppendAudit(ctx, audit.Record{At: time.Now(), Actor: a, Action: "GET /api/v1/audit", Decision: audit.Deny, Status: 403}); err != nil {
			t.Fatal(err)
		}
	}
	for actor, want := range map[string][]string{"u3": {"u3", "u3 (token t1)"}, "u%": {"u%", "u% (token t3)"}, "u_": {"u_ (token t4)"}} {
		recs, err := s.AuditRecords(ctx, audit.Filter{Actor: actor, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r.Actor)
		}
		if !slices.Equal(got, want) {
			t.Errorf("actor %q: %v, want %v", actor, got, want)
		}
	}
}

// testAuditCheckpoints: the head of the log is read back, checkpoints round
// trip in sequence order, and a second checkpoint of one record is a conflict.
func testAuditCheckpoints(t *testing.T, s *stores.All) {
	ctx := context.Background()
	if _, ok, err := s.LatestAudit(ctx); ok || err != nil {
		t.Fatalf("empty log has a head: %v %v", ok, err)
	}
	var last audit.Record
	for i := range 3 {
		r, err := s.AppendAudit(ctx, audit.Record{At: time.Now(), Actor: fmt.Sprint("u", i), Action: "DELETE /api/v1/workloads/{id}", Decision: audit.Deny, Status: 403})
		if err != nil {
			t.Fatal(err)
		}
		last = r
	}
	head, ok, err := s.LatestAudit(ctx)
	if err != nil || !ok || !reflect.DeepEqual(head, last) {
		t.Fatalf("head:\n got %+v %v %v\nwant %+v", head, ok, err, last)
	}
	_, priv, _ := ed25519.GenerateKey(nil)
	at := time.Date(2026, 11, 30, 9, 0, 0, 123456000, time.UTC)
	later := audit.Sign(priv, head.Seq, head.Hash, at.Add(time.Minute))
	earlier := audit.Sign(priv, 1, "h1", at)
	for _, c := range []audit.Checkpoint{later, earlier} {
		if err := s.AddCheckpoint(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	var conflict *fault.Conflict
	if err := s.AddCheckpoint(ctx, audit.Sign(priv, head.Seq, head.Hash, at.Add(2*time.Minute))); !errors.As(err, &conflict) {
		t.Errorf("second checkpoint of record %d: %v, want a conflict", head.Seq, err)
	}
	got, err := s.Checkpoints(ctx)
	if err != nil || !reflect.DeepEqual(got, []audit.Checkpoint{earlier, later}) {
		t.Fatalf("checkpoints:\n got %+v %v\nwant %+v", got, err, []audit.Checkpoint{earlier, later})
	}
	if err := got[1].Verify(priv.Public().(ed25519.PublicKey)); err != nil {
		t.Errorf("checkpoint read back does not verify: %v", err)
	}
}

func testSessions(t *testing.T, s *stores.All) {
	ctx := context.Background()
	l := weblogin.Login{StateHash: "h1", Nonce: "n", Verifier: "v", ReturnTo: "/x", ExpiresAt: time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond)}
	if err := s.CreateLogin(ctx, l); err != nil {
		t.Fatal(err)
	}
	// Two callbacks race for one state: exactly one gets the login.
	got := make(chan error, 2)
	for range 2 {
		go func() { _, err := s.TakeLogin(ctx, "h1"); got <- err }()
	}
	e1, e2 := <-got, <-got
	var nf *fault.NotFound
	if (e1 == nil) == (e2 == nil) || !(errors.As(e1, &nf) || errors.As(e2, &nf)) {
		t.Fatalf("two takes of one login: %v, %v", e1, e2)
	}
	ses := weblogin.Session{IDHash: "s1", Identity: identity.Identity{Issuer: "https://idp", Subject: "u1", Email: "u@x", Name: "U", Groups: []string{"g1", "g2"}},
		CSRF: "c", CreatedAt: time.Now().UTC().Truncate(time.Microsecond), ExpiresAt: time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)}
	if err := s.CreateSession(ctx, ses); err != nil {
		t.Fatal(err)
	}
	back, u, err := s.SessionAndUser(ctx, "s1")
	if err != nil || !reflect.DeepEqual(back, ses) || u != nil {
		t.Fatalf("session round trip:\n got %+v (user %+v) %v\nwant %+v, no user record", back, u, err, ses)
	}
	// With its user's record, read with it.
	at := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.UpsertUser(ctx, user.User{ID: user.IDOf(ses.Identity.String()), Key: ses.Identity.String(), Issuer: "https://idp", Subject: "u1",
		Groups: []string{"g3"}, GroupsAt: at, CreatedAt: at, LastSeenAt: at}); err != nil {
		t.Fatal(err)
	}
	if _, u, err := s.SessionAndUser(ctx, "s1"); err != nil || u == nil || u.Key != ses.Identity.String() || !slices.Equal(u.Groups, []string{"g3"}) {
		t.Fatalf("the session's user: %+v %v", u, err)
	}
	// An assertion older than the record's (a token issued before the last
	// sign-in) leaves it as it is.
	older := at.Add(-time.Hour)
	if err := s.UpsertUser(ctx, user.User{ID: user.IDOf(ses.Identity.String()), Key: ses.Identity.String(), Issuer: "https://idp", Subject: "u1",
		Groups: []string{"g1", "g3"}, GroupsAt: older, CreatedAt: older, LastSeenAt: older}); err != nil {
		t.Fatal(err)
	}
	if _, u, err := s.SessionAndUser(ctx, "s1"); err != nil || u == nil || !slices.Equal(u.Groups, []string{"g3"}) || !u.GroupsAt.Equal(at) {
		t.Fatalf("the session's user after an older assertion: %+v %v, want groups [g3] of %v", u, err, at)
	}
	if err := s.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SessionAndUser(ctx, "s1"); !errors.As(err, &nf) {
		t.Errorf("deleted session: %v", err)
	}
}

// testConcurrentSignIns: a user's first requests arrive together (a
// notebook's client opening several connections), each recording the user
// as new: every one succeeds and the user has one row. (PostgreSQL refused
// the loser of the race on users' second unique index, user_key: a 401
// for a caller whose token was fine.)
func testConcurrentSignIns(t *testing.T, s *stores.All) {
	ctx := context.Background()
	const users, each = 12, 8
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	for n := range users {
		id := identity.Identity{Issuer: "https://idp", Subject: fmt.Sprintf("racer-%d", n), Email: "r@x", Name: "R", Groups: []string{"g"}}
		u := user.User{ID: user.IDOf(id.String()), Key: id.String(), Issuer: id.Issuer, Subject: id.Subject, Email: id.Email, Name: id.Name,
			Groups: id.Groups, GroupsAt: at, CreatedAt: at, LastSeenAt: at}
		if err := atOnce(each, func(int) error { return s.UpsertUser(ctx, u) }); err != nil {
			t.Fatalf("user %d: one of %d first sign-ins at once: %v", n, each, err)
		}
		got, err := s.User(ctx, u.ID)
		if err != nil || got.Key != u.Key || !slices.Equal(got.Groups, u.Groups) {
			t.Fatalf("user %d after %d first sign-ins at once: %+v, %v", n, each, got, err)
		}
	}
}

// atOnce runs fn(0), …, fn(n-1) on n goroutines released together and
// returns the first error.
func atOnce(n int, fn func(i int) error) error {
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs <- fn(i)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// testActivity: the newest use of a workload wins, an older report never
// replaces it, and a workload never used has none.
func testActivity(t *testing.T, s *stores.All) {
	ctx := context.Background()
	t1 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Minute)
	for _, at := range []time.Time{t2, t1} {
		if err := s.TouchWorkload(ctx, "w1", at); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.WorkloadActivity(ctx, "w1"); err != nil || !got.Equal(t2) {
		t.Fatalf("activity %v %v, want %v", got, err, t2)
	}
	if got, err := s.WorkloadActivity(ctx, "w2"); err != nil || !got.IsZero() {
		t.Fatalf("a workload never used: %v %v", got, err)
	}
	// A device that measured neither utilization nor SM activity says
	// nothing about idleness: no activity window at all.
	unmeasured := telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-c", Index: 2}, Workload: "w-unmeasured"}
	if err := s.AppendSamples(ctx, []telemetry.Stored{{Series: unmeasured, Time: t1, Share: 1, Values: telemetry.NoValues()}}); err != nil {
		t.Fatal(err)
	}
	if act, err := s.GPUActivity(ctx, "w-unmeasured", t1.Add(-time.Hour)); err != nil || !act.First.IsZero() {
		t.Fatalf("GPU activity of samples that measured nothing: %+v %v", act, err)
	}
}

// testMetering: the price and running time round-trip, each run is
// recorded as the lifecycle moves RunningSince, and runs are listed by
// period and team.
func testMetering(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	w := workload.Workload{ID: "meter00001", Name: "x-meter00001", Team: "vision", Owner: "alice", Template: "pytorch-train", TemplateVersion: 1,
		Kind: "job", GPUClass: "H100-80GB", GPUCount: 2, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Pending,
		PricePerHour: 13.8, CreatedAt: at, UpdatedAt: at}
	if err := s.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	move := func(now time.Time, st workload.Status) {
		t.Helper()
		if _, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
			out, _, err := workload.Transition(old, workload.Reported(st), "", now)
			return out, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	move(at.Add(time.Hour), workload.Running)
	move(at.Add(3*time.Hour), workload.Pending)
	move(at.Add(4*time.Hour), workload.Running)
	got, err := s.Workload(ctx, w.ID)
	if err != nil || got.PricePerHour != 13.8 || got.RunningFor != 2*time.Hour || !got.RunningSince.Equal(at.Add(4*time.Hour)) {
		t.Fatalf("metering fields %v %v %v, %v", got.PricePerHour, got.RunningFor, got.RunningSince, err)
	}
	runs, err := s.WorkloadRuns(ctx, at, at.Add(24*time.Hour), nil)
	if err != nil || len(runs) != 2 || !runs[0].From.Equal(at.Add(time.Hour)) || !runs[0].To.Equal(at.Add(3*time.Hour)) || !runs[1].To.IsZero() || runs[1].PricePerHour != 13.8 {
		t.Fatalf("runs %+v, %v", runs, err)
	}
	// Where the current run is, said after it began: the run's node group
	// and price change with the workload's; the first run keeps its own.
	if _, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		old.NodeGroup, old.RunPrice, old.Cluster = "h100-reserved", 9.5, "onprem"
		return old, nil
	}); err != nil {
		t.Fatal(err)
	}
	runs, err = s.WorkloadRuns(ctx, at, at.Add(24*time.Hour), nil)
	if err != nil || len(runs) != 2 || runs[0].NodeGroup != "" || runs[0].PricePerHour != 13.8 || runs[1].NodeGroup != "h100-reserved" || runs[1].PricePerHour != 9.5 ||
		runs[0].Cluster != "" || runs[1].Cluster != "onprem" {
		t.Fatalf("runs once placed %+v, %v", runs, err)
	}
	if got, err := s.Workload(ctx, w.ID); err != nil || got.NodeGroup != "h100-reserved" || got.RunPrice != 9.5 || got.RanCost != 2*13.8 || got.Cluster != "onprem" {
		t.Fatalf("placement %q (cluster %q) at %v, ran cost %v, %v", got.NodeGroup, got.Cluster, got.RunPrice, got.RanCost, err)
	}
	if runs, err := s.WorkloadRuns(ctx, at.Add(150*time.Minute), at.Add(200*time.Minute), nil); err != nil || len(runs) != 1 {
		t.Fatalf("runs overlapping 11:30-12:20: %+v, %v", runs, err)
	}
	if runs, err := s.WorkloadRuns(ctx, at, at.Add(24*time.Hour), []team.Name{"nlp"}); err != nil || len(runs) != 0 {
		t.Fatalf("another team's runs: %+v, %v", runs, err)
	}
	if runs, err := s.WorkloadRuns(ctx, at, at.Add(24*time.Hour), []team.Name{}); err != nil || len(runs) != 0 {
		t.Fatalf("no teams: %+v, %v", runs, err)
	}

	// Warming's cost adds up per group and day, each charge from where the
	// group was last charged: a charge repeated from the same start (a
	// pass cut off before it reset its placeholders) adds only what is
	// new. A period lists the days it overlaps.
	for _, c := range []struct {
		group      string
		since, now time.Time
		gpus       int
		price      float64
	}{
		{"h100-od", at.Add(-45 * time.Minute), at, 1, 2},                  // 0.75 GPU-h, $1.50
		{"h100-od", at.Add(-45 * time.Minute), at.Add(time.Hour), 1, 2},   // again from before: only the hour since, $2
		{"h100-od", at, at.Add(time.Hour), 1, 2},                          // charged already: nothing
		{"h100-spot", at.Add(-30 * time.Minute), at, 2, 1},                // 1 GPU-h, $1
		{"h100-od", at.Add(23 * time.Hour), at.Add(24 * time.Hour), 1, 4}, // the next day: $4
	} {
		if err := s.ChargeWarm(ctx, c.group, c.since, c.now, c.gpus, c.price); err != nil {
			t.Fatal(err)
		}
	}
	day := at.Truncate(24 * time.Hour)
	if spend, err := s.WarmSpend(ctx, at.Add(2*time.Hour), at.Add(3*time.Hour)); err != nil || len(spend) != 2 ||
		spend[0] != (workload.WarmSpend{Group: "h100-od", Day: day, Cost: 3.5, GPUHours: 1.75}) || spend[1].Group != "h100-spot" || spend[1].Cost != 1 {
		t.Fatalf("warm spend on the day: %+v, %v", spend, err)
	}
	if spend, err := s.WarmSpend(ctx, day, day.Add(48*time.Hour)); err != nil || len(spend) != 3 || !spend[2].Day.Equal(day.Add(24*time.Hour)) || spend[2].Cost != 4 {
		t.Fatalf("warm spend over two days: %+v, %v", spend, err)
	}

	// Its history round-trips: first start, attempts, the end and the
	// exit code (and no exit code is not exit code 0).
	if got.Attempts != 2 || !got.StartedAt.Equal(at.Add(time.Hour)) || !got.EndedAt.IsZero() || got.ExitCode != nil {
		t.Fatalf("history while running: started %v, ended %v, attempts %d, exit %v", got.StartedAt, got.EndedAt, got.Attempts, got.ExitCode)
	}
	if list, err := s.ListWorkloads(ctx, workload.Filter{Ended: true, Limit: 10}); err != nil || len(list) != 0 {
		t.Fatalf("ended workloads while it runs: %d, %v", len(list), err)
	}
	code := 0
	if _, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		out, _, err := workload.Transition(old, workload.ReportedSucceeded, "", at.Add(5*time.Hour))
		out.ExitCode = &code
		return out, err
	}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Workload(ctx, w.ID)
	if err != nil || got.ExitCode == nil || *got.ExitCode != 0 || !got.EndedAt.Equal(at.Add(5*time.Hour)) || got.Attempts != 2 {
		t.Fatalf("history once ended: ended %v, attempts %d, exit %v, %v", got.EndedAt, got.Attempts, got.ExitCode, err)
	}
	if list, err := s.ListWorkloads(ctx, workload.Filter{Ended: true, Limit: 10}); err != nil || len(list) != 1 || list[0].ID != w.ID {
		t.Fatalf("ended workloads: %d, %v", len(list), err)
	}

	// The demand history: a launch wanted from its creation to its end,
	// listed while it overlaps the window; a live one with no end.
	live := workload.Workload{ID: "meter00002", Name: "x-meter00002", Team: "vision", Owner: "alice", Template: "jupyter-notebook", TemplateVersion: 1,
		Kind: "notebook", GPUClass: "H100-80GB", MIGProfile: "1g.10gb", GPUCount: 1, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Pending,
		PricePerHour: 1, CreatedAt: at.Add(6 * time.Hour), UpdatedAt: at.Add(6 * time.Hour)}
	if err := s.CreateWorkload(ctx, live); err != nil {
		t.Fatal(err)
	}
	d, err := s.Demand(ctx, at)
	if err != nil || len(d) != 2 || !d[0].Created.Equal(at) || !d[0].Ended.Equal(at.Add(5*time.Hour)) || d[0].GPUCount != 2 || d[0].GPUClass != "H100-80GB" ||
		!d[1].Ended.IsZero() || d[1].MIGProfile != "1g.10gb" || d[1].Template != "jupyter-notebook" {
		t.Fatalf("demand since 09:00: %+v, %v", d, err)
	}
	if d, err := s.Demand(ctx, at.Add(5*time.Hour)); err != nil || len(d) != 1 || d[0].MIGProfile != "1g.10gb" {
		t.Fatalf("demand since the first ended: %+v, %v", d, err)
	}
}

// testGovernance: a budget alert is recorded once per team, cost center,
// period and threshold, with its webhook and its audit record — the second
// try writes none of them, even concurrently; the outbox gives due messages until they are
// delivered or given up; a workload's approval round-trips and expired
// approvals are found.
func testGovernance(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	alert := budget.Alert{Team: "vision", From: from, Threshold: 0.8, At: at, Spent: 812.5, Amount: 1000}
	rec := audit.Record{At: at, Actor: "gantry", Action: "budget alert", Object: "/api/v1/budgets?team=vision", Decision: audit.Allow, Source: "budget"}
	audited := func() int {
		t.Helper()
		rs, err := s.AuditRecords(ctx, audit.Filter{Actor: "gantry", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rs {
			if r.Action == "budget alert" {
				n++
			}
		}
		return n
	}
	recorded := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, _ := notify.New(budget.EventThreshold, "80 %", nil, at)
			ok, err := s.RecordBudgetAlert(ctx, alert, m, rec)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				recorded++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	other := alert
	other.Threshold = 1
	m100, _ := notify.New(budget.EventThreshold, "100 %", nil, at)
	if ok, err := s.RecordBudgetAlert(ctx, other, m100, rec); !ok || err != nil {
		t.Fatalf("the 100 %% alert: %v %v", ok, err)
	}
	cc := alert
	cc.CostCenter = "cc-7"
	mcc, _ := notify.New(budget.EventThreshold, "cc", nil, at)
	if ok, _ := s.RecordBudgetAlert(ctx, cc, mcc, rec); !ok {
		t.Fatal("a cost center's alert is its own")
	}
	if recorded != 1 {
		t.Fatalf("the same alert recorded %d times", recorded)
	}
	if n := audited(); n != 3 {
		t.Fatalf("%d audit records of budget alerts, want 3 (one per recorded alert)", n)
	}
	alerts, err := s.BudgetAlerts(ctx, "vision", from)
	if err != nil || len(alerts) != 3 || alerts[0].Spent != 812.5 || !alerts[0].From.Equal(from) {
		t.Fatalf("alerts %+v %v", alerts, err)
	}
	due, err := s.DueNotifications(ctx, at, 10)
	if err != nil || len(due) != 3 {
		t.Fatalf("due %d %v, want 3 (one per recorded alert)", len(due), err)
	}
	first := due[0]
	if err := s.NotificationSent(ctx, first.ID, 1, false, at.Add(time.Minute), "503", at); err != nil {
		t.Fatal(err)
	}
	if err := s.NotificationSent(ctx, due[1].ID, 1, true, time.Time{}, "", at); err != nil {
		t.Fatal(err)
	}
	if err := s.NotificationSent(ctx, due[2].ID, 8, false, time.Time{}, "gave up", at); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.DueNotifications(ctx, at, 10); len(due) != 0 {
		t.Fatalf("before the retry: %d due", len(due))
	}
	due, _ = s.DueNotifications(ctx, at.Add(time.Minute), 10)
	if len(due) != 1 || due[0].ID != first.ID || due[0].Attempts != 1 || string(due[0].Body) != string(first.Body) {
		t.Fatalf("the retry: %+v", due)
	}
	// Delivered and given-up messages are pruned; the one still to retry stays.
	if n, err := s.PruneNotifications(ctx, at.Add(time.Hour)); n != 2 || err != nil {
		t.Fatalf("pruned %d, %v; want 2", n, err)
	}
	if due, _ := s.DueNotifications(ctx, at.Add(time.Minute), 10); len(due) != 1 {
		t.Fatalf("after pruning: %d due", len(due))
	}

	w := workload.Workload{ID: "appr000001", Name: "x-appr000001", Team: "vision", Owner: "alice", Template: "pytorch-train", TemplateVersion: 1,
		Kind: "job", GPUClass: "H100-80GB", GPUCount: 8, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.PendingApproval,
		Approval: workload.Approval{Why: "over the ceiling", Expires: at.Add(time.Hour)}, CreatedAt: at, UpdatedAt: at}
	if err := s.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	if teams, err := s.Teams(ctx); err != nil || len(teams) != 1 || teams[0] != "vision" {
		t.Fatalf("teams %v %v", teams, err)
	}
	if got, _ := s.Workload(ctx, w.ID); got.Approval != w.Approval {
		t.Fatalf("approval %+v, want %+v", got.Approval, w.Approval)
	}
	if held, _ := s.UnappliedWorkloads(ctx, 10, false); len(held) != 0 {
		t.Fatalf("without Kueue a held launch is not applied: %d", len(held))
	}
	if held, _ := s.UnappliedWorkloads(ctx, 10, true); len(held) != 1 {
		t.Fatalf("with Kueue a held launch is applied: %d", len(held))
	}
	if exp, _ := s.ExpiredApprovals(ctx, at.Add(59*time.Minute), 10); len(exp) != 0 {
		t.Fatalf("expired early: %d", len(exp))
	}
	if exp, _ := s.ExpiredApprovals(ctx, at.Add(time.Hour), 10); len(exp) != 1 {
		t.Fatalf("expired: %d", len(exp))
	}
	got, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		out, _, err := workload.Transition(old, workload.Approve, "", at.Add(time.Minute))
		out.Approval.Decision, out.Approval.By, out.Approval.Note, out.Approval.At = "approved", "lee", "ok", at.Add(time.Minute)
		return out, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Workload(ctx, w.ID); again.Approval != got.Approval || again.Status != workload.Pending {
		t.Fatalf("decision stored %+v, want %+v", again.Approval, got.Approval)
	}
	if exp, _ := s.ExpiredApprovals(ctx, at.Add(2*time.Hour), 10); len(exp) != 0 {
		t.Fatalf("a decided approval expired: %d", len(exp))
	}
	// An approval for starting it again, stored as such.
	got, err = s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		old.Approval = workload.Approval{Why: "the budget is spent", Expires: at.Add(3 * time.Hour), Restart: true}
		return old, nil
	})
	if again, _ := s.Workload(ctx, w.ID); err != nil || !again.Approval.Restart || again.Approval != got.Approval {
		t.Fatalf("a start's approval stored %+v, want %+v (%v)", again.Approval, got.Approval, err)
	}

	// The price history: a row when a class's price changes, none when not.
	h100 := gpu.Class{Name: "H100-80GB", Price: gpu.Price{OnDemand: 6.9, Spot: 4.5}}
	l4 := gpu.Class{Name: "L4", Price: gpu.Price{OnDemand: 0.8}}
	for i, tc := range []struct {
		classes []gpu.Class
		want    int
	}{{[]gpu.Class{h100, l4}, 2}, {[]gpu.Class{h100, l4}, 0}, {[]gpu.Class{{Name: "H100-80GB", Price: gpu.Price{OnDemand: 5.9, Spot: 4.5}}, l4}, 1}} {
		if n, err := s.RecordPrices(ctx, tc.classes, at.Add(time.Duration(i)*time.Hour)); err != nil || n != tc.want {
			t.Fatalf("prices, pass %d: %d recorded (%v), want %d", i, n, err, tc.want)
		}
	}
	hist, err := s.PriceHistory(ctx, "H100-80GB")
	if err != nil || len(hist) != 2 || hist[0].Price.OnDemand != 6.9 || hist[1].Price.OnDemand != 5.9 || !hist[1].Since.Equal(at.Add(2*time.Hour)) || hist[1].Price.Currency != "USD" {
		t.Fatalf("price history %+v %v", hist, err)
	}

	// A team's settings: none, then written, then replaced.
	if set, err := s.TeamSettings(ctx, "vision"); err != nil || len(set.Templates) != 0 || set.Templates == nil {
		t.Fatalf("no settings: %+v %v", set, err)
	}
	for i, idle := range []string{"4h", "6h"} {
		in := overrides.Settings{Templates: map[string]overrides.Template{"jupyter-notebook": {IdleTimeout: idle}}, UpdatedBy: "lee", UpdatedAt: at}
		if v, err := s.PutTeamSettings(ctx, "vision", in, nil); err != nil || v != int64(i+1) {
			t.Fatalf("put %d: version %d %v", i, v, err)
		}
	}
	if set, err := s.TeamSettings(ctx, "vision"); err != nil || set.Templates["jupyter-notebook"].IdleTimeout != "6h" || set.UpdatedBy != "lee" || !set.UpdatedAt.Equal(at) || set.Version != 2 {
		t.Fatalf("settings %+v %v", set, err)
	}
	// Two team-admins change the settings from the same version at once:
	// exactly one change is made, the other is refused as stale.
	for _, from := range []int64{2, 0} { // an existing version; "none yet" on a team that has some
		var wins, stale atomic.Int32
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				in := overrides.Settings{Templates: map[string]overrides.Template{"jupyter-notebook": {IdleTimeout: fmt.Sprintf("%dh", i+1)}}, UpdatedBy: "lee", UpdatedAt: at}
				_, err := s.PutTeamSettings(ctx, "vision", in, &from)
				var st *fault.Stale
				switch {
				case err == nil:
					wins.Add(1)
				case errors.As(err, &st):
					stale.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if want := map[int64]int32{2: 1, 0: 0}[from]; wins.Load() != want || wins.Load()+stale.Load() != 10 {
			t.Fatalf("10 writers from version %d: %d made, %d stale; want %d made", from, wins.Load(), stale.Load(), want)
		}
	}
	none := int64(0)
	if v, err := s.PutTeamSettings(ctx, "nlp", overrides.Settings{Templates: map[string]overrides.Template{}, UpdatedBy: "nia", UpdatedAt: at}, &none); err != nil || v != 1 {
		t.Fatalf("first settings of a team with If-Match 0: %d %v", v, err)
	}

	// GPU minutes for the used/idle split: a minute counts once per
	// workload, active when any of its GPUs was.
	var ids []int64
	for _, gpuID := range []string{"GPU-a", "GPU-b"} {
		key := telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: gpuID}, Workload: w.ID}
		v := telemetry.NoValues()
		v[telemetry.GPUUtil] = 50
		if err := s.AppendSamples(ctx, []telemetry.Stored{{Series: key, Time: at, Share: 1, Values: v}}); err != nil {
			t.Fatal(err)
		}
	}
	recs, _ := s.WorkloadSeries(ctx, w.ID)
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	for i := range 3 {
		b := at.Add(time.Duration(i) * time.Minute)
		var rs []telemetry.Rollup
		for j, id := range ids {
			avg := telemetry.NoValues()
			avg[telemetry.GPUUtil] = 0
			if i == 0 && j == 1 { // minute 0: one GPU of two busy
				avg[telemetry.GPUUtil] = 90
			}
			rs = append(rs, telemetry.Rollup{Series: id, Bucket: b, N: 6, Avg: avg, Max: avg, P95: avg})
		}
		if err := s.WriteRollups(ctx, telemetry.Minute, telemetry.Pending{Bucket: b}, rs); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.GPUMinutes(ctx, at, at.Add(time.Hour))
	if err != nil || len(ids) != 2 || m[w.ID] != (workload.GPUMinutes{Measured: 3, Active: 1}) {
		t.Fatalf("GPU minutes %+v %v (series %v)", m, err, ids)
	}
	if m, _ := s.GPUMinutes(ctx, at.Add(time.Minute), at.Add(2*time.Minute)); m[w.ID] != (workload.GPUMinutes{Measured: 1}) {
		t.Fatalf("GPU minutes of one idle minute: %+v", m)
	}
}

// testOverlays: an edit replaces the one of its kind and key (not another
// kind's of the same key), round-trips who and when, and is removed once.
func testOverlays(t *testing.T, s *stores.All) {
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 9, 0, 0, 123000, time.UTC)
	put := func(kind, key, value string, by string) {
		t.Helper()
		if err := s.PutOverlay(ctx, overlay.Edit{Kind: kind, Key: key, Value: []byte(value), By: by, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	put(overlay.Quota, "vision", `{"gpus":{"L4":2}}`, "pat")
	put(overlay.Budget, "vision", `{"amount":100}`, "pat")
	put(overlay.Quota, "vision", `{"gpus":{"L4":4}}`, "ada")
	got, err := s.Overlays(ctx)
	if err != nil || len(got) != 2 {
		t.Fatalf("edits %+v, %v", got, err)
	}
	if q := got[1]; q.Kind != overlay.Quota || string(q.Value) != `{"gpus":{"L4":4}}` || q.By != "ada" || !q.At.Equal(at) {
		t.Fatalf("the quota edit %+v", q)
	}
	if removed, err := s.DeleteOverlay(ctx, overlay.Budget, "vision"); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if removed, err := s.DeleteOverlay(ctx, overlay.Budget, "vision"); err != nil || removed {
		t.Fatalf("remove again: %v %v", removed, err)
	}
	if got, _ := s.Overlays(ctx); len(got) != 1 || got[0].Kind != overlay.Quota {
		t.Fatalf("after the removal: %+v", got)
	}
}

// testDeferrals: a flexible launch held for cleaner power round-trips its
// deferral, is not applied by the reconciler while held, is due at its
// time (not before, not once stopped), and once released is applied; its
// runs carry how long it was held.
func testDeferrals(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	d := &workload.Deferral{Until: at.Add(8 * time.Hour), Latest: at.Add(8 * time.Hour), WindowEnd: at.Add(20 * time.Hour), Runtime: 12 * time.Hour,
		AtOnce: 325, AtStart: 125, Source: "static", Location: "eu-west"}
	w := workload.Workload{ID: "defer00001", Name: "x-defer00001", Team: "vision", Owner: "alice", Template: "batch-inference", TemplateVersion: 1,
		Kind: "job", GPUClass: "L4", GPUCount: 1, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Queued,
		Reason: "waiting for cleaner power", Deferral: d, CreatedAt: at, UpdatedAt: at}
	if err := s.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	other := w
	other.ID, other.Name, other.Deferral, other.Status = "defer00002", "x-defer00002", nil, workload.Pending
	if err := s.CreateWorkload(ctx, other); err != nil {
		t.Fatal(err)
	}
	got, err := s.Workload(ctx, w.ID)
	if err != nil || got.Deferral == nil || *got.Deferral != *d {
		t.Fatalf("stored %+v, want %+v (%v)", got.Deferral, d, err)
	}
	if un, _ := s.UnappliedWorkloads(ctx, 10, true); len(un) != 1 || un[0].ID != other.ID {
		t.Fatalf("unapplied %v: a held launch is not the reconciler's", un)
	}
	if due, _ := s.DueDeferrals(ctx, at.Add(8*time.Hour-time.Microsecond), 10); len(due) != 0 {
		t.Fatalf("due early: %d", len(due))
	}
	if due, _ := s.DueDeferrals(ctx, at.Add(8*time.Hour), 10); len(due) != 1 || due[0].ID != w.ID {
		t.Fatalf("due at its time: %v", due)
	}
	// Held, it wants no GPUs yet: the demand forecast sees only the other.
	if d, err := s.Demand(ctx, at.Add(-time.Hour)); err != nil || len(d) != 1 {
		t.Fatalf("demand while held: %+v, %v", d, err)
	}
	// Stopped while held, it never wanted any.
	gone := w
	gone.ID, gone.Name = "defer00003", "x-defer00003"
	if err := s.CreateWorkload(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateWorkload(ctx, gone.ID, func(old workload.Workload) (workload.Workload, error) {
		out, _, err := workload.Transition(old, workload.Stop, "stopped by its owner", at.Add(time.Hour))
		return out, err
	}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Demand(ctx, at.Add(-time.Hour)); err != nil || len(d) != 1 {
		t.Fatalf("demand with one stopped while held: %+v, %v", d, err)
	}
	release := at.Add(8 * time.Hour)
	if _, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		out, _, err := workload.Transition(old, workload.Release, "released", release)
		r := *out.Deferral
		r.Until, r.Released, r.ReleasedBy = time.Time{}, release, "forecast"
		out.Deferral = &r
		return out, err
	}); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.DueDeferrals(ctx, at.Add(24*time.Hour), 10); len(due) != 0 {
		t.Fatalf("due once released: %d", len(due))
	}
	if un, _ := s.UnappliedWorkloads(ctx, 10, true); len(un) != 2 {
		t.Fatalf("released, it is the reconciler's: %d unapplied", len(un))
	}
	got, _ = s.Workload(ctx, w.ID)
	if got.Deferral.Holding() || got.Deferral.ReleasedBy != "forecast" || !got.Deferral.Released.Equal(release) {
		t.Fatalf("released: %+v", got.Deferral)
	}
	// Released, it wants GPUs from its release, not its launch: after the
	// other (launched at the same time) in the demand's order.
	if d, err := s.Demand(ctx, at.Add(-time.Hour)); err != nil || len(d) != 2 || !d[1].Created.Equal(release) || !d[0].Created.Equal(at) {
		t.Fatalf("demand once released: %+v, %v", d, err)
	}
	if _, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		out, _, err := workload.Transition(old, workload.ReportedRunning, "", release.Add(time.Minute))
		return out, err
	}); err != nil {
		t.Fatal(err)
	}
	runs, err := s.WorkloadRuns(ctx, at, at.Add(24*time.Hour), nil)
	if err != nil || len(runs) != 1 || runs[0].Waited != 8*time.Hour {
		t.Fatalf("runs %+v (%v), want one held 8h", runs, err)
	}
}

// testWarnings: the idle culler's warning is kept with the workload and its
// webhook queued in the same transaction — both or neither — and leaving
// Running ends the warning.
func testWarnings(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	w := workload.Workload{ID: "warn000001", Name: "x-warn000001", Team: "vision", Owner: "alice", Template: "jupyter-notebook", TemplateVersion: 1,
		Kind: "notebook", GPUClass: "L4", GPUCount: 1, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Running,
		RunningSince: at, CreatedAt: at, UpdatedAt: at}
	if err := s.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	warned := workload.Warned{QuietFrom: at.Add(time.Hour), StopAt: at.Add(2 * time.Hour)}
	due := func() int {
		t.Helper()
		ms, err := s.DueNotifications(ctx, at.Add(48*time.Hour), 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(ms)
	}
	msg, _ := notify.New("workload.idle-warning", "quiet", nil, at)
	// An updater that fails writes neither the warning nor its message.
	if _, err := s.UpdateWorkloadNotify(ctx, w.ID, func(old workload.Workload) (workload.Workload, *notify.Message, error) {
		old.Warned, old.Reason = warned, "idle: quiet"
		return old, &msg, errors.New("no")
	}); err == nil {
		t.Fatal("the updater's error was not returned")
	}
	if got, _ := s.Workload(ctx, w.ID); !got.Warned.IsZero() || due() != 0 {
		t.Fatalf("after a failed update: warned %+v, %d messages", got.Warned, due())
	}
	if _, err := s.UpdateWorkloadNotify(ctx, w.ID, func(old workload.Workload) (workload.Workload, *notify.Message, error) {
		old.Warned, old.Reason = warned, "idle: quiet"
		return old, &msg, nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Workload(ctx, w.ID)
	if err != nil || !got.Warned.Equal(warned) || got.Reason != "idle: quiet" || due() != 1 {
		t.Fatalf("warned %+v (%q), %d messages, %v", got.Warned, got.Reason, due(), err)
	}
	if running, _ := s.RunningWorkloads(ctx, 10); len(running) != 1 || !running[0].Warned.Equal(warned) {
		t.Fatalf("the culler's read: %+v", running)
	}
	if _, err := s.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
		out, _, err := workload.Transition(old, workload.Stop, "stopped", at.Add(3*time.Hour))
		return out, err
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Workload(ctx, w.ID); !got.Warned.IsZero() {
		t.Fatalf("stopped, still warned: %+v", got.Warned)
	}
}
