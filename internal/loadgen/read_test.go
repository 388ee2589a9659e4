package loadgen_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/loadgen"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

const (
	recorded = 10000 // workloads in the database
	clients  = 50    // each with a personal access token of its own
)

// fixture is `gantry serve` (the production constructor, no cluster) on a
// database holding 10,000 workloads, and a token per client.
type fixture struct {
	g      *servertest.Gantry
	tokens []string
	ids    []string
}

func newFixture(b *testing.B, backend string, edit ...func(*config.Config)) *fixture {
	b.Helper()
	// The server runs in this process: bound what it may map, so that a
	// leak under load fails here rather than taking the machine.
	if err := limitMemory(8 << 30); err != nil {
		b.Fatal(err)
	}
	g := servertest.New(b, append([]func(*config.Config){func(c *config.Config) {
		if backend == "postgres" {
			c.Database.Driver, c.Database.DSN = "postgres", config.Secret(storetest.PostgresDSN(b))
		}
	}}, edit...)...)
	f := &fixture{g: g}
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range recorded {
		w := workload.Workload{ID: workload.NewID(), Team: []team.Name{"vision", "nlp", "speech", "robotics"}[i%4], Owner: "ada", Template: "pytorch-train",
			TemplateVersion: 1, Kind: "job", GPUClass: "H100-80GB", GPUCount: 1 + i%8, Parameters: map[string]string{"epochs": "3"},
			ObjectsHash: "h", Status: workload.Running, CreatedAt: at.Add(time.Duration(i) * time.Second)}
		w.Name, w.UpdatedAt = "pytorch-train-"+w.ID, w.CreatedAt
		if err := g.Store.CreateWorkload(ctx, w); err != nil {
			b.Fatal(err)
		}
		f.ids = append(f.ids, w.ID)
	}
	for range clients {
		f.tokens = append(f.tokens, g.Token("ada"))
	}
	return f
}

// run sends b.N requests from 50 clients and reports the rate and latency
// percentiles as the benchmark's metrics.
func (f *fixture) run(b *testing.B, path func(c, i int) string, check func(*http.Response, []byte) error) {
	client := loadgen.Client(clients)
	b.ResetTimer()
	r := loadgen.Run(context.Background(), client, loadgen.Options{
		Clients: clients, Requests: b.N, Duration: 2 * time.Minute,
		Request: func(c, i int) (*http.Request, error) {
			req, err := http.NewRequest(http.MethodGet, f.g.URL+path(c, i), nil)
			if err == nil {
				req.Header.Set("Authorization", "Bearer "+f.tokens[c])
			}
			return req, err
		},
		Check: check,
	})
	b.StopTimer()
	if r.Errors > 0 {
		b.Fatalf("%d errors; the first: %v", r.Errors, r.First)
	}
	b.ReportMetric(r.Rate(), "req/s")
	b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op") // per-request time is the latency above, not wall time / N
}

// BenchmarkReadAPI is the read API under 50 concurrent clients, each with its
// own token, on SQLite and PostgreSQL: one workload by id, a page of 100, and
// the floor on the same server, /healthz (no authentication, no database).
//
//	.ci/with-postgres go test -tags dev -run '^$' -bench ReadAPI -benchtime 20000x -count 6 ./internal/loadgen
func BenchmarkReadAPI(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			f := newFixture(b, backend)
			b.Run("healthz", func(b *testing.B) {
				f.run(b, func(int, int) string { return "/healthz" }, nil)
			})
			b.Run("get", func(b *testing.B) {
				f.run(b, func(c, i int) string { return "/api/v1/workloads/" + f.ids[(c*7919+i*104729)%len(f.ids)] }, func(_ *http.Response, body []byte) error {
					if !bytes.HasPrefix(body, []byte(`{`)) || !bytes.Contains(body, []byte(`"id":"`)) {
						return fmt.Errorf("not a workload: %.80s", body)
					}
					return nil
				})
			})
			b.Run("page100", func(b *testing.B) {
				f.run(b, func(c, i int) string {
					return "/api/v1/workloads?limit=100&team=" + []string{"vision", "nlp", "speech", "robotics"}[(c+i)%4]
				}, func(_ *http.Response, body []byte) error {
					// Counting the ids is enough to tell a full page, and
					// leaves the two cores to the server rather than to
					// decoding 100 workloads per answer.
					if n := bytes.Count(body, []byte(`"id":"`)); n != 100 {
						return fmt.Errorf("a page of %d: %.80s", n, body)
					}
					return nil
				})
			})
		})
	}
}
