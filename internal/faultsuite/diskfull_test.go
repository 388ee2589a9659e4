package faultsuite_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
)

// admin is who every request of these tests is.
func admin(*http.Request) (identity.Identity, error) {
	return identity.Identity{Issuer: "https://idp.test", Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
}

// smallDisk mounts a tmpfs of size bytes: a disk that fills. It needs
// root (CI runs as root); elsewhere the test is skipped, saying why.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("a small disk needs a tmpfs mount (root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file until the disk at dir has about free bytes left,
// and returns a function that frees them again.
func fill(t *testing.T, dir string, free int64) func() {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	avail := int64(st.Bavail) * st.Bsize
	path := filepath.Join(dir, "filler")
	if err := os.WriteFile(path, make([]byte, max(0, avail-free)), 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSQLiteDiskFull: with the SQLite database's disk full, a launch is
// refused with 503 and a message that says so — never a 500, never a
// workload half-recorded — the server keeps serving reads, and once space
// returns, launches are recorded again; the database is whole after.
func TestSQLiteDiskFull(t *testing.T) {
	disk := smallDisk(t, 64<<20)
	dbPath := filepath.Join(disk, "gantry.db")
	g := servertest.WithOverrides(t, server.Overrides{Identify: admin}, func(c *config.Config) { c.Database.DSN = config.Secret(dbPath) })
	api := servertest.Client(g.URL, "test.jwt.token")
	ctx := context.Background()
	launch := func(i int) (int, string) {
		key := fmt.Sprintf("launch-%d", i)
		r, err := api.CreateWorkloadWithResponse(ctx, &model.CreateWorkloadParams{IdempotencyKey: &key}, model.LaunchRequest{Template: "dev-environment", Team: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		return r.StatusCode(), string(r.Body)
	}
	listed := func() int {
		r, err := api.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Limit: new(500)})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("list while the disk is full: %v %d", err, r.StatusCode())
		}
		return len(r.JSON200.Items)
	}
	for i := range 3 {
		if code, body := launch(i); code != 201 {
			t.Fatalf("before the disk fills: %d %s", code, body)
		}
	}
	free := fill(t, disk, 8<<10)
	accepted, refused := 3, 0
	for i := 3; i < 200 && refused < 5; i++ {
		code, body := launch(i)
		switch code {
		case 201:
			accepted++
		case 503:
			refused++
			if !strings.Contains(body, "the database (disk full) is unavailable") {
				t.Errorf("refused without saying why: %s", body)
			}
		default:
			t.Fatalf("launch %d with the disk full: %d %s", i, code, body)
		}
	}
	if refused == 0 {
		t.Fatal("the disk never filled")
	}
	if n := listed(); n != accepted {
		t.Fatalf("%d workloads listed, %d launches accepted: a refused launch was recorded, or an accepted one lost", n, accepted)
	}
	if r, err := http.Get(g.URL + "/healthz"); err != nil || r.StatusCode != 200 {
		t.Fatalf("healthz with the disk full: %v", err)
	}
	free()
	if code, body := launch(1000); code != 201 {
		t.Fatalf("once space returned: %d %s", code, body)
	}
	if n := listed(); n != accepted+1 {
		t.Fatalf("%d listed after space returned, want %d", n, accepted+1)
	}
	// The file is whole, and holds exactly what was accepted.
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ok string
	var n int
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity: %q %v", ok, err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM workloads`).Scan(&n); err != nil || n != accepted+1 {
		t.Fatalf("%d workloads on disk, want %d (%v)", n, accepted+1, err)
	}
	t.Logf("%d launches accepted, %d refused with the disk full; all kept", accepted, refused)
}
