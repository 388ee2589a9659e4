package live_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/waitfor"
)

func registry(t *testing.T, lim live.Limits) *live.Registry {
	t.Helper()
	r, err := live.NewRegistry(lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, time.Hour); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func TestNewRegistryRefusesNoLimits(t *testing.T) {
	if _, err := live.NewRegistry(live.Limits{}, nil); err == nil {
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
	octx, _, err := r.Open(context.Background(), live.Conn{Workload: "w2", User: "bob", Token: "t2", Recheck: func(context.Context) error { return errors.New("no") }})
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
	verdict.Store(&answer{&fault.NotFound{Kind: "workload", Name: "w1"}})
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
}
