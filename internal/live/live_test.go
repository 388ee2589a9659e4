package live_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// registry returns a running registry whose sweep never comes round in a
// test (a connection's first sweep slot can come up within a tick of its
// opening): only published changes check connections again.
func registry(t *testing.T, lim live.Limits) *live.Registry {
	return sweeping(t, lim, time.Hour, time.Hour)
}

func sweeping(t *testing.T, lim live.Limits, tick, sweep time.Duration) *live.Registry {
	t.Helper()
	r, err := live.New(live.Options{Limits: lim, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	live.SetSweepTick(r, tick)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, sweep); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func TestNewRefusesNoLimits(t *testing.T) {
	if _, err := live.New(live.Options{Now: time.Now}); err == nil {
		t.Fatal("a registry without limits was made")
	}
}

// TestPublish: a change wakes the watchers of its workload, and checks again
// the other connections it concerns; a refusal closes, an unavailable check
// keeps the connection.
func TestPublish(t *testing.T) {
	r := registry(t, live.Limits{PerIdentity: 10, PerReplica: 10})
	type answer struct{ err error }
	var verdict atomic.Pointer[answer]
	verdict.Store(&answer{})
	recheck := func(context.Context) error { return verdict.Load().err }
	wctx, watcher, err := r.Open(context.Background(), live.Conn{Workload: "w1", User: "alice", Stream: true, Watch: true, Recheck: recheck})
	if err != nil {
		t.Fatal(err)
	}
	sctx, sock, err := r.Open(context.Background(), live.Conn{Workload: "w1", User: "alice", Token: "t1", Stream: true, Recheck: recheck})
	if err != nil {
		t.Fatal(err)
	}
	octx, _, err := r.Open(context.Background(), live.Conn{Workload: "w2", User: "bob", Token: "t2", Recheck: func(context.Context) error { return &live.Refused{Err: errors.New("no")} }})
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := live.HandleFrom(wctx); !ok || h != watcher {
		t.Fatal("the context does not carry its handle")
	}
	r.Publish(live.Change{Kind: live.Workload, Subject: "w1"})
	select {
	case <-watcher.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher was not woken")
	}
	verdict.Store(&answer{&fault.Unavailable{What: "the store", Err: errors.New("down")}})
	r.Publish(live.Change{Kind: live.Token, Subject: "t1"})
	verdict.Store(&answer{&live.Refused{Err: &fault.NotFound{Kind: "workload", Name: "w1"}}})
	r.Publish(live.Change{Kind: live.Token, Subject: "t1"})
	waitfor.Until(t, 5*time.Second, "the socket to close once refused", func() error {
		if sctx.Err() == nil {
			return errors.New("still open")
		}
		return nil
	})
	if !errors.Is(context.Cause(sctx), live.ErrClosed) {
		t.Errorf("cause %v, want ErrClosed", context.Cause(sctx))
	}
	if wctx.Err() != nil || octx.Err() != nil {
		t.Fatal("a change closed connections it does not concern")
	}
	sock.Close()
	r.Publish(live.Change{Kind: live.User, Subject: "bob"})
	waitfor.Until(t, 5*time.Second, "bob's connection to close", func() error {
		if octx.Err() == nil {
			return errors.New("still open")
		}
		return nil
	})
	r.CloseAll()
	if wctx.Err() == nil {
		t.Fatal("CloseAll left a connection open")
	}
	if conns, streams := r.Count(); conns != 0 || streams != 0 {
		t.Fatalf("%d connections, %d streams left", conns, streams)
	}
}

// TestSweep: without any change, every connection is checked again within
// a sweep (tokens and sessions expire without a change being written); a
// connection still allowed stays open and is checked again next time round.
func TestSweep(t *testing.T) {
	r := sweeping(t, live.Limits{PerIdentity: 10, PerReplica: 10}, 5*time.Millisecond, 20*time.Millisecond)
	var expired atomic.Bool
	var calls [3]atomic.Int32
	ctxs := make([]context.Context, 3)
	for i := range ctxs {
		ctx, _, err := r.Open(context.Background(), live.Conn{Workload: "w", User: "u", Token: fmt.Sprint("t", i), Recheck: func(context.Context) error {
			calls[i].Add(1)
			if i == 2 && expired.Load() {
				return &live.Refused{Err: errors.New("token expired")}
			}
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctxs[i] = ctx
	}
	waitfor.Until(t, 5*time.Second, "every connection to be checked twice", func() error {
		for i := range calls {
			if n := calls[i].Load(); n < 2 {
				return fmt.Errorf("connection %d checked %d times", i, n)
			}
		}
		return nil
	})
	expired.Store(true)
	waitfor.Until(t, 5*time.Second, "the expired connection to close", func() error {
		if ctxs[2].Err() == nil {
			return errors.New("still open")
		}
		return nil
	})
	if ctxs[0].Err() != nil || ctxs[1].Err() != nil {
		t.Fatal("the sweep closed connections still allowed")
	}
}

// TestCaps: streams are capped per identity and per replica; a plain
// connection is not counted; closing frees a place.
func TestCaps(t *testing.T) {
	r := registry(t, live.Limits{PerIdentity: 2, PerReplica: 3})
	ok := func(context.Context) error { return nil }
	open := func(user string, stream bool) (*live.Handle, error) {
		_, h, err := r.Open(context.Background(), live.Conn{Workload: "w", User: user, Stream: stream, Recheck: ok})
		return h, err
	}
	a1, _ := open("alice", true)
	if _, err := open("alice", true); err != nil {
		t.Fatal(err)
	}
	var tm *fault.TooMany
	if _, err := open("alice", true); !errors.As(err, &tm) || tm.RetryAfter <= 0 {
		t.Fatalf("alice's third stream: %v, want TooMany with a Retry-After", err)
	}
	if _, err := open("alice", false); err != nil {
		t.Fatalf("a plain request past the stream cap: %v", err)
	}
	if _, err := open("bob", true); err != nil {
		t.Fatal(err)
	}
	if _, err := open("carol", true); !errors.As(err, &tm) {
		t.Fatalf("past the replica's cap: %v", err)
	}
	a1.Close()
	a1.Close() // twice is harmless
	if _, err := open("carol", true); err != nil {
		t.Fatalf("after a close: %v", err)
	}
	// Plain requests count toward one person's cap on everything held
	// (AllPerStream × PerIdentity = 8): alice holds two (a stream and a
	// plain one) and may hold six more, of any kind.
	var held []*live.Handle
	for i := range 6 {
		h, err := open("alice", false)
		if err != nil {
			t.Fatalf("alice's plain request %d: %v", i+3, err)
		}
		held = append(held, h)
	}
	if _, err := open("alice", false); !errors.As(err, &tm) || !strings.Contains(tm.What, "requests open at once") {
		t.Fatalf("alice's ninth connection: %v, want TooMany", err)
	}
	if _, err := open("dave", false); err != nil {
		t.Fatalf("another person's plain request: %v", err)
	}
	held[0].Close()
	if _, err := open("alice", false); err != nil {
		t.Fatalf("after one of hers closed: %v", err)
	}
}

// TestTransientCheckKeeps: a recheck that fails without refusing (the store
// did not answer) keeps the connection; only a refusal closes it.
func TestTransientCheckKeeps(t *testing.T) {
	r := registry(t, live.Limits{PerIdentity: 10, PerReplica: 10})
	var calls atomic.Int32
	ctx, _, err := r.Open(context.Background(), live.Conn{Workload: "w", User: "u", Token: "t", Recheck: func(context.Context) error {
		calls.Add(1)
		return errors.New("database is locked")
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.Publish(live.Change{Kind: live.Token, Subject: "t"})
	waitfor.Until(t, 5*time.Second, "the recheck to run", func() error {
		if calls.Load() == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	if ctx.Err() != nil {
		t.Fatal("a transient failure closed the connection")
	}
}

// feed is an in-memory change feed.
type feed struct {
	mu      sync.Mutex
	changes []live.Change
	last    int64
}

func (f *feed) Changes(_ context.Context, after int64, limit int) ([]live.Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []live.Change
	for _, c := range f.changes {
		if c.Seq > after && len(out) < limit {
			out = append(out, c)
		}
	}
	return out, nil
}
func (f *feed) LastChange(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, nil
}
func (f *feed) PruneChanges(context.Context, time.Time) error { return nil }

// TestFeedGap: Seq follows the feed, and a feed that skips numbers (pruned
// while this replica lagged) checks every connection.
func TestFeedGap(t *testing.T) {
	r := registry(t, live.Limits{PerIdentity: 10, PerReplica: 10})
	f := &feed{last: 7}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	wake := make(chan struct{}, 1)
	go func() { r.Follow(ctx, f, wake, 10*time.Millisecond, time.Hour); close(done) }()
	defer func() { cancel(); <-done }()
	waitfor.Until(t, 5*time.Second, "the follower to start at the feed's end", func() error {
		if r.Seq() != 7 {
			return errors.New("not yet")
		}
		return nil
	})
	refuse := func(context.Context) error { return &live.Refused{Err: errors.New("revoked")} }
	conn, _, err := r.Open(context.Background(), live.Conn{Workload: "w2", User: "u2", Recheck: refuse})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.changes = append(f.changes, live.Change{Seq: 8, Kind: live.Workload, Subject: "other"})
	f.last = 8
	f.mu.Unlock()
	waitfor.Until(t, 5*time.Second, "Seq to follow the feed", func() error {
		if r.Seq() != 8 {
			return errors.New("not yet")
		}
		return nil
	})
	if conn.Err() != nil {
		t.Fatal("a change about another workload closed the connection")
	}
	f.mu.Lock()
	f.changes = append(f.changes, live.Change{Seq: 12, Kind: live.Workload, Subject: "other"}) // 9-11 pruned
	f.last = 12
	f.mu.Unlock()
	waitfor.Until(t, 5*time.Second, "a gap in the feed to check every connection", func() error {
		if conn.Err() == nil {
			return errors.New("still open")
		}
		return nil
	})
}

// TestOnWorkloadChange: a hook hears the id of every workload change
// published (not a token's or a user's), each once, until removed.
func TestOnWorkloadChange(t *testing.T) {
	r := registry(t, live.Limits{PerIdentity: 10, PerReplica: 10})
	var heard []string
	remove := r.OnWorkloadChange(func(id string) { heard = append(heard, id) })
	r.Publish(live.Change{Seq: 1, Kind: live.Workload, Subject: "w1"}, live.Change{Seq: 2, Kind: live.Token, Subject: "t1"},
		live.Change{Seq: 3, Kind: live.User, Subject: "alice"}, live.Change{Seq: 4, Kind: live.Workload, Subject: "w2"})
	if !slices.Equal(heard, []string{"w1", "w2"}) {
		t.Fatalf("heard %v, want [w1 w2]", heard)
	}
	remove()
	r.Publish(live.Change{Seq: 5, Kind: live.Workload, Subject: "w3"})
	if len(heard) != 2 {
		t.Errorf("heard %v after the hook was removed", heard)
	}
}

// TestFollowTellsHooksFirst: the follower tells the OnChange hooks All once
// it knows where the feed stands (what was kept before may be stale), and
// each change before Seq moves to it and before any connection is checked
// again: a request that notes Seq after a revocation finds the credential
// cache has forgotten it, and a recheck never reads a kept credential.
func TestFollowTellsHooksFirst(t *testing.T) {
	r := registry(t, live.Limits{PerIdentity: 10, PerReplica: 10})
	f := &feed{last: 7}
	type heard struct {
		c   live.Change
		seq int64
	}
	var mu sync.Mutex
	var told []heard
	checked := make(chan []heard, 1)
	r.OnChange(func(c live.Change) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, heard{c, r.Seq()})
	})
	if _, _, err := r.Open(context.Background(), live.Conn{Token: "t1", User: "u1", Recheck: func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		select {
		case checked <- slices.Clone(told):
		default:
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Follow(ctx, f, make(chan struct{}), 10*time.Millisecond, time.Hour); close(done) }()
	defer func() { cancel(); <-done }()
	waitfor.Until(t, 5*time.Second, "the follower to start at the feed's end", func() error {
		if r.Seq() != 7 {
			return errors.New("not yet")
		}
		return nil
	})
	f.mu.Lock()
	f.changes = append(f.changes, live.Change{Seq: 8, Kind: live.Token, Subject: "t1"})
	f.last = 8
	f.mu.Unlock()
	var atCheck []heard
	select {
	case atCheck = <-checked:
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked token's connection was never checked again")
	}
	want := []heard{{live.Change{Kind: live.All}, 0}, {live.Change{Seq: 8, Kind: live.Token, Subject: "t1"}, 7}}
	if !slices.Equal(atCheck, want) {
		t.Fatalf("the hooks had heard %+v when the connection was checked, want %+v (each before Seq moved to it)", atCheck, want)
	}
}
