package loadgen_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/loadgen"
)

// BenchmarkWatchFanOut holds 1,000 and 10,000 server-sent event streams open
// on one `gantry serve` (the real binary in a process of its own, SQLite,
// 10,000 workloads; each stream follows a workload of its own, as that many
// open workload pages would) from this process, and measures what they
// cost: the server's CPU while they idle (from /proc); other API requests'
// latency (a page of another team's workloads, from 10 clients) with the
// streams open against the same server before they were opened; and per op
// the time from a stop through the API to the stream of that workload
// delivering the change (the change feed).
//
//	go test -tags dev -run '^$' -bench WatchFanOut -benchtime 100x -timeout 30m ./internal/loadgen
func BenchmarkWatchFanOut(b *testing.B) {
	for _, streams := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) { watchFanOut(b, streams) })
	}
}

func watchFanOut(b *testing.B, streams int) {
	if err := raiseFileLimit(uint64(streams + 2048)); err != nil {
		b.Skipf("%d streams need %d open files: %v (raise ulimit -n)", streams, streams+2048, err)
	}
	g := serveBinary(b, fmt.Sprintf("GANTRY_SECURITY_STREAMS_PER_IDENTITY=%d", streams), fmt.Sprintf("GANTRY_SECURITY_STREAMS_PER_REPLICA=%d", streams))
	ids := g.seed(b, recorded)
	tok := g.adminToken(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other := func() loadgen.Result {
		return loadgen.Run(ctx, loadgen.Client(10), loadgen.Options{Clients: 10, Requests: 2000, Duration: time.Minute,
			Request: func(c, i int) (*http.Request, error) {
				req, err := http.NewRequest(http.MethodGet, g.URL+"/api/v1/workloads?team=nlp&limit=50", nil)
				if err == nil {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				return req, err
			}})
	}
	quiet := other()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}}
	events := make([]chan string, streams)
	for i := range streams {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/api/v1/workloads/"+ids[i]+"/watch", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("stream %d: %v %v", i, err, resp)
		}
		events[i] = make(chan string, 4)
		go func(ch chan string) {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					i := strings.Index(d, `"status":"`)
					st := d[i+10:]
					ch <- st[:strings.IndexByte(st, '"')]
				}
			}
		}(events[i])
	}
	for i := range streams {
		if st := <-events[i]; st != "Running" {
			b.Fatalf("stream %d opened on %s", i, st)
		}
	}
	idle := 10 * time.Second
	before := g.cpu(b)
	time.Sleep(idle) // measuring, not waiting for something: the idle cost is the figure
	idleCores := (g.cpu(b) - before).Seconds() / idle.Seconds()
	loaded := other()

	b.ResetTimer()
	took := make([]time.Duration, 0, b.N)
	for n := range b.N {
		i := (n * 97) % streams
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v1/workloads/"+ids[i]+"/stop", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("stop %d: %v %v", i, err, resp)
		}
		resp.Body.Close()
		select {
		case st := <-events[i]:
			if st != "Stopped" {
				b.Fatalf("stream %d: %s", i, st)
			}
		case <-time.After(10 * time.Second):
			b.Fatalf("stream %d: no event 10 s after the stop", i)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	pct := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms-to-event")
	b.ReportMetric(pct(0.99), "p99-ms-to-event")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms-to-event")
	b.ReportMetric(idleCores, "server-cores-idle")
	b.ReportMetric(float64(quiet.P99.Microseconds())/1000, "other-p99-ms-before")
	b.ReportMetric(float64(loaded.P99.Microseconds())/1000, "other-p99-ms-open")
	b.ReportMetric(0, "ns/op")
	if quiet.Errors+loaded.Errors > 0 {
		b.Fatalf("other requests failed: %v; %v", quiet.First, loaded.First)
	}
}

// raiseFileLimit makes sure this process may hold n open files.
func raiseFileLimit(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= n {
		return nil
	}
	lim.Cur = n
	if lim.Max < n {
		lim.Max = n
	}
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}
