package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/loadgen"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/storetest"
)

// BenchmarkReadAPIOutside is BenchmarkReadAPI as users meet it: the real
// `gantry serve` binary in a process of its own (under ulimit -v, on the
// default configuration: log level info, an access log line a request) on
// SQLite or PostgreSQL holding 10,000 workloads, and the 50 clients
// — each with a token of its own — in a third process (this test binary run
// again as TestOutsideLoad), so that the load generator shares neither a
// scheduler nor a garbage collector with the server. The server's CPU time
// per request is reported beside the rate.
//
//	.ci/with-postgres go test -tags dev -run '^$' -bench ReadAPIOutside -benchtime 20000x -count 3 ./internal/loadgen
func BenchmarkReadAPIOutside(b *testing.B) {
	for _, backend := range []string{store.SQLite, store.Postgres} {
		b.Run(backend, func(b *testing.B) {
			dsn := ""
			if backend == store.Postgres {
				dsn = storetest.PostgresDSN(b)
			}
			g := serveOn(b, backend, dsn)
			ids := g.seed(b, recorded)
			tokens := g.adminTokens(b, clients)
			for _, kind := range []string{"healthz", "get", "page100"} {
				b.Run(kind, func(b *testing.B) {
					before := g.cpu(b)
					r := outsideLoad(b, outsideJob{URL: g.URL, Kind: kind, Requests: b.N, Tokens: tokens, IDs: ids})
					cpu := g.cpu(b) - before
					b.ReportMetric(r.Rate, "req/s")
					b.ReportMetric(r.P50ms, "p50-ms")
					b.ReportMetric(r.P99ms, "p99-ms")
					b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-cpu-us/req")
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}

// outsideJob is what TestOutsideLoad sends, read from the file its
// environment names.
type outsideJob struct {
	URL      string
	Kind     string // healthz, get, page100
	Requests int
	Tokens   []string
	IDs      []string
}

// outsideResult is what it measured, its one line of output.
type outsideResult struct {
	Rate, P50ms, P99ms float64
	Errors             int
	First              string
}

// outsideLoad runs job in a process of its own and returns what it measured.
func outsideLoad(b *testing.B, job outsideJob) outsideResult {
	b.Helper()
	data, _ := json.Marshal(job)
	file := filepath.Join(b.TempDir(), "job.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOutsideLoad$")
	cmd.Env = append(os.Environ(), "GANTRY_OUTSIDE_LOAD="+file)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("the load generator: %v\n%s", err, out)
	}
	var r outsideResult
	for _, line := range bytes.Split(out, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("result ")); ok {
			if err := json.Unmarshal(rest, &r); err != nil {
				b.Fatal(err)
			}
		}
	}
	if r.Rate == 0 || r.Errors > 0 {
		b.Fatalf("the load generator measured %+v\n%s", r, out)
	}
	return r
}

// TestOutsideLoad is outsideLoad's process: the job in the file
// GANTRY_OUTSIDE_LOAD names, from 50 clients, and one "result" line. Run
// alone, it has nothing to do.
func TestOutsideLoad(t *testing.T) {
	file := os.Getenv("GANTRY_OUTSIDE_LOAD")
	if file == "" {
		t.Skip("the outside benchmarks' load generator: run by BenchmarkReadAPIOutside")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var job outsideJob
	if err := json.Unmarshal(data, &job); err != nil {
		t.Fatal(err)
	}
	teams := []string{"vision", "nlp", "speech", "robotics"}
	path := map[string]func(c, i int) string{
		"healthz": func(int, int) string { return "/healthz" },
		"get":     func(c, i int) string { return "/api/v1/workloads/" + job.IDs[(c*7919+i*104729)%len(job.IDs)] },
		"page100": func(c, i int) string { return "/api/v1/workloads?limit=100&team=" + teams[(c+i)%4] },
	}[job.Kind]
	check := map[string]func(*http.Response, []byte) error{
		"get": func(_ *http.Response, body []byte) error {
			if !bytes.Contains(body, []byte(`"id":"`)) {
				return fmt.Errorf("not a workload: %.80s", body)
			}
			return nil
		},
		"page100": func(_ *http.Response, body []byte) error {
			if n := bytes.Count(body, []byte(`"id":"`)); n != 100 {
				return fmt.Errorf("a page of %d: %.80s", n, body)
			}
			return nil
		},
	}[job.Kind]
	n := len(job.Tokens)
	r := loadgen.Run(context.Background(), loadgen.Client(n), loadgen.Options{
		Clients: n, Requests: job.Requests, Duration: 5 * time.Minute,
		Request: func(c, i int) (*http.Request, error) {
			req, err := http.NewRequest(http.MethodGet, job.URL+path(c, i), nil)
			if err == nil {
				req.Header.Set("Authorization", "Bearer "+job.Tokens[c])
			}
			return req, err
		},
		Check: check,
	})
	res := outsideResult{Rate: r.Rate(), P50ms: float64(r.P50.Microseconds()) / 1000, P99ms: float64(r.P99.Microseconds()) / 1000, Errors: r.Errors}
	if r.First != nil {
		res.First = r.First.Error()
	}
	line, _ := json.Marshal(res)
	fmt.Printf("result %s\n", line)
}
