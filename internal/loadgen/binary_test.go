package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/accounts"
	"github.com/gantryhq/gantry/internal/store/workloads"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
	"github.com/gantryhq/gantry/internal/workload"
)

// binary is `gantry serve` run as users meet it: the development build in a
// process of its own, on SQLite, under an address-space limit, with a load
// generator (this process) outside it.
type binary struct {
	*servertest.Process // its URL, and its pid in Cmd
	db                  string
	// The same database (db), opened here for the fixture's records.
	database  *store.DB
	accounts  *accounts.Store
	workloads *workloads.Store
}

// serveBinary starts gantry serve (built once: servertest.Binary) on SQLite
// with env added, and stops it when the benchmark ends.
func serveBinary(b testing.TB, env ...string) *binary {
	return serveOn(b, store.SQLite, "", env...)
}

// serveOn starts gantry serve on the database driver and dsn ("" with
// SQLite: a new file), with env added.
func serveOn(b testing.TB, driver, dsn string, env ...string) *binary {
	b.Helper()
	dir := b.TempDir()
	if dsn == "" {
		dsn = filepath.Join(dir, "gantry.db")
	}
	args := []string{"--db-driver", driver, "--db", dsn}
	prof := os.Getenv("GANTRY_BENCH_CPUPROFILE")
	if prof != "" {
		prof, _ = filepath.Abs(prof) // the server runs in the repository's root
		// The server's own CPU profile, written when the benchmark ends it
		// (go tool pprof bin/gantry-dev FILE).
		args = append(args, "--cpuprofile", prof+"."+driver)
	}
	p := servertest.StartBinary(b, servertest.ProcessOptions{Args: args,
		Env: append([]string{"XDG_DATA_HOME=" + filepath.Join(dir, "data"), "GANTRY_IMAGES_DEV_REGISTRY=true"}, env...)})
	g := &binary{Process: p, db: dsn}
	b.Cleanup(func() {
		if g.database != nil {
			g.database.Close()
		}
		if prof != "" {
			p.Terminate(15 * time.Second) // a clean stop writes the profile
		}
	})
	var err error
	if g.database, err = store.Open(context.Background(), driver, dsn); err != nil {
		b.Fatal(err)
	}
	g.accounts, g.workloads = accounts.New(g.database), workloads.New(g.database)
	return g
}

// adminToken makes a personal access token for the development platform
// admin, ada, in the server's database (as gantry dev does in process).
func (g *binary) adminToken(b testing.TB) string { return g.adminTokens(b, 1)[0] }

// ada is the development platform admin as the server's provider names
// her, recorded as a user (as her sign-in would be), and the users.
func (g *binary) ada(b testing.TB) (identity.Identity, *user.Service) {
	b.Helper()
	resp, err := http.Get(g.URL + "/auth/config")
	if err != nil {
		b.Fatal(err)
	}
	var ac struct{ Issuer string }
	json.NewDecoder(resp.Body).Decode(&ac)
	resp.Body.Close()
	users, err := user.New(user.Options{Store: g.accounts, MaxGroupAge: 24 * time.Hour, Now: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	ada := identity.Identity{Issuer: ac.Issuer, Subject: "dev-ada", Name: "Ada", Groups: []string{"gantry-admins"}, SecondFactor: true}
	if _, err := users.Observe(identity.With(context.Background(), ada), ada); err != nil {
		b.Fatal(err)
	}
	return ada, users
}

// adminTokens makes n of them.
func (g *binary) adminTokens(b testing.TB, n int) []string {
	b.Helper()
	ada, users := g.ada(b)
	ctx := identity.With(context.Background(), ada)
	root, _ := devcluster.RepoRoot()
	policy, err := authz.New(authz.InDir(filepath.Join(root, "policy")))
	if err != nil {
		b.Fatal(err)
	}
	tokens, err := token.New(token.Options{Store: g.accounts, Owners: users, Teams: policy, Now: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	var secrets []string
	for range n {
		_, secret, err := tokens.Create(ctx, token.Request{Name: "load", Lifetime: 24 * time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		secrets = append(secrets, secret)
	}
	return secrets
}

// adminSessions signs ada in n times, as her browser would be after the
// development provider's sign-in: a session each, recorded in the server's
// database (with her user's record, as adminTokens makes it); it returns
// the cookies.
func (g *binary) adminSessions(b testing.TB, n int) []string {
	b.Helper()
	ada, _ := g.ada(b)
	var cookies []string
	for i := range n {
		cookie := fmt.Sprintf("load-session-%03d-%s", i, workload.NewID())
		if err := g.accounts.CreateSession(context.Background(), weblogin.Session{IDHash: token.Hash(cookie), Identity: ada, CSRF: "x",
			CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
		cookies = append(cookies, cookie)
	}
	return cookies
}

// seed records n Running workloads, spread over four teams.
func (g *binary) seed(b testing.TB, n int) []string {
	b.Helper()
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	ids := make([]string, 0, n)
	for i := range n {
		w := workload.Workload{ID: workload.NewID(), Team: []team.Name{"vision", "nlp", "speech", "robotics"}[i%4], Owner: "ada", Template: "pytorch-train",
			TemplateVersion: 1, Kind: "job", GPUClass: "H100-80GB", GPUCount: 1, Parameters: map[string]string{"epochs": "3"},
			ObjectsHash: "h", Status: workload.Running, CreatedAt: at.Add(time.Duration(i) * time.Second)}
		w.Name, w.UpdatedAt = "pytorch-train-"+w.ID, w.CreatedAt
		if err := g.workloads.CreateWorkload(ctx, w); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, w.ID)
	}
	return ids
}

// cpu is the server's CPU time so far (user and system), from /proc.
func (g *binary) cpu(b testing.TB) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", g.Cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// rss is the server's resident memory, from /proc.
func (g *binary) rss(b testing.TB) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.Cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
