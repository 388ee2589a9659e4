package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestReadGate: with one slot, a gated read waits for the one before it,
// the waiting ones run in the order they came, a waiter whose client goes
// leaves the queue without running, and what is not gated (a write, a read
// that waits on the cluster) runs while the gate is full.
func TestReadGate(t *testing.T) {
	gate := newReadGate(1)
	e := echo.New()
	e.HTTPErrorHandler = errorHandler(slog.New(slog.DiscardHandler), func(err error) error { return err })
	e.Use(gate.middleware)
	var mu sync.Mutex
	var ran []string
	release := map[string]chan struct{}{"first": make(chan struct{}), "second": make(chan struct{})}
	handler := func(c echo.Context) error {
		name := c.QueryParam("name")
		mu.Lock()
		ran = append(ran, name)
		mu.Unlock()
		if ch, ok := release[name]; ok {
			<-ch
		}
		return c.NoContent(http.StatusNoContent)
	}
	e.GET("/api/v1/workloads", handler)
	e.POST("/api/v1/workloads", handler)
	e.GET("/api/v1/workloads/:id/events", handler)
	runs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ran)
	}
	var answered sync.WaitGroup
	codes := sync.Map{}
	send := func(ctx context.Context, method, path, name string) {
		answered.Go(func() {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, method, path+"?name="+name, nil))
			codes.Store(name, rec.Code)
		})
	}
	ctx := context.Background()
	send(ctx, http.MethodGet, "/api/v1/workloads", "first")
	until(t, "the first read runs", func() bool { return len(runs()) == 1 })
	send(ctx, http.MethodGet, "/api/v1/workloads", "second")
	until(t, "the second read waits", func() bool { return gate.Waiting() == 1 })
	gone, leave := context.WithCancel(ctx)
	send(gone, http.MethodGet, "/api/v1/workloads", "gone")
	until(t, "the third read waits", func() bool { return gate.Waiting() == 2 })
	send(ctx, http.MethodGet, "/api/v1/workloads", "third")
	until(t, "the fourth read waits", func() bool { return gate.Waiting() == 3 })

	send(ctx, http.MethodPost, "/api/v1/workloads", "write")
	until(t, "a write runs", func() bool { return len(runs()) == 2 })
	send(ctx, http.MethodGet, "/api/v1/workloads/x/events", "cluster-read")
	until(t, "a read of the cluster runs", func() bool { return len(runs()) == 3 })
	if got := runs(); !slices.Equal(got, []string{"first", "write", "cluster-read"}) || gate.Running() != 1 {
		t.Fatalf("ran %v (%v running) while the gate was full; want only the first read and the ungated requests", got, gate.Running())
	}
	leave()
	until(t, "the read whose client went leaves the queue", func() bool { return gate.Waiting() == 2 })
	close(release["first"])
	close(release["second"])
	answered.Wait()
	if got := runs(); !slices.Equal(got, []string{"first", "write", "cluster-read", "second", "third"}) {
		t.Fatalf("ran %v; want the waiting reads in the order they came, and the one whose client went not at all", got)
	}
	if code, _ := codes.Load("gone"); code != 499 {
		t.Fatalf("the read whose client went was answered %v, want 499", code)
	}
	if gate.Running() != 0 || gate.Waiting() != 0 {
		t.Fatalf("after every answer: %v running, %v waiting", gate.Running(), gate.Waiting())
	}
}

// TestGatedReadsAreRoutes: every gated route is one the API serves with
// GET, so a renamed route cannot fall out of the gate unnoticed.
func TestGatedReadsAreRoutes(t *testing.T) {
	served := map[string]bool{}
	e := echo.New()
	gen.RegisterHandlers(e, gen.NewStrictHandler(&server{}, nil))
	for _, r := range e.Routes() {
		if r.Method == http.MethodGet {
			served[r.Path] = true
		}
	}
	for path := range gatedReads {
		if !served[path] {
			t.Errorf("gatedReads names %s, which the API does not serve with GET", path)
		}
	}
}

// until waits for cond, failing t after five seconds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.Until(t, 5*time.Second, what, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

// slowClient is a client that does not read its answer until released.
type slowClient struct {
	*httptest.ResponseRecorder
	release chan struct{}
}

func (s slowClient) Write(b []byte) (int, error) {
	<-s.release
	return s.ResponseRecorder.Write(b)
}

// TestReadGateSlowClient: a client that does not read its answer holds no
// slot; a handler's panic gives its slot back and reaches the client.
func TestReadGateSlowClient(t *testing.T) {
	gate := newReadGate(1)
	e := echo.New()
	e.HTTPErrorHandler = errorHandler(slog.New(slog.DiscardHandler), func(err error) error { return err })
	e.Use(middleware.Recover(), gate.middleware)
	handled := make(chan struct{})
	e.GET("/api/v1/workloads", func(c echo.Context) error {
		if c.QueryParam("panic") != "" {
			panic("boom")
		}
		err := c.String(http.StatusOK, "page of "+c.QueryParam("name"))
		if c.QueryParam("name") == "slow" {
			close(handled)
		}
		return err
	})
	slow := slowClient{httptest.NewRecorder(), make(chan struct{})}
	done := make(chan struct{})
	go func() {
		e.ServeHTTP(slow, httptest.NewRequest(http.MethodGet, "/api/v1/workloads?name=slow", nil))
		close(done)
	}()
	<-handled
	until(t, "the slow client's slot given back while its answer waits", func() bool { return gate.Running() == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fast := httptest.NewRecorder()
	e.ServeHTTP(fast, httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/workloads?name=fast", nil))
	if fast.Code != http.StatusOK || fast.Body.String() != "page of fast" {
		t.Fatalf("a read behind a slow client: %d %q", fast.Code, fast.Body)
	}
	close(slow.release)
	<-done
	if slow.Body.String() != "page of slow" {
		t.Fatalf("the slow client got %q", slow.Body)
	}
	boom := httptest.NewRecorder()
	e.ServeHTTP(boom, httptest.NewRequest(http.MethodGet, "/api/v1/workloads?panic=1", nil))
	if boom.Code != http.StatusInternalServerError || gate.Running() != 0 {
		t.Fatalf("a panicking read: %d, %v running", boom.Code, gate.Running())
	}
}
