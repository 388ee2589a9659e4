package loadgen_test

import (
	"testing"

	"github.com/gantryhq/gantry/internal/loadgen"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/weblogin"
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
			cookies := g.adminSessions(b, clients)
			for _, kind := range []string{"healthz", "get", "get-session", "page100"} {
				b.Run(kind, func(b *testing.B) {
					before := g.cpu(b)
					job := readJob(g.URL, kind, b.N, tokens, ids)
					if kind == "get-session" {
						// By id, as a signed-in browser asks: its session cookie.
						job = readJob(g.URL, "get", b.N, cookies, ids)
						job.Cookie = weblogin.SessionCookie
					}
					r := loadgen.Outside(b, job)
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

// readJob is the outside load generator's job for kind: healthz, get (by
// id, spread over ids) or page100 (pages of 100, over the four teams).
func readJob(url, kind string, requests int, tokens, ids []string) loadgen.Job {
	job := loadgen.Job{URL: url, Requests: requests, Tokens: tokens}
	switch kind {
	case "healthz":
		job.Paths = []string{"/healthz"}
	case "get":
		for _, id := range ids {
			job.Paths = append(job.Paths, "/api/v1/workloads/"+id)
		}
		job.Holds, job.Count = `"id":"`, 1
	case "page100":
		for _, t := range []string{"vision", "nlp", "speech", "robotics"} {
			job.Paths = append(job.Paths, "/api/v1/workloads?limit=100&team="+t)
		}
		job.Holds, job.Count = `"id":"`, 100
	}
	return job
}

// TestOutsideLoad is the outside load generator's process (loadgen.Outside);
// run alone, it has nothing to do.
func TestOutsideLoad(t *testing.T) { loadgen.ServeJob(t) }
