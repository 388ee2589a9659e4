package api

import (
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"

	"github.com/labstack/echo/v4"
)

// gatedReads are the routes the database alone answers: no cluster, no
// metrics source, no registry, no stream. These pass readGate.
var gatedReads = map[string]bool{
	"/api/v1/workloads":                true,
	"/api/v1/workloads/:id":            true,
	"/api/v1/templates":                true,
	"/api/v1/templates/:name":          true,
	"/api/v1/templates/:name/versions": true,
	"/api/v1/gpu-classes":              true,
	"/api/v1/gpu-classes/:name":        true,
	"/api/v1/costs":                    true,
	"/api/v1/audit":                    true,
	"/api/v1/budgets":                  true,
	"/api/v1/me":                       true,
	"/api/v1/tokens":                   true,
	"/api/v1/users":                    true,
	"/api/v1/users/:user/tokens":       true,
	"/api/v1/platform/edits":           true,
	"/api/v1/teams/:team/settings":     true,
	// A month of a team's runs and their GPU minutes: the heaviest read a
	// team member may ask for, so it waits its turn like the rest.
	"/api/v1/teams/:team/report": true,
}

// DefaultConcurrentReads is how many reads readGate lets run at once by
// default, per CPU Go schedules on. Two, not four: alternated from outside
// on 2 CPUs, two per CPU gave pages of 100 a p99 of 35–44 ms against 49–78
// ms at the same or a higher rate, and no less on PostgreSQL, where a read
// also waits on its round trips (docs/benchmarks.md).
const DefaultConcurrentReads = 2

// readGate lets at most n of the gated reads run at a time (authentication
// included); the others wait their turn in the order they came (a channel's
// waiting senders are served first in, first out) until their client goes.
// Without it, 50 clients paging through workloads on 2 CPUs ran 50 pages
// at once: the scheduler and the garbage collector shared the CPUs among
// all of them, and the slowest percent waited four times the median
// (p99 83–89 ms at p50 22 ms); with 8 at a time, the same load answered
// more pages a second with p99 48–53 ms (docs/benchmarks.md, Seams 9). A
// read waits here instead of holding memory for its answer, so a flood of
// reads costs a queue, not the heap. A read's answer is kept in memory and
// written to its client after its slot is given back, so a client that
// reads slowly (or not at all) holds no slot. Writes, streams and reads
// that wait on another system (the cluster, Prometheus, a registry) are
// not gated: they would hold a slot while the CPUs idle. (Authenticating a
// provider's token may fetch its keys once; that is rare and bounded.)
type readGate struct {
	slots   chan struct{}
	waiting atomic.Int64
}

func newReadGate(n int) *readGate {
	if n <= 0 {
		n = DefaultConcurrentReads * runtime.GOMAXPROCS(0)
	}
	return &readGate{slots: make(chan struct{}, n)}
}

// Running is how many gated reads run now; Waiting how many wait.
func (g *readGate) Running() float64 { return float64(len(g.slots)) }
func (g *readGate) Waiting() float64 { return float64(g.waiting.Load()) }

func (g *readGate) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Method != http.MethodGet || !gatedReads[c.Path()] {
			return next(c)
		}
		select {
		case g.slots <- struct{}{}:
		default:
			g.waiting.Add(1)
			select {
			case g.slots <- struct{}{}:
				g.waiting.Add(-1)
			case <-r.Context().Done():
				g.waiting.Add(-1)
				return fmt.Errorf("waiting for a turn to read: %w", r.Context().Err())
			}
		}
		res := c.Response()
		client := res.Writer
		kept := &keptAnswer{header: client.Header()}
		res.Writer = kept
		err := func() error {
			defer func() { res.Writer, _ = client, <-g.slots }() // even when next panics
			return next(c)
		}()
		if kept.status != 0 {
			client.WriteHeader(kept.status)
		}
		if len(kept.body) > 0 {
			if _, werr := client.Write(kept.body); werr != nil && err == nil {
				err = werr
			}
		}
		return err
	}
}

// keptAnswer holds an answer in memory until the gate has given its slot
// back; its headers are the client's own.
type keptAnswer struct {
	header http.Header
	status int
	body   []byte
}

func (k *keptAnswer) Header() http.Header { return k.header }

func (k *keptAnswer) WriteHeader(status int) {
	if k.status == 0 {
		k.status = status
	}
}

func (k *keptAnswer) Write(b []byte) (int, error) {
	if k.status == 0 {
		k.status = http.StatusOK
	}
	k.body = append(k.body, b...)
	return len(b), nil
}
