package loadgen_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/loadgen"
)

// BenchmarkWatchFanOut holds 1,000 and 10,000 server-sent event streams open
// on one `gantry serve` (the real binary in a process of its own, SQLite,
// 10,000 workloads; each stream follows a workload of its own, as that many
// open workload pages would) from a third process (holdStreams), and
// measures what they cost: the server's CPU while they idle (from /proc); other API requests'
// latency (a page of another team's workloads, from 10 clients) with the
// streams open against the same server before they were opened; and per op
// the time from a stop through the API to the stream of that workload
// delivering the change (the change feed).
//
//	go test -tags dev -run '^$' -bench WatchFanOut -benchtime 100x -timeout 30m ./internal/loadgen
func BenchmarkWatchFanOut(b *testing.B) {
	for _, streams := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			idle := 10 * time.Second
			if testing.Short() {
				idle = 2 * time.Second
			}
			f := watchFanOut(b, streams, b.N, idle)
			slices.Sort(f.took)
			pct := func(p float64) float64 { return float64(f.took[int(p*float64(len(f.took)-1))].Microseconds()) / 1000 }
			b.ReportMetric(pct(0.5), "p50-ms-to-event")
			b.ReportMetric(pct(0.99), "p99-ms-to-event")
			b.ReportMetric(float64(f.took[len(f.took)-1].Microseconds())/1000, "max-ms-to-event")
			b.ReportMetric(f.idleCores, "server-cores-idle")
			b.ReportMetric(float64(f.rss>>20), "server-rss-MB")
			b.ReportMetric(float64(f.quiet.P99.Microseconds())/1000, "other-p99-ms-before")
			b.ReportMetric(float64(f.loaded.P99.Microseconds())/1000, "other-p99-ms-open")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// TestWatchFanOut is the suite's check of the same (the figures are the
// benchmark's, in docs/benchmarks.md): 1,000 streams open on the real
// binary, other requests still answered, and twenty stops each reaching its
// own stream.
func TestWatchFanOut(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the benchmark's run covers it")
	}
	f := watchFanOut(t, 1000, 20, time.Second)
	if len(f.took) != 20 {
		t.Fatalf("%d events for 20 stops", len(f.took))
	}
}

// fanOut is what watchFanOut measured.
type fanOut struct {
	took          []time.Duration // from each stop to its stream's event
	idleCores     float64         // the server's CPU while the streams idled
	rss           int64
	quiet, loaded loadgen.Result // other requests before and with the streams open
}

// watchFanOut opens streams, idles for idle, and makes n stops, each
// followed to its stream's event; it fails tb if any other request failed.
// With a *testing.B, only the stops are timed.
func watchFanOut(tb testing.TB, streams, n int, idle time.Duration) fanOut {
	tb.Helper()
	if err := raiseFileLimit(uint64(streams + 2048)); err != nil {
		tb.Skipf("%d streams need %d open files: %v (raise ulimit -n)", streams, streams+2048, err)
	}
	g := serveBinary(tb, fmt.Sprintf("GANTRY_SECURITY_STREAMS_PER_IDENTITY=%d", streams), fmt.Sprintf("GANTRY_SECURITY_STREAMS_PER_REPLICA=%d", streams))
	ids := g.seed(tb, recorded)
	tok := g.adminToken(tb)
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
	var f fanOut
	f.quiet = other()
	events := holdStreams(tb, g.URL, tok, ids[:streams])
	before := g.cpu(tb)
	time.Sleep(idle) // measuring, not waiting for something: the idle cost is the figure
	f.idleCores = (g.cpu(tb) - before).Seconds() / idle.Seconds()
	f.loaded = other()
	f.rss = g.rss(tb)

	b, timed := tb.(*testing.B)
	if timed {
		b.ResetTimer()
	}
	f.took = make([]time.Duration, 0, n)
	for k := range n {
		i := (k * 97) % streams
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v1/workloads/"+ids[i]+"/stop", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			tb.Fatalf("stop %d: %v %v", i, err, resp)
		}
		resp.Body.Close()
		select {
		case ev := <-events[i]:
			if ev.status != "Stopped" {
				tb.Fatalf("stream %d: %s", i, ev.status)
			}
			f.took = append(f.took, ev.at.Sub(start))
		case <-time.After(10 * time.Second):
			tb.Fatalf("stream %d: no event 10 s after the stop", i)
		}
	}
	if timed {
		b.StopTimer()
	}
	if f.quiet.Errors+f.loaded.Errors > 0 {
		tb.Fatalf("other requests failed: %v; %v", f.quiet.First, f.loaded.First)
	}
	return f
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

// limitMemory bounds the address space this process may map to n bytes
// (ulimit -v), unless it is bound lower already.
func limitMemory(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &lim); err != nil {
		return err
	}
	if lim.Cur <= n {
		return nil
	}
	lim.Cur = n
	return syscall.Setrlimit(syscall.RLIMIT_AS, &lim)
}

// event is a stream's event as the holder read it.
type event struct {
	status string
	at     time.Time
}

// holdStreams opens a watch stream per id from a process of its own (this
// test binary again, as TestStreamHolder), so that the streams' readers
// share neither this process's scheduler nor its garbage collector with the
// requests whose latency is measured here; every event after the first of
// each stream comes back with when the holder read it.
func holdStreams(b testing.TB, url, tok string, ids []string) []chan event {
	b.Helper()
	list := filepath.Join(b.TempDir(), "ids")
	if err := os.WriteFile(list, []byte(strings.Join(ids, "\n")), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStreamHolder$")
	cmd.Env = append(os.Environ(), "GANTRY_STREAM_HOLDER="+url, "GANTRY_STREAM_TOKEN="+tok, "GANTRY_STREAM_IDS="+list)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	events := make([]chan event, len(ids))
	for i := range events {
		events[i] = make(chan event, 4)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "ready":
				ready <- nil
			case len(f) == 4 && f[0] == "event":
				i, _ := strconv.Atoi(f[1])
				ns, _ := strconv.ParseInt(f[3], 10, 64)
				events[i] <- event{status: f[2], at: time.Unix(0, ns)}
			case len(f) >= 1 && f[0] == "error":
				ready <- errors.New(sc.Text())
			}
		}
		ready <- errors.New("the stream holder exited")
	}()
	select {
	case err := <-ready:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(5 * time.Minute):
		b.Fatal("the stream holder did not open its streams within 5 minutes")
	}
	return events
}

// TestStreamHolder is holdStreams' process: it opens the streams named by
// its environment, says "ready" once each has delivered its first event
// (Running), then one line per later event. Run alone, it has nothing to do.
func TestStreamHolder(t *testing.T) {
	url := os.Getenv("GANTRY_STREAM_HOLDER")
	if url == "" {
		t.Skip("the benchmark's stream holder: run by BenchmarkWatchFanOut")
	}
	data, err := os.ReadFile(os.Getenv("GANTRY_STREAM_IDS"))
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Split(string(data), "\n")
	if err := raiseFileLimit(uint64(len(ids) + 1024)); err != nil {
		fmt.Println("error", err)
		return
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: len(ids)}}
	opened := make(chan error, len(ids))
	for i, id := range ids {
		req, _ := http.NewRequest(http.MethodGet, url+"/api/v1/workloads/"+id+"/watch", nil)
		req.Header.Set("Authorization", "Bearer "+os.Getenv("GANTRY_STREAM_TOKEN"))
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			say("error stream %d: %v %v", i, err, resp)
			return
		}
		go func() {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			first := true
			for sc.Scan() {
				d, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				at := time.Now()
				j := strings.Index(d, `"status":"`)
				st := d[j+10:]
				st = st[:strings.IndexByte(st, '"')]
				if first {
					first = false
					if st != "Running" {
						opened <- fmt.Errorf("stream %d opened on %s", i, st)
						continue
					}
					opened <- nil
					continue
				}
				say("event %d %s %d", i, st, at.UnixNano())
			}
		}()
	}
	for range ids {
		if err := <-opened; err != nil {
			say("error %v", err)
			return
		}
	}
	say("ready")
	select {} // until the benchmark kills it
}
