package workload_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/store/governance"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/internal/workload/workloadtest"
)

// rules is a policy's budgets and approval rules, fixed for a test.
type rules struct {
	budgets   map[string]budget.Budget
	approvals map[string]budget.Approval
}

func (r rules) Budget(tm team.Name) *budget.Budget {
	t := tm.String()
	if b, ok := r.budgets[t]; ok {
		return &b
	}
	return nil
}

func (r rules) Approval(tm team.Name) *budget.Approval {
	t := tm.String()
	if a, ok := r.approvals[t]; ok {
		return &a
	}
	return nil
}

func (r rules) Budgets() map[string]budget.Budget { return r.budgets }

// withRules is a harness whose budget service (the real one, metering the
// harness's store) follows r.
func withRules(t *testing.T, r rules, kueue bool) *harness {
	return newHarnessWith(t, func(h *harness) workload.Budgets {
		meter, err := workload.NewMeter(workload.MeterOptions{Store: h.store, Templates: h.cat, Now: h.clock})
		if err != nil {
			t.Fatal(err)
		}
		b, err := budget.New(budget.Options{Rules: r, Readers: workloadtest.AllowAll{}, Spender: meter, Store: governance.New(h.db),
			Log: slog.New(slog.DiscardHandler), Now: h.clock, Fresh: time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, kueue)
}

func as(subject string) context.Context {
	return identity.With(context.Background(), identity.Identity{Issuer: "https://idp.test", Subject: subject})
}

// TestApprovalCeiling: a launch above the team's per-launch ceiling waits for
// approval (recorded, not applied without Kueue) and says who must decide
// and why; its owner may not approve it; another approver's approval applies
// it; a denial fails it with the reason; an undecided one is refused when
// its time runs out.
func TestApprovalCeiling(t *testing.T) {
	h := withRules(t, rules{approvals: map[string]budget.Approval{"vision": {LaunchCeiling: 1000, Expires: "2h"}}}, false)
	ctx := asAlice()
	// pytorch-train: 8 × H100-80GB at $6.90 for its 72 h max runtime.
	w, _, err := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Status != workload.PendingApproval || w.Applied() || h.objects(t) != 0 {
		t.Fatalf("launch above the ceiling: %s, applied %v, %d objects", w.Status, w.Applied(), h.objects(t))
	}
	want := "it may cost $3,974.40 over its max runtime of 72h at $55.20/h, above the team's per-launch ceiling of $1,000.00"
	if w.Approval.Why != want || !w.Approval.Expires.Equal(h.clock().Add(2*time.Hour)) || !strings.Contains(w.Reason, "a team-admin of vision") {
		t.Fatalf("approval %+v, reason %q", w.Approval, w.Reason)
	}
	// A launch under the ceiling goes ahead: a notebook on 1g.10gb, $165.60 over its 168 h.
	small, _, err := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "jupyter-notebook", Team: "vision"})
	if err != nil || small.Status != workload.Pending || small.Approval.Needed() {
		t.Fatalf("small launch: %s %+v %v", small.Status, small.Approval, err)
	}
	var forbidden *fault.Forbidden
	if _, err := h.svc.Decide(ctx, w.ID, true, "mine"); !errors.As(err, &forbidden) {
		t.Fatalf("self-approval: %v, want forbidden", err)
	}
	var invalid *fault.Invalid
	if _, err := h.svc.Decide(as("lee"), w.ID, true, "  "); !errors.As(err, &invalid) {
		t.Fatalf("no reason: %v", err)
	}
	if a, _ := h.svc.Admission(context.Background(), "gantry-vision", w.ID); a.State != workload.AdmissionPending {
		t.Fatalf("admission while waiting: %+v", a)
	}
	h.advance(time.Minute)
	got, err := h.svc.Decide(as("lee"), w.ID, true, "the quarter's training run")
	if err != nil || got.Status != workload.Pending || !got.Applied() || got.Approval.Decision != "approved" || got.Approval.By != "https://idp.test#lee" {
		t.Fatalf("approved: %s applied %v %+v %v", got.Status, got.Applied(), got.Approval, err)
	}
	var conflict *fault.Conflict
	if _, err := h.svc.Decide(as("lee"), w.ID, false, "changed my mind"); !errors.As(err, &conflict) {
		t.Fatalf("deciding twice: %v, want conflict", err)
	}
	if a, _ := h.svc.Admission(context.Background(), "gantry-vision", w.ID); a.State != workload.AdmissionReady || !strings.Contains(a.Message, "approved by https://idp.test#lee") {
		t.Fatalf("admission once approved: %+v", a)
	}

	denied, _, _ := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	got, err = h.svc.Decide(as("lee"), denied.ID, false, "use spot next week")
	if err != nil || got.Status != workload.Failed || got.Reason != "denied by https://idp.test#lee: use spot next week" {
		t.Fatalf("denied: %s %q %v", got.Status, got.Reason, err)
	}
	if a, _ := h.svc.Admission(context.Background(), "gantry-vision", denied.ID); a.State != workload.AdmissionRejected {
		t.Fatalf("admission once denied: %+v", a)
	}

	late, _, _ := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	// At most MaxPendingApprovals of one person's launches wait at once.
	for range workload.MaxPendingApprovals - 1 {
		if _, _, err := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"}); err != nil {
			t.Fatal(err)
		}
	}
	var full *fault.Conflict
	if _, _, err := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"}); !errors.As(err, &full) || !strings.Contains(err.Error(), "already wait for one") {
		t.Fatalf("a sixth launch waiting for approval: %v", err)
	}
	if n, err := h.svc.ExpireApprovals(context.Background()); n != 0 || err != nil {
		t.Fatalf("expired early: %d %v", n, err)
	}
	h.advance(2 * time.Hour)
	if n, err := h.svc.ExpireApprovals(context.Background()); n != workload.MaxPendingApprovals || err != nil {
		t.Fatalf("expiry: %d %v", n, err)
	}
	got, _ = h.store.Workload(context.Background(), late.ID)
	if got.Status != workload.Failed || got.Approval.Decision != "expired" || !strings.Contains(got.Reason, "the approval expired") {
		t.Fatalf("expired: %s %+v %q", got.Status, got.Approval, got.Reason)
	}
	// Not this Gantry's launch, or its id copied into another namespace:
	// no answer, so the check stays Pending and Kueue admits nothing.
	if a, err := h.svc.Admission(context.Background(), "gantry-vision", "nosuchworkload"); a.State != "" || err != nil {
		t.Fatalf("unknown workload: %+v %v", a, err)
	}
	if a, err := h.svc.Admission(context.Background(), "gantry-nlp", w.ID); a.State != "" || err != nil {
		t.Fatalf("an approved launch's id in another team's namespace: %+v %v", a, err)
	}
}

// TestApprovalWithKueue: with Kueue a held launch is applied at once and
// waits at Gantry's AdmissionCheck, which the decision turns Ready.
func TestApprovalWithKueue(t *testing.T) {
	h := withRules(t, rules{approvals: map[string]budget.Approval{"vision": {LaunchCeiling: 1000}}}, true)
	w, _, err := h.svc.Create(asAlice(), "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	if err != nil || w.Status != workload.PendingApproval || !w.Applied() {
		t.Fatalf("held launch with Kueue: %s applied %v %v", w.Status, w.Applied(), err)
	}
	if !w.Approval.Expires.Equal(h.clock().Add(budget.DefaultExpiry)) {
		t.Errorf("default expiry: %s", w.Approval.Expires)
	}
	// A launch waiting for approval is not stopped (started again, it
	// would run without its approval): it is deleted instead.
	var conflict *fault.Conflict
	if got, err := h.svc.Stop(asAlice(), w.ID); !errors.As(err, &conflict) || slices.Contains(w.Actions(), workload.ActStop) {
		t.Fatalf("stop of a launch waiting for approval: %s %v, actions %v", got.Status, err, w.Actions())
	}
	if _, err := h.svc.Decide(as("lee"), w.ID, true, "ok"); err != nil {
		t.Fatal(err)
	}
	if a, ok := h.cluster.Admission(w.ID); !ok || a.State != workload.AdmissionReady {
		t.Fatalf("the cluster's check: %+v %v", a, ok)
	}
}

// TestBudgetAtLimit: a spent budget under require-approval holds each launch
// (a GPU one, and a CPU-only one priced per core-hour) for approval; under block (without Kueue) refuses it with the banner;
// under warn lets it go ahead. Starting a stopped workload again is refused
// under block, and waits for approval under require-approval
// (TestRestartWaitsForApproval).
func TestBudgetAtLimit(t *testing.T) {
	for _, tc := range []struct {
		atLimit      budget.AtLimit
		status       workload.Status
		refused      bool
		refusesStart bool
	}{
		{budget.Warn, workload.Pending, false, false},
		{budget.RequireApproval, workload.PendingApproval, false, false},
		{budget.Block, "", true, true},
	} {
		t.Run(string(tc.atLimit), func(t *testing.T) {
			h := withRules(t, rules{budgets: map[string]budget.Budget{"vision": {Amount: 10, AtLimit: tc.atLimit}}}, false)
			ctx := asAlice()
			w := spendBudget(t, h)
			// Starting a stopped one again spends like a launch.
			if _, err := h.svc.Stop(ctx, w.ID); err != nil {
				t.Fatal(err)
			}
			_, startErr := h.svc.Start(ctx, w.ID)
			if var403 := new(fault.Forbidden); errors.As(startErr, &var403) != tc.refusesStart {
				t.Errorf("start again: %v, want refused %v", startErr, tc.refusesStart)
			}
			next, _, err := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "jupyter-notebook", Team: "vision"})
			var forbidden *fault.Forbidden
			switch {
			case tc.refused:
				if !errors.As(err, &forbidden) || !strings.Contains(err.Error(), "has spent $110.40 of its $10.00 budget") || !strings.Contains(err.Error(), "policy: block") {
					t.Fatalf("blocked launch: %v", err)
				}
			case err != nil || next.Status != tc.status:
				t.Fatalf("launch over budget: %s, %v; want %s", next.Status, err, tc.status)
			}
			// A CPU-only launch (priced per core-hour) meets the same budget.
			cpu, _, err := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "cpu-job", Team: "vision"})
			switch {
			case tc.refused:
				if !errors.As(err, &forbidden) || !strings.Contains(err.Error(), "policy: block") {
					t.Fatalf("blocked CPU-only launch: %v", err)
				}
			case err != nil || cpu.Status != tc.status || cpu.GPUCount != 0 || cpu.PricePerHour <= 0:
				t.Fatalf("CPU-only launch over budget: %s, %d GPUs, $%v/h, %v; want %s", cpu.Status, cpu.GPUCount, cpu.PricePerHour, err, tc.status)
			}
		})
	}
}

// spendBudget spends team vision's $10 budget: alice's pytorch-train (8 ×
// H100, $55.20/h) running for 2 h ($110.40). It returns that workload.
func spendBudget(t *testing.T, h *harness) workload.Workload {
	t.Helper()
	w, _, err := h.svc.Create(asAlice(), "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Report(context.Background(), w.ID, workload.Running, ""); err != nil {
		t.Fatal(err)
	}
	h.advance(2 * time.Hour)
	return w
}

// TestRestartWaitsForApproval: under require-approval, starting a stopped
// job again waits for an approver as the same workload — its objects (and
// volumes: a job's checkpoints) kept, nothing started meanwhile — instead of
// being refused; approved, it starts (its max runtime from the approval);
// denied, or undecided when its time runs out, it is Stopped as it was,
// its check Pending (never Rejected); what runs while it waits is stopped
// by the converge loop; approved after a denial, it starts; its owner
// takes a waiting start back with stop (withdrawn); and once the
// team needs no approval, a start goes ahead with its check Ready. With
// Kueue the approval turns its check Ready.
func TestRestartWaitsForApproval(t *testing.T) {
	for _, kueue := range []bool{false, true} {
		t.Run(fmt.Sprintf("kueue=%v", kueue), func(t *testing.T) {
			r := rules{budgets: map[string]budget.Budget{"vision": {Amount: 10, AtLimit: budget.RequireApproval}}}
			h := withRules(t, r, kueue)
			ctx := asAlice()
			w := spendBudget(t, h)
			stopStart := func() workload.Workload {
				t.Helper()
				if _, err := h.svc.Stop(ctx, w.ID); err != nil {
					t.Fatal(err)
				}
				got, err := h.svc.Start(ctx, w.ID)
				if err != nil {
					t.Fatalf("start again under require-approval: %v", err)
				}
				o, ok := h.cluster.Object(w.ID)
				if got.Status != workload.PendingApproval || !got.Approval.Restart || got.Approval.Decision != "" || !ok || o.Running ||
					!strings.HasPrefix(got.Reason, "waiting for approval to start again by a team-admin of vision") {
					t.Fatalf("started again: %s %q %+v; its objects there %v, running %v", got.Status, got.Reason, got.Approval, ok, o.Running)
				}
				if a, err := h.svc.Admission(context.Background(), "gantry-vision", w.ID); err != nil || a.State != workload.AdmissionPending {
					t.Fatalf("check while it waits: %+v %v", a, err)
				}
				return got
			}
			stopStart()
			if _, err := h.svc.Decide(ctx, w.ID, true, "mine"); err == nil {
				t.Fatal("its owner approved its own start")
			}
			h.advance(time.Hour) // an hour to decide: the run's max runtime is not spent waiting
			got, err := h.svc.Decide(as("lee"), w.ID, true, "the checkpoint is worth it")
			if o, _ := h.cluster.Object(w.ID); err != nil || got.Status != workload.Pending || !o.Running {
				t.Fatalf("approved: %s %v, running %v", got.Status, err, o.Running)
			}
			if a, err := h.svc.Admission(context.Background(), "gantry-vision", w.ID); err != nil || a.State != workload.AdmissionReady {
				t.Fatalf("check once approved: %+v %v", a, err)
			}
			if !got.ExpiresAt.Equal(h.clock().Add(72 * time.Hour)) {
				t.Errorf("max runtime (72h) counts from %s, want from the approval at %s", got.ExpiresAt.Add(-72*time.Hour), h.clock())
			}
			if kueue {
				if a, ok := h.cluster.Admission(w.ID); !ok || a.State != workload.AdmissionReady {
					t.Errorf("the cluster's check once approved: %+v %v", a, ok)
				}
			}
			// Denied: Stopped as it was, with the reason, its check Rejected.
			stopStart()
			got, err = h.svc.Decide(as("lee"), w.ID, false, "over budget")
			if o, _ := h.cluster.Object(w.ID); err != nil || got.Status != workload.Stopped || o.Running ||
				got.Reason != "starting it again was denied by https://idp.test#lee: over budget" || got.Approval.Decision != "denied" {
				t.Fatalf("denied: %s %q %+v %v, running %v", got.Status, got.Reason, got.Approval, err, o.Running)
			}
			// Its check Pending, never Rejected: a Rejected check left on its
			// inactive Kueue Workload would have Kueue switch it off again
			// when a later start reactivates it.
			if a, _ := h.svc.Admission(context.Background(), "gantry-vision", w.ID); a.State != workload.AdmissionPending {
				t.Errorf("check once denied: %+v", a)
			}
			// A stop the cluster missed: the converge loop stops what runs
			// while a start waits for approval.
			got, err = h.svc.Start(ctx, w.ID)
			if err != nil || got.Status != workload.PendingApproval {
				t.Fatalf("started again: %s %v", got.Status, err)
			}
			o, _ := h.cluster.Object(w.ID)
			if err := h.cluster.SetRunning(context.Background(), o, true); err != nil {
				t.Fatal(err)
			}
			if acts, err := h.svc.Converge(context.Background(), h.cluster, false); err != nil || len(acts) != 1 || acts[0].Do != "stop" {
				t.Fatalf("converge while a start waits: %+v %v", acts, err)
			}
			if o, _ := h.cluster.Object(w.ID); o.Running {
				t.Fatal("still running while its start waits for approval")
			}
			// Approved after an earlier denial: it starts, its check Ready.
			got, err = h.svc.Decide(as("lee"), w.ID, true, "fine now")
			if o, _ := h.cluster.Object(w.ID); err != nil || got.Status != workload.Pending || !o.Running {
				t.Fatalf("approved after a denial: %s %v, running %v", got.Status, err, o.Running)
			}
			if a, _ := h.svc.Admission(context.Background(), "gantry-vision", w.ID); a.State != workload.AdmissionReady {
				t.Errorf("check once approved after a denial: %+v", a)
			}
			if _, err := h.svc.Stop(ctx, w.ID); err != nil {
				t.Fatal(err)
			}
			// Taken back by its owner before anyone decided (stop, offered
			// while it waits): Stopped as it was, nothing started, the
			// approval withdrawn and no longer to decide.
			got, err = h.svc.Start(ctx, w.ID)
			if err != nil || got.Status != workload.PendingApproval || !slices.Contains(got.Actions(), workload.ActStop) {
				t.Fatalf("started again: %s %v, actions %v", got.Status, err, got.Actions())
			}
			got, err = h.svc.Stop(ctx, w.ID)
			if o, _ := h.cluster.Object(w.ID); err != nil || got.Status != workload.Stopped || o.Running || got.Approval.Decision != "withdrawn" ||
				got.Approval.By != "https://idp.test#alice" || got.Reason != "its start was withdrawn before an approver decided" {
				t.Fatalf("withdrawn: %s %q %+v %v, running %v", got.Status, got.Reason, got.Approval, err, o.Running)
			}
			if _, err := h.svc.Decide(as("lee"), w.ID, true, "too late"); err == nil {
				t.Fatal("a withdrawn start was approved")
			}
			if o, _ := h.cluster.Object(w.ID); o.Running {
				t.Fatal("running after its start was withdrawn")
			}
			// Undecided in time: Stopped too.
			got, err = h.svc.Start(ctx, w.ID)
			if err != nil || got.Status != workload.PendingApproval {
				t.Fatalf("started again: %s %v", got.Status, err)
			}
			h.advance(budget.DefaultExpiry + time.Minute)
			if n, err := h.svc.ExpireApprovals(context.Background()); err != nil || n != 1 {
				t.Fatalf("expired %d, %v", n, err)
			}
			if got = h.status(t, w.ID); got.Status != workload.Stopped || !strings.HasPrefix(got.Reason, "starting it again was denied by gantry: no decision by") {
				t.Fatalf("expired: %s %q", got.Status, got.Reason)
			}
			// The team needs no approval any more: a start goes ahead, and
			// the refusal before is no answer for it.
			r.budgets["vision"] = budget.Budget{Amount: 1e6, AtLimit: budget.RequireApproval}
			got, err = h.svc.Start(ctx, w.ID)
			if o, _ := h.cluster.Object(w.ID); err != nil || got.Status != workload.Pending || !o.Running || got.Approval.Needed() {
				t.Fatalf("start without approval: %s %+v %v, running %v", got.Status, got.Approval, err, o.Running)
			}
			if a, _ := h.svc.Admission(context.Background(), "gantry-vision", w.ID); a.State != workload.AdmissionReady {
				t.Errorf("check of a start that needs no approval: %+v", a)
			}
		})
	}
}

func (h *harness) objects(t *testing.T) int {
	objs, err := h.cluster.Managed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

// TestSpotEvictions: a spot job starts again after each of its template's
// spotRequeues (3) evictions, counted once per pod however often reported;
// the next fails it and stops its Job. A job not on spot is not counted.
func TestSpotEvictions(t *testing.T) {
	h := newHarness(t)
	ctx := asAlice()
	// batch-inference runs on spot.
	w, _, err := h.svc.Create(ctx, "alice", workload.Request{Template: "batch-inference", Team: "vision", Choice: template.Choice{Params: map[string]any{"input": "p.jsonl"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Report(ctx, w.ID, workload.Running, ""); err != nil {
		t.Fatal(err)
	}
	for i, pods := range [][]string{{"uid-1"}, {"uid-1"}, {"uid-1", "uid-2"}, {"uid-3"}} {
		got, err := h.svc.Evicted(context.Background(), w.ID, pods)
		if err != nil || got.Status != workload.Running {
			t.Fatalf("report %d: %s (%s) %v", i, got.Status, got.Reason, err)
		}
	}
	got, _ := h.store.Workload(context.Background(), w.ID)
	if len(got.SpotEvictions) != 3 {
		t.Fatalf("evictions %v, want 3", got.SpotEvictions)
	}
	got, err = h.svc.Evicted(context.Background(), w.ID, []string{"uid-4"})
	if err != nil || got.Status != workload.Failed || !strings.Contains(got.Reason, "evicted from spot capacity 4 times") {
		t.Fatalf("the fourth eviction: %s (%s) %v", got.Status, got.Reason, err)
	}
	if o, ok := h.cluster.Object(w.ID); !ok || o.Running {
		t.Errorf("its Job is still running: %+v", o)
	}
	// A later report changes nothing.
	if got, err := h.svc.Evicted(context.Background(), w.ID, []string{"uid-5"}); err != nil || len(got.SpotEvictions) != 4 {
		t.Errorf("after it failed: %v %v", got.SpotEvictions, err)
	}
	// pytorch-train is not on spot: its evictions are not counted.
	train, _, _ := h.svc.Create(ctx, "alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	if got, err := h.svc.Evicted(context.Background(), train.ID, []string{"a", "b", "c", "d", "e"}); err != nil || len(got.SpotEvictions) != 0 {
		t.Errorf("on-demand job: %v %v", got.SpotEvictions, err)
	}
}

// TestBlockHoldsTheQueueAtOnce: with Kueue, a launch into a team whose spent
// budget blocks launches is recorded and applied, says why it waits, and
// holds the team's queue at once (not only at the next quota sync).
func TestBlockHoldsTheQueueAtOnce(t *testing.T) {
	h := withRules(t, rules{budgets: map[string]budget.Budget{"vision": {Amount: 10, AtLimit: budget.Block}}}, true)
	ctx := asAlice()
	w, _, err := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Report(context.Background(), w.ID, workload.Running, ""); err != nil {
		t.Fatal(err)
	}
	if h.cluster.Held("vision") {
		t.Fatal("held before the budget was spent")
	}
	h.advance(time.Hour) // $55.20 spent
	next, _, err := h.svc.Create(ctx, "https://idp.test#alice", workload.Request{Template: "pytorch-train", Team: "vision"})
	if err != nil || !next.Applied() || !next.Held || !strings.HasPrefix(next.Reason, "held: Team vision has spent $55.20") || !h.cluster.Held("vision") {
		t.Fatalf("launch while blocked: %v, applied %v, %q, queue held %v", err, next.Applied(), next.Reason, h.cluster.Held("vision"))
	}
}
