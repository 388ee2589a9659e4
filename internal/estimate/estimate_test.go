package estimate_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/estimate"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/governance"
	"github.com/gantryhq/gantry/internal/store/workloads"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/internal/workload/workloadtest"
)

// noBudgets: no team has a budget or approval rule.
type noBudgets struct{}

func (noBudgets) Status(context.Context, team.Name) (*budget.Status, []budget.Status, error) {
	return nil, nil, nil
}
func (noBudgets) Verdict(context.Context, team.Name, float64, float64) (budget.Verdict, time.Duration, error) {
	return budget.Verdict{}, 0, nil
}

// rules are a team's budget and approval rule, for the real budget service.
type rules struct {
	b *budget.Budget
	a *budget.Approval
}

func (r rules) Budget(team.Name) *budget.Budget     { return r.b }
func (r rules) Approval(team.Name) *budget.Approval { return r.a }
func (r rules) Budgets() map[string]budget.Budget {
	if r.b == nil {
		return nil
	}
	return map[string]budget.Budget{"vision": *r.b}
}

type spend float64

func (s spend) Spend(context.Context, team.Name, time.Time, time.Time) (float64, map[string]float64, error) {
	return float64(s), nil, nil
}

type quotas map[string]quota.Quota

func (q quotas) Quota(t team.Name) quota.Quota { return q[t.String()] }

// cluster stands in for Kueue's and the nodes' answers (the kube package
// reads them from a real cluster in its tests).
type cluster struct {
	used            float64
	pending         int
	free, onOneNode int
	most            int // allocatable on the largest node (0: as many as free; -1: no node offers it)
	nodes           int // of the class (0: 1)
	// The CPU nodes: free millicores on the freest, the most on one, how
	// many (cpuNodes 0: one node of 16 cores, all free; -1: none).
	cpuFree, cpuMost int64
	cpuNodes         int
	// usedCores: the cores the team's queue has admitted in the CPU
	// nodes' flavor (what QueueUsage says of gpu.CPUClass).
	usedCores float64
}

func (c cluster) FreeCPU(context.Context, string) (int64, int64, int, error) {
	switch c.cpuNodes {
	case 0:
		return 16000, 16000, 1, nil
	case -1:
		return 0, 0, 0, nil
	}
	return c.cpuFree, c.cpuMost, c.cpuNodes, nil
}

func (c cluster) QueueUsage(_ context.Context, _ team.Name, class string) (float64, int, error) {
	if class == gpu.CPUClass {
		return c.usedCores, c.pending, nil
	}
	return c.used, c.pending, nil
}
func (c cluster) FreeGPUs(context.Context, gpu.Class, string) (int, int, int, int, error) {
	most, nodes := c.most, max(c.nodes, 1)
	switch most {
	case 0:
		most = max(c.free, 8)
	case -1:
		most = 0
	}
	return c.free, c.onOneNode, most, nodes, nil
}

// TestEstimate: the price of the GPUs' share at the class's spot or
// on-demand price, the cost at the max runtime, and whether it would start
// now — quota first, then capacity — on the real workload service's
// preview, which refuses what a launch refuses.
func TestEstimate(t *testing.T) {
	ctx, svc, classes := harness(t)
	h100, _ := classes.Get("H100-80GB")
	q := quotas{"vision": {GPUs: map[string]float64{"H100-80GB": 2}}, "nlp": {GPUs: map[string]float64{"H100-80GB": 1}, Cohort: "research"}}
	runCases(t, ctx, svc, h100, q)
}

// harness is the real workload service on SQLite with the starter catalog.
func harness(t testing.TB) (context.Context, *workload.Service, *gpu.Catalog) {
	t.Helper()
	ctx := identity.With(context.Background(), identity.Identity{Issuer: "https://idp.test", Subject: "alice"})
	classes, files, err := template.LoadCatalog("../../templates")
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, store.SQLite, filepath.Join(t.TempDir(), "e.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
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
	svc, err := workload.New(workload.Options{Store: workloads.New(db), Templates: cat, Images: images, Authorizer: workloadtest.AllowAll{}, NodeGroups: &nodegroup.Set{}, Budgets: workloadtest.NoBudgets{},
		Namespace: func(t team.Name) string { return "gantry-" + t.String() }, Now: time.Now, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, svc, classes
}

var batchMIG = workload.Request{Template: "batch-inference", Team: "vision", Choice: template.Choice{Class: "H100-80GB", MIGProfile: "3g.40gb", Params: map[string]any{"input": "p.jsonl"}}}

func runCases(t *testing.T, ctx context.Context, svc *workload.Service, h100 gpu.Class, q quotas) {
	train2 := workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 2}}
	for _, tc := range []struct {
		name    string
		req     workload.Request
		cl      estimate.Cluster
		gpus    float64
		price   float64
		runtime time.Duration
		starts  bool
		why     string
	}{
		{"a MIG slice on spot: half a GPU at the spot price", batchMIG, cluster{free: 8, onOneNode: 8}, 0.5, 0.5 * h100.Price.Spot, 12 * time.Hour, true, ""},
		{"two whole GPUs on demand, the quota full", train2, cluster{used: 1, pending: 3, free: 8, onOneNode: 8}, 2, 2 * h100.Price.OnDemand, 72 * time.Hour, false, "the team's quota has 1 left"},
		{"the quota holds it but no node has two free", train2, cluster{free: 2, onOneNode: 1}, 2, 2 * h100.Price.OnDemand, 72 * time.Hour, false, "no node of H100-80GB has 2 free nvidia.com/gpu (2 free in all)"},
		{"no node of the class has two at all: never", train2, cluster{free: 1, onOneNode: 1, most: 1}, 2, 2 * h100.Price.OnDemand, 72 * time.Hour, false, "it can never start here: no node of H100-80GB has 2 nvidia.com/gpu (the most on one node is 1)"},
		{"no node of the class offers the MIG profile: never", batchMIG, cluster{most: -1, nodes: 3}, 0.5, 0.5 * h100.Price.Spot, 12 * time.Hour, false, "it can never start here: no node of H100-80GB (3 in all) offers nvidia.com/mig-3g.40gb"},
		{"a cohort may lend", workload.Request{Template: "pytorch-train", Team: "nlp", Choice: template.Choice{Class: "H100-80GB", Count: 2}}, cluster{free: 8, onOneNode: 8}, 2, 2 * h100.Price.OnDemand, 72 * time.Hour, false, "unless cohort research lends"},
		{"no cluster: not known", batchMIG, nil, 0.5, 0.5 * h100.Price.Spot, 12 * time.Hour, false, "no cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := estimate.New(estimate.Options{Previewer: svc, Quotas: q, Budgets: noBudgets{}, Cluster: tc.cl, Kueue: true})
			if err != nil {
				t.Fatal(err)
			}
			e, err := es.Estimate(ctx, "alice", estimate.Request{Request: tc.req})
			if err != nil {
				t.Fatal(err)
			}
			if e.GPUs != tc.gpus || e.PricePerHour != float64(int(tc.price*100+0.5))/100 || e.MaxRuntime != tc.runtime {
				t.Errorf("%v GPUs at %v/h for %v, want %v at %v for %v", e.GPUs, e.PricePerHour, e.MaxRuntime, tc.gpus, tc.price, tc.runtime)
			}
			if want := float64(int(e.PricePerHour*tc.runtime.Hours()*100+0.5)) / 100; e.CostAtMaxRuntime != want {
				t.Errorf("cost at max runtime %v, want %v", e.CostAtMaxRuntime, want)
			}
			if e.StartsNow != tc.starts || !strings.Contains(e.Why, tc.why) {
				t.Errorf("starts now %v (%q), want %v (%q)", e.StartsNow, e.Why, tc.starts, tc.why)
			}
		})
	}
	// Without Kueue the quota is not weighed: only capacity.
	es, err := estimate.New(estimate.Options{Previewer: svc, Quotas: q, Budgets: noBudgets{}, Cluster: cluster{free: 8, onOneNode: 8}})
	if err != nil {
		t.Fatal(err)
	}
	over := workload.Request{Template: "pytorch-train", Team: "nlp", Choice: template.Choice{Class: "H100-80GB", Count: 2}}
	if e, err := es.Estimate(ctx, "alice", estimate.Request{Request: over}); err != nil || !e.StartsNow {
		t.Errorf("quota.kueue off, beyond the quota: starts now %v (%q), %v", e.StartsNow, e.Why, err)
	}
	// What a launch refuses, the estimate refuses: a parameter it lacks.
	if _, err := (func() (estimate.Estimate, error) {
		es, _ := estimate.New(estimate.Options{Previewer: svc, Quotas: q, Budgets: noBudgets{}})
		return es.Estimate(ctx, "alice", estimate.Request{Request: workload.Request{Template: "batch-inference", Team: "vision"}})
	})(); err == nil || !strings.Contains(err.Error(), "parameters.input") {
		t.Errorf("a launch without its required parameter: %v", err)
	}
}

// TestEstimateBudgetAndOptions: the estimate says the team's budget left,
// whether the launch would wait for approval (and then does not start now),
// what spot saves, and, for "one GPU with at least 30 GiB", every class and
// profile the template and team allow that holds it, cheapest first.
func TestEstimateBudgetAndOptions(t *testing.T) {
	ctx, svc, classes := harness(t)
	b, err := budget.New(budget.Options{Rules: rules{b: &budget.Budget{Amount: 1000}, a: &budget.Approval{LaunchCeiling: 100}}, Readers: workloadtest.AllowAll{},
		Spender: spend(250), Store: nopStore{}, Log: slog.New(slog.DiscardHandler), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	es, err := estimate.New(estimate.Options{Previewer: svc, Quotas: quotas{"vision": {GPUs: map[string]float64{"*": 8}}}, Budgets: b,
		Cluster: cluster{free: 8, onOneNode: 8}, Kueue: true})
	if err != nil {
		t.Fatal(err)
	}
	// 2 × H100 for 72 h: $993.60, above the ceiling.
	e, err := es.Estimate(ctx, "alice", estimate.Request{Request: workload.Request{Template: "pytorch-train", Team: "vision", Choice: template.Choice{Class: "H100-80GB", Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if e.Budget == nil || e.Budget.Spent != 250 || e.Budget.Amount != 1000 || !e.Approval || e.StartsNow || !strings.Contains(e.Why, "approval") || !strings.Contains(e.Verdict, "$993.60") {
		t.Fatalf("budget %+v, approval %v, starts %v (%q)", e.Budget, e.Approval, e.StartsNow, e.Why)
	}
	h100, _ := classes.Get("H100-80GB")
	e, err = es.Estimate(ctx, "alice", estimate.Request{Request: batchMIG})
	if err != nil || !e.Spot || e.OnDemandPerHour != 0.5*h100.Price.OnDemand {
		t.Fatalf("spot: %v, on demand %v, %v", e.Spot, e.OnDemandPerHour, err)
	}
	// jupyter-notebook: classes H100-80GB, A100-80GB, A100-40GB, L4 and six profiles.
	e, err = es.Estimate(ctx, "alice", estimate.Request{Request: workload.Request{Template: "jupyter-notebook", Team: "vision"}, MinMemoryGiB: 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Options) == 0 {
		t.Fatal("no options")
	}
	for i, o := range e.Options {
		if o.MemoryGiB < 30 {
			t.Errorf("option %+v holds less than 30 GiB", o)
		}
		if i > 0 && o.PricePerHour < e.Options[i-1].PricePerHour {
			t.Errorf("not cheapest first: %+v after %+v", o, e.Options[i-1])
		}
	}
	first := e.Options[0]
	// The cheapest with 30 GiB: a 3g.40gb slice of an A100-80GB (half of $3.50).
	if first.Class != "A100-80GB" || first.MIGProfile != "3g.40gb" || first.PricePerHour != 1.75 {
		t.Errorf("cheapest %+v", first)
	}
}

type nopStore struct{}

func (nopStore) RecordBudgetAlert(context.Context, budget.Alert, notify.Message, audit.Record) (bool, error) {
	return false, nil
}
func (nopStore) Teams(context.Context) ([]string, error) { return nil, nil }
func (nopStore) BudgetAlerts(context.Context, team.Name, time.Time) ([]budget.Alert, error) {
	return nil, nil
}

// BenchmarkEstimate: an estimate against its natural baseline, the preview
// of the same launch (what it adds: pricing, the quota, the cluster's
// answers — here in memory; on a cluster they are two API reads).
func BenchmarkEstimate(b *testing.B) {
	ctx, svc, _ := harness(b)
	es, err := estimate.New(estimate.Options{Previewer: svc, Budgets: noBudgets{}, Quotas: quotas{"vision": {GPUs: map[string]float64{"H100-80GB": 2}}}, Cluster: cluster{free: 8, onOneNode: 8}, Kueue: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("estimate", func(b *testing.B) {
		for b.Loop() {
			if _, err := es.Estimate(ctx, "alice", estimate.Request{Request: batchMIG}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline=preview", func(b *testing.B) {
		for b.Loop() {
			if _, err := svc.Preview(ctx, "alice", batchMIG); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEstimateCPUOnly: a CPU-only launch weighs the CPU nodes' room and
// the team's quota of cores, not GPU quotas: it starts when a CPU node has
// its cores free and the quota has them left, is queued when the quota has
// not, waits for room or for a node, and can never start when no CPU node
// is that large or the quota is smaller than it (CPU-only launches borrow
// no cores, cohort or not). Without Kueue the quota is not weighed.
func TestEstimateCPUOnly(t *testing.T) {
	ctx, svc, _ := harness(t)
	job := workload.Request{Template: "cpu-job", Team: "vision", Choice: template.Choice{CPUOnly: true, Params: map[string]any{"cpu": "2"}}}
	roomy := cluster{cpuFree: 4000, cpuMost: 8000, cpuNodes: 2}
	withCores := func(c cluster, used float64) cluster { c.usedCores = used; return c }
	for _, tc := range []struct {
		name   string
		cl     cluster
		cores  *float64 // the team's quota.cores
		kueue  bool
		starts bool
		never  bool
		why    string
	}{
		{"a node with room", roomy, nil, true, true, false, "CPU-only: it runs on the CPU nodes"},
		{"the nodes busy", cluster{cpuFree: 1500, cpuMost: 8000, cpuNodes: 2}, nil, true, false, false, "waiting for room: no CPU node has 2 cores free now (the freest has 1.5)"},
		{"no CPU node at all", cluster{cpuNodes: -1}, nil, true, false, false, "waiting for a CPU node: no node in the cluster is labelled gantry.dev/cpu-node=true"},
		{"no CPU node that large", cluster{cpuFree: 1000, cpuMost: 1000, cpuNodes: 1}, nil, true, false, true, "it can never start here: no CPU node has 2 cores (the most on one is 1)"},
		{"the quota has the cores left", withCores(roomy, 6), new(8.0), true, true, false, "CPU-only: it runs on the CPU nodes"},
		{"the quota spent", withCores(roomy, 6.5), new(8.0), true, false, false, "queued: it needs 2 cores and the team's quota of 8 cores has 1.5 left"},
		{"the quota smaller than the launch", roomy, new(1.0), true, false, true, "it can never start under the team's quota: it asks for 2 cores, more than the team's quota of cores (1; CPU-only launches borrow none)"},
		{"the quota spent, the nodes busy too", withCores(cluster{cpuFree: 500, cpuMost: 8000, cpuNodes: 2}, 8), new(8.0), true, false, false, "queued: it needs 2 cores"},
		{"quotas not enforced", withCores(roomy, 8), new(1.0), false, true, false, "CPU-only: it runs on the CPU nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := quotas{"vision": {Cohort: "research", Cores: tc.cores}}
			es, err := estimate.New(estimate.Options{Previewer: svc, Quotas: q, Budgets: noBudgets{}, Cluster: tc.cl, Kueue: tc.kueue})
			if err != nil {
				t.Fatal(err)
			}
			e, err := es.Estimate(ctx, "alice", estimate.Request{Request: job})
			if err != nil {
				t.Fatal(err)
			}
			if e.StartsNow != tc.starts || e.Never != tc.never || !strings.Contains(e.Why, tc.why) {
				t.Errorf("starts now %v, never %v (%q); want %v, %v (%q)", e.StartsNow, e.Never, e.Why, tc.starts, tc.never, tc.why)
			}
			if wantQuota := tc.cores != nil && tc.kueue; wantQuota && (e.Quota != *tc.cores || e.QuotaUsed != tc.cl.usedCores) || !wantQuota && (e.Quota != 0 || e.QuotaUsed != 0) {
				t.Errorf("quota %v, used %v", e.Quota, e.QuotaUsed)
			}
		})
	}
}
