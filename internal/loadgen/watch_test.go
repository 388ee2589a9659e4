package loadgen_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// streams is how many watch streams BenchmarkWatchFanOut holds open.
const streams = 1000

// BenchmarkWatchFanOut holds 1,000 server-sent event streams open on one
// Gantry (SQLite, 10,000 workloads; each stream follows a workload of its
// own, as 1,000 open workload pages would) and measures what they cost: the
// process's CPU while they idle (cores busy, from getrusage: server and the
// streams' readers together), and per op the time from a stop through the
// API to the stream of that workload delivering the change.
//
//	go test -tags dev -run '^$' -bench WatchFanOut -benchtime 20x ./internal/loadgen
func BenchmarkWatchFanOut(b *testing.B) {
	f := newFixture(b, "sqlite")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}}
	events := make([]chan string, streams)
	for i := range streams {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.g.URL+"/api/v1/workloads/"+f.ids[i]+"/watch", nil)
		req.Header.Set("Authorization", "Bearer "+f.tokens[i%clients])
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("stream %d: %v %v", i, err, resp)
		}
		events[i] = make(chan string, 4)
		go func(ch chan string) {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
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
	idle := 5 * time.Second
	before := cpu()
	time.Sleep(idle) // measuring, not waiting for something: the idle cost is the figure
	idleCores := (cpu() - before).Seconds() / idle.Seconds()

	b.ResetTimer()
	var total, worst time.Duration
	for n := range b.N {
		i := n % streams
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, f.g.URL+"/api/v1/workloads/"+f.ids[i]+"/stop", nil)
		req.Header.Set("Authorization", "Bearer "+f.tokens[0])
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
		took := time.Since(start)
		total += took
		worst = max(worst, took)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-event")
	b.ReportMetric(float64(worst.Milliseconds()), "max-ms-to-event")
	b.ReportMetric(idleCores, "cores-idle") // after the loop: ResetTimer clears reported metrics
	b.ReportMetric(0, "ns/op")
}

// cpu is the process's CPU time so far (user and system).
func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
