package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/store/stores"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
	"github.com/gantryhq/gantry/internal/workload"
)

func TestChangeFeed(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) { testChangeFeed(t, open(t)) })
	}
}

// testChangeFeed: every change a live connection must hear of is in the
// feed, numbered without gaps in commit order, so that a reader polling
// while writers race never sees a number before the ones below it.
func testChangeFeed(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	if n, err := s.LastChange(ctx); err != nil || n != 0 {
		t.Fatalf("a new database's last change: %d %v", n, err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	const workloads, updates = 10, 8
	for i := range workloads {
		w := workload.Workload{ID: fmt.Sprintf("feed%06d", i), Name: fmt.Sprintf("x-feed%06d", i), Team: "vision", Owner: "alice", Template: "pytorch-train", TemplateVersion: 1,
			Kind: "service", GPUClass: "L4", GPUCount: 1, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Pending, Reason: "0", CreatedAt: at, UpdatedAt: at}
		if err := s.CreateWorkload(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	// A reader follows the feed while the writers race.
	done := make(chan struct{})
	seen := make(chan []live.Change, 1)
	go func() {
		var all []live.Change
		var after int64
		for {
			// Whether the writers were done before this read began: only
			// an empty read begun after that means every change was read.
			finished := false
			select {
			case <-done:
				finished = true
			default:
			}
			cs, err := s.Changes(ctx, after, 7)
			if err != nil {
				t.Error(err)
			}
			for _, c := range cs {
				if c.Seq != after+1 {
					t.Errorf("read change %d right after %d: the feed skipped one", c.Seq, after)
				}
				after = c.Seq
			}
			all = append(all, cs...)
			if finished && len(cs) == 0 {
				seen <- all
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range workloads {
		for range updates {
			wg.Go(func() {
				_, err := s.UpdateWorkload(ctx, fmt.Sprintf("feed%06d", i), func(old workload.Workload) (workload.Workload, error) {
					var c int
					fmt.Sscan(old.Reason, &c)
					old.Reason = fmt.Sprint(c + 1)
					return old, nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	// An update that changes nothing writes no change.
	if _, err := s.UpdateWorkload(ctx, "feed000000", func(old workload.Workload) (workload.Workload, error) { return old, nil }); err != nil {
		t.Fatal(err)
	}
	close(done)
	all := <-seen
	perWorkload := map[string]int{}
	for _, c := range all {
		if c.Kind != live.Workload {
			t.Errorf("change %+v, want workload changes only so far", c)
		}
		perWorkload[c.Subject]++
	}
	if len(all) != workloads*updates || len(perWorkload) != workloads {
		t.Fatalf("%d changes over %d workloads, want %d over %d", len(all), len(perWorkload), workloads*updates, workloads)
	}

	// Credentials: a revoked token, a deactivated user, a signed-out
	// session and groups that change name what they close.
	ann := identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"ml-vision"}}
	users, err := user.New(user.Options{Store: s.Accounts, MaxGroupAge: 24 * time.Hour, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	last, _ := s.LastChange(ctx)
	want := func(what string, kind live.Kind, subject string) {
		t.Helper()
		cs, err := s.Changes(ctx, last, 100)
		if err != nil || len(cs) != 1 || cs[0].Kind != kind || cs[0].Subject != subject {
			t.Fatalf("%s: changes %+v %v, want one %s %q", what, cs, err, kind, subject)
		}
		last = cs[0].Seq
	}
	if _, err := users.Observe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	want("a new user", live.User, ann.String())
	if _, err := users.Observe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	regrouped := ann
	regrouped.Groups = []string{"ml-nlp"}
	if err := s.UpsertUser(ctx, user.User{ID: user.IDOf(ann.String()), Key: ann.String(), Issuer: ann.Issuer, Subject: ann.Subject,
		Groups: regrouped.Groups, GroupsAt: time.Now(), CreatedAt: time.Now(), LastSeenAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	want("groups changed", live.User, ann.String())
	tok := token.Token{ID: "feedtok01", Owner: ann, Name: "n", SecretHash: "x", CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeToken(ctx, ann.String(), tok.ID, at); err != nil {
		t.Fatal(err)
	}
	want("a revoked token", live.Token, tok.ID)
	ses := weblogin.Session{IDHash: "feed-ses", Identity: ann, CSRF: "c", CreatedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC()}
	if err := s.CreateSession(ctx, ses); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, ses.IDHash); err != nil {
		t.Fatal(err)
	}
	want("a signed-out session", live.User, ann.String())
	if err := s.SetUserDeactivated(ctx, user.IDOf(ann.String()), time.Now()); err != nil {
		t.Fatal(err)
	}
	want("a deactivated user", live.User, ann.String())

	// Pruning forgets old changes, not the counter.
	if err := s.PruneChanges(ctx, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if cs, err := s.Changes(ctx, 0, 10); err != nil || len(cs) != 0 {
		t.Fatalf("after pruning: %+v %v", cs, err)
	}
	if n, err := s.LastChange(ctx); err != nil || n != last {
		t.Fatalf("last change after pruning: %d %v, want %d", n, err, last)
	}
}

func TestCheckThenAct(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("pending approvals cap", func(t *testing.T) { testPendingApprovalsCap(t, open(t)) })
			t.Run("idle stop and a keep-alive", func(t *testing.T) { testIdleStopRace(t, open(t)) })
		})
	}
}

// testPendingApprovalsCap: 20 launches held for approval, recorded at once
// for one person in one team: exactly MaxPendingApprovals are, the others
// are refused with PendingLimit; another person's are not counted. The same
// for 20 stopped workloads moved into PendingApproval at once (starts again
// held for approval).
func testPendingApprovalsCap(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	held := func(owner string) workload.Workload {
		id := workload.NewID()
		return workload.Workload{ID: id, Name: "x-" + id, Team: "vision", Owner: owner, Template: "pytorch-train", TemplateVersion: 1,
			Kind: "job", GPUClass: "H100-80GB", GPUCount: 8, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.PendingApproval,
			Approval: workload.Approval{Why: "costs more than the ceiling", Expires: at.Add(time.Hour)}, CreatedAt: at, UpdatedAt: at}
	}
	// at20 runs 20 tries at once and checks that exactly the cap's were
	// recorded, the others refused with PendingLimit.
	at20 := func(what string, try func(i int) error) {
		t.Helper()
		var made, refused atomic.Int32
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				err := try(i)
				var limit *workload.PendingLimit
				switch {
				case err == nil:
					made.Add(1)
				case errors.As(err, &limit) && limit.Waiting == workload.MaxPendingApprovals:
					refused.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if made.Load() != workload.MaxPendingApprovals || refused.Load() != 20-workload.MaxPendingApprovals {
			t.Fatalf("20 concurrent %s: %d recorded, %d refused; want %d recorded", what, made.Load(), refused.Load(), workload.MaxPendingApprovals)
		}
	}
	at20("held launches", func(int) error { return s.CreateWorkload(ctx, held("alice")) })
	if err := s.CreateWorkload(ctx, held("bob")); err != nil {
		t.Fatalf("another person's held launch: %v", err)
	}
	// Starts again held for approval count the same, decided where each
	// is recorded: 20 of carol's stopped workloads started at once.
	var ids []string
	for range 20 {
		w := held("carol")
		w.Status, w.Approval = workload.Stopped, workload.Approval{}
		if err := s.CreateWorkload(ctx, w); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, w.ID)
	}
	at20("starts held for approval", func(i int) error {
		_, err := s.UpdateWorkload(ctx, ids[i], func(w workload.Workload) (workload.Workload, error) {
			w.Status, w.Reason = workload.PendingApproval, "waiting for approval to start again"
			w.Approval = workload.Approval{Why: "over budget", Expires: at.Add(time.Hour), Restart: true}
			return w, nil
		})
		return err
	})
	waiting, err := s.ListWorkloads(ctx, workload.Filter{Team: "vision", Owner: "carol", Status: workload.PendingApproval, Limit: 100})
	if err != nil || len(waiting) != workload.MaxPendingApprovals {
		t.Fatalf("carol's waiting: %d %v", len(waiting), err)
	}
	// One already waiting, written again (its reason), is not one more.
	if _, err := s.UpdateWorkload(ctx, waiting[0].ID, func(w workload.Workload) (workload.Workload, error) {
		w.Reason = "still waiting"
		return w, nil
	}); err != nil {
		t.Fatalf("a waiting one written again: %v", err)
	}
}

// testIdleStopRace: the idle culler reads a workload's last use, then stops
// it; a keep-alive landing between the two is seen by the stop, which reads
// the last use again in its own transaction (LastUsed) and refuses. Touches
// racing a stop never deadlock and are never lost: afterwards the last use
// is the newest touch.
func testIdleStopRace(t *testing.T, s *stores.All) {
	ctx := context.Background()
	classes, _, files := starter(t)
	if _, err := newCatalog(t, s.Governance, classes).Seed(ctx, "gitops", files); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	w := workload.Workload{ID: workload.NewID(), Team: "vision", Owner: "alice", Template: "dev-environment", TemplateVersion: 1,
		Kind: "notebook", GPUClass: "L4", GPUCount: 1, Parameters: map[string]string{}, ObjectsHash: "h", Status: workload.Running, CreatedAt: at, UpdatedAt: at}
	w.Name = "x-" + w.ID
	if err := s.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchWorkload(ctx, w.ID, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	quiet, err := s.WorkloadActivity(ctx, w.ID) // what the culler read
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TouchWorkload(ctx, w.ID, at.Add(2*time.Minute)); err != nil { // the keep-alive
		t.Fatal(err)
	}
	stop := func(old workload.Workload) (workload.Workload, error) {
		if old.LastUsed.After(quiet) {
			return old, errors.New("used since")
		}
		old.Status = workload.IdleStopped
		return old, nil
	}
	if _, err := s.UpdateWorkload(ctx, w.ID, stop); err == nil {
		t.Fatal("the stop did not see the keep-alive that landed after the culler read")
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if err := s.TouchWorkload(ctx, w.ID, at.Add(time.Duration(3+i)*time.Minute)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Go(func() {
		if _, err := s.UpdateWorkload(ctx, w.ID, stop); err == nil {
			t.Error("stopped though used since")
		}
	})
	wg.Wait()
	if last, err := s.WorkloadActivity(ctx, w.ID); err != nil || !last.Equal(at.Add(22*time.Minute)) {
		t.Fatalf("last use after racing touches: %v %v, want %v", last, err, at.Add(22*time.Minute))
	}
	if got, _ := s.Workload(ctx, w.ID); got.Status != workload.Running {
		t.Fatalf("status %s, want Running", got.Status)
	}
}
