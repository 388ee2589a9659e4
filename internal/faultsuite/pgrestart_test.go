package faultsuite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestPostgresRestarted restarts a real PostgreSQL server under Gantry
// while 8 clients launch without pause: once with `pg_ctl restart -m fast`
// (transactions in flight rolled back, every connection closed) and once
// with `-m immediate` (the server killed outright and started again from
// its write-ahead log, as after a crash). The server is this test's own —
// initdb in a directory of its own, reached over a Unix socket, so no
// port is taken and no other test's database goes away. While it is down
// a launch is refused whole with 503 and its client tries again under the
// same Idempotency-Key; afterwards the pool's new connections serve launches
// again without a Gantry restart, and the database holds exactly one
// workload per key.
func TestPostgresRestarted(t *testing.T) {
	pg := startPostgres(t)
	g := servertest.WithOverrides(t, server.Overrides{Identify: admin}, func(c *config.Config) {
		c.Database.Driver, c.Database.DSN = "postgres", config.Secret(pg.dsn)
	})
	api := servertest.Client(g.URL, "test.jwt.token")
	ctx := context.Background()

	launcher := &retryingClient{api: api, limit: 2 * time.Minute, pause: 50 * time.Millisecond}
	var (
		accepted atomic.Int64
		keys     sync.Map
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	const clients = 8
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("restart-%d-%d", c, i)
				if !launcher.launch(ctx, t, key) {
					return
				}
				keys.Store(key, true)
				accepted.Add(1)
			}
		})
	}
	// acceptedSince waits until n more launches were accepted than at mark.
	acceptedSince := func(what string, n int64) {
		mark := accepted.Load()
		waitfor.Until(t, 2*time.Minute, what, func() error {
			if got := accepted.Load() - mark; got < n {
				return fmt.Errorf("%d launches accepted since, want %d", got, n)
			}
			return nil
		})
	}
	acceptedSince("launches before the restarts", 10)
	for _, mode := range []string{"fast", "immediate"} {
		refusedBefore := launcher.refusals.Load()
		pg.ctl(t, "restart", "-m", mode)
		acceptedSince("launches after a "+mode+" restart", 10)
		t.Logf("restart -m %s: %d launches refused with 503 meanwhile", mode, launcher.refusals.Load()-refusedBefore)
	}
	close(stop)
	wg.Wait()

	// Counted in the database itself, past the server's caches.
	check, err := sql.Open("pgx", pg.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	var n, distinct int
	if err := check.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT idempotency_key) FROM workloads`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	want := 0
	keys.Range(func(any, any) bool { want++; return true })
	if n != want || distinct != want {
		t.Fatalf("%d workloads for %d keys in the database, %d keys accepted: a launch was lost or made twice", n, distinct, want)
	}
	if launcher.refusals.Load() == 0 {
		t.Fatal("no launch was refused across two restarts: the test tested nothing")
	}
	if launcher.others.Load() > 0 {
		t.Errorf("%d refusals other than 503 across the restarts", launcher.others.Load())
	}
	t.Logf("2 restarts; %d launches refused with 503 and tried again; %d workloads, one per key", launcher.refusals.Load(), n)
}

// postgres is a PostgreSQL server of one test's own.
type postgres struct {
	bin, dir string
	as       []string // runuser -u postgres -- when the test runs as root
	dsn      string
}

// startPostgres initialises and starts a PostgreSQL server in a new
// directory, listening on a Unix socket there only, and stops it and
// removes the directory when t ends. The binaries are where
// .ci/with-postgres found them (GANTRY_TEST_POSTGRES_BIN); without them the
// test is skipped, except in CI, where it fails.
func startPostgres(t *testing.T) *postgres {
	t.Helper()
	bin := os.Getenv("GANTRY_TEST_POSTGRES_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("GANTRY_TEST_POSTGRES_BIN is not set: CI must test PostgreSQL (make test starts one)")
		}
		t.Skip("GANTRY_TEST_POSTGRES_BIN not set: run under .ci/with-postgres")
	}
	// Not t.TempDir: its parent is private to this user, and as root the
	// server runs as postgres, which must reach its directory.
	dir, err := os.MkdirTemp("", "gantry-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &postgres{bin: bin, dir: dir, dsn: "postgres://gantry@/postgres?host=" + dir + "&sslmode=disable"}
	t.Cleanup(func() {
		p.run("pg_ctl", "-D", filepath.Join(dir, "data"), "-m", "immediate", "stop")
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.as = []string{"runuser", "-u", "postgres", "--"}
	}
	if out, err := p.run("initdb", "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", "gantry", "-E", "UTF8"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.ctl(t, "start")
	return p
}

// ctl runs pg_ctl verb on the server and waits for it to finish (-w).
func (p *postgres) ctl(t *testing.T, verb string, args ...string) {
	t.Helper()
	args = append([]string{"-D", filepath.Join(p.dir, "data"), "-w", "-t", "60", "-l", filepath.Join(p.dir, "log"),
		"-o", "-c listen_addresses='' -k " + p.dir + " -c fsync=off", verb}, args...)
	if out, err := p.run("pg_ctl", args...); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
		t.Fatalf("pg_ctl %s: %v\n%s\n%s", verb, err, out, log)
	}
}

// run runs one of the server's programs, as postgres when the test is root.
func (p *postgres) run(prog string, args ...string) ([]byte, error) {
	argv := append(append(append([]string{}, p.as...), filepath.Join(p.bin, prog)), args...)
	return exec.Command(argv[0], argv[1:]...).CombinedOutput()
}
