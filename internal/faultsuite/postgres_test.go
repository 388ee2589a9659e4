package faultsuite_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
)

// TestPostgresConnectionsCut: while 48 or more launches are made by 8
// clients at once, PostgreSQL drops every connection of this Gantry's again
// and again, in bursts (what a restart does to its clients:
// pg_terminate_backend, mid-query and mid-transaction). A launch refused
// meanwhile is refused whole, with 503, and its client tries again under
// the same Idempotency-Key, as the Python client does — never 500, never
// 401 (the caller's token is fine; the database is not); at the end each
// key has exactly one workload, none lost, none twice.
func TestPostgresConnectionsCut(t *testing.T) {
	app := "gantry-fault-" + strings.ToLower(rand.Text()[:8])
	dsn := storetest.PostgresDSN(t) + "&application_name=" + app
	g := servertest.WithOverrides(t, server.Overrides{Identify: admin}, func(c *config.Config) {
		c.Database.Driver, c.Database.DSN = "postgres", config.Secret(dsn)
	})
	api := servertest.Client(g.URL, "test.jwt.token")
	ctx := context.Background()

	killer, err := sql.Open("pgx", storetest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close()
	var cuts atomic.Int64
	stop := make(chan struct{})
	var killed sync.WaitGroup
	killed.Add(1)
	go func() {
		defer killed.Done()
		// Bursts: 300 ms of cuts every 40 ms, then 300 ms of calm in which
		// a client's retry can get through however slow the machine is
		// (a cut every 40 ms without end starved launches under -race).
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			if i%15 >= 8 {
				continue // the calm
			}
			var n int64
			if err := killer.QueryRow(`SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err == nil {
				cuts.Add(n)
			}
		}
	}()

	// Each client makes at least each launches, and goes on (up to ten
	// times as many) until some launch has met a cut: on a fast machine
	// the first 48 can all land in the calms.
	const clients, each = 8, 6
	launcher := &retryingClient{api: api, limit: 3 * time.Minute, pause: 20 * time.Millisecond}
	var made atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10*each && (i < each || launcher.refusals.Load() == 0); i++ {
				key := fmt.Sprintf("cut-%d-%d", c, i)
				if !launcher.launch(ctx, t, key) {
					return
				}
				made.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	killed.Wait()
	if cuts.Load() == 0 || launcher.refusals.Load() == 0 {
		t.Fatalf("%d connections cut, %d launches refused: the test tested nothing", cuts.Load(), launcher.refusals.Load())
	}

	// Counted in the database itself, past the server's caches.
	check, err := sql.Open("pgx", dsn[:strings.Index(dsn, "&application_name")])
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	var n, keys int
	if err := check.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT idempotency_key) FROM workloads`).Scan(&n, &keys); err != nil {
		t.Fatal(err)
	}
	if want := int(made.Load()); n != want || keys != want {
		t.Fatalf("%d workloads for %d keys, want %d each: a launch was lost or made twice", n, keys, want)
	}
	if launcher.others.Load() > 0 {
		t.Errorf("%d refusals other than 503 while connections were cut", launcher.others.Load())
	}
	t.Logf("%d connections cut; %d launches refused with 503 and tried again; %d workloads, one per key", cuts.Load(), launcher.refusals.Load(), n)
}
