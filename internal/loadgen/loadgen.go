// Package loadgen is Gantry's load generator: a number of concurrent
// clients, each with credentials of its own, send requests to a server on
// loopback until a request budget or a deadline runs out, and the result is
// the rate, latency percentiles and answers by status. It runs in process
// from benchmarks (internal/loadgen's own, and the launch benchmarks), so its
// figures sit next to their baselines in one run.
package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Options say what to send.
type Options struct {
	Clients  int           // concurrent clients (default 50)
	Requests int           // total requests; 0: until Duration ends
	Duration time.Duration // bound in time (default 30 s); the run stops at whichever comes first
	// Request makes client c's i-th request. It must not block.
	Request func(c, i int) (*http.Request, error)
	// Check, if set, judges an answer beyond its status: a non-nil error
	// counts the request as an error.
	Check func(resp *http.Response, body []byte) error
}

// Result is what a run measured.
type Result struct {
	Requests int
	Errors   int // transport errors, statuses ≥ 400, and Check failures
	Elapsed  time.Duration
	P50, P90 time.Duration
	P99, Max time.Duration
	ByStatus map[int]int
	First    error // the first error seen, to say what went wrong
}

// Rate is requests per second.
func (r Result) Rate() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

func (r Result) String() string {
	return fmt.Sprintf("%d requests in %v: %.0f req/s, p50 %v, p90 %v, p99 %v, max %v, %d errors",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.Rate(), r.P50, r.P90, r.P99, r.Max, r.Errors)
}

// Run sends the load and waits for every client to finish.
func Run(ctx context.Context, client *http.Client, o Options) Result {
	if o.Clients <= 0 {
		o.Clients = 50
	}
	if o.Duration <= 0 {
		o.Duration = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		res      = Result{ByStatus: map[int]int{}}
		lat      []time.Duration
		wg       sync.WaitGroup
		startAll = time.Now() //clock:allow the load generator measures in wall time
	)
	for c := range o.Clients {
		wg.Go(func() {
			var mine []time.Duration
			statuses := map[int]int{}
			errs := 0
			var first error
			fail := func(err error) {
				errs++
				if first == nil {
					first = err
				}
			}
			for i := 0; ctx.Err() == nil; i++ {
				if o.Requests > 0 && next.Add(1) > int64(o.Requests) {
					break
				}
				req, err := o.Request(c, i)
				if err != nil {
					fail(err)
					continue
				}
				start := time.Now() //clock:allow the load generator measures in wall time
				resp, err := client.Do(req.WithContext(ctx))
				if err != nil {
					if ctx.Err() != nil {
						break // the deadline, not the server
					}
					fail(err)
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				mine = append(mine, time.Since(start))
				statuses[resp.StatusCode]++
				switch {
				case err != nil:
					fail(err)
				case resp.StatusCode >= 400:
					fail(fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body))
				case o.Check != nil:
					if err := o.Check(resp, body); err != nil {
						fail(err)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			res.Errors += errs
			for s, n := range statuses {
				res.ByStatus[s] += n
			}
			if res.First == nil {
				res.First = first
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(startAll)
	res.Requests = len(lat)
	if len(lat) > 0 {
		slices.Sort(lat)
		at := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
		res.P50, res.P90, res.P99, res.Max = at(0.50), at(0.90), at(0.99), lat[len(lat)-1]
	}
	return res
}

// Client is an HTTP client for many concurrent requests to one server on
// loopback: enough idle connections that no request waits to dial.
func Client(clients int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost, t.MaxConnsPerHost = clients*2, clients*2, 0
	t.Proxy = nil
	return &http.Client{Transport: t, Timeout: time.Minute}
}
