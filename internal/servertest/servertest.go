// Package servertest is the one test harness that runs Gantry whole: the
// production constructor (server.New) and lifecycle (Run) on the embedded
// defaults — SQLite in a temporary directory, the development OpenID provider,
// the local signed image registry, the repository's templates, policy and
// image catalog by absolute path — with whatever a test changes in the
// configuration. The API, command and end-to-end tests all start Gantry here.
package servertest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers driver "pgx"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/store/storetest"
)

// Gantry is a running server.
type Gantry struct {
	*server.Server
	URL string
	t   testing.TB
}

// Config is the configuration New starts from: embedded defaults with a fresh
// SQLite database (migrated: storetest.SQLitePath), a loopback port chosen by the kernel, quiet logs, the
// development image registry, and the repository's catalog files by absolute
// path.
func Config(t testing.TB) config.Config {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	level := "error" // a test's servers say only what went wrong,
	if l := os.Getenv("GANTRY_TEST_LOG_LEVEL"); l != "" {
		level = l // unless asked for more
	}
	cfg, err := config.Load("", func(string) (string, bool) { return "", false }, config.Flags{
		"listen": "127.0.0.1:0", "db": storetest.SQLitePath(t), "log-level": level})
	if err != nil {
		t.Fatal(err)
	}
	cfg.TemplatesDir = filepath.Join(root, "templates")
	cfg.GPUClassesFile = filepath.Join(root, "templates", "gpu-classes.yaml")
	cfg.NodeGroupsFile = filepath.Join(root, "templates", "node-groups.yaml")
	cfg.PolicyDir = filepath.Join(root, "policy")
	cfg.Images.Dir = filepath.Join(root, "images")
	cfg.Images.DevRegistry = true
	return cfg
}

// New starts Gantry with Config(t) changed by edit, and stops it (waiting for
// every loop) when the test ends.
func New(t testing.TB, edit ...func(*config.Config)) *Gantry {
	t.Helper()
	return WithOverrides(t, server.Overrides{}, edit...)
}

// WithOverrides is New with parts outside Gantry stood in for (see
// server.Overrides): tests of the HTTP surface choose who a bearer token is.
func WithOverrides(t testing.TB, ov server.Overrides, edit ...func(*config.Config)) *Gantry {
	t.Helper()
	cfg := Config(t)
	for _, e := range edit {
		e(&cfg)
	}
	return Start(t, cfg, ov)
}

// devKey signs every development OpenID provider's tokens in this test
// process (each has its own issuer): an RSA key takes longer to make than the
// rest of a provider.
var devKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// Start starts Gantry with exactly cfg and ov (and the process's development
// signing key unless ov names one).
func Start(t testing.TB, cfg config.Config, ov server.Overrides) *Gantry {
	t.Helper()
	if ov.DevSigningKey == nil {
		ov.DevSigningKey = devKey()
	}
	if !server.DevBuild && cfg.OIDC.Issuer == "" {
		// The development sign-in is only in -tags dev builds; CI always
		// builds tests with it, so there a missing tag is a failure.
		msg := "Gantry whole needs the development sign-in: run the tests with -tags dev (make test does)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if ov.DataDir == "" {
		ov.DataDir = t.TempDir() // the development signing keys
	}
	if ov.LogOutput == nil {
		ov.LogOutput = testOutput(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, ov)
	if err != nil {
		cancel()
		t.Fatalf("gantry did not start: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gantry stopped with: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("gantry did not stop within a minute")
		}
	})
	return &Gantry{Server: srv, URL: srv.URL(), t: t}
}

// testOutput is where a test's server logs: the test's own output, shown
// under its failure (or with -v) instead of among the lines of every test
// in the package, where a passing test's expected errors (a fault test
// logs thousands) buried the failing one's. The server stops in a cleanup
// registered after this one's, so before this one runs; a line written
// after it is dropped instead of writing to a finished test.
//
// A test's output is printed when it ends, so a test still running when
// the binary's -timeout kills it would take its server's lines with it:
// 30 s before that deadline, the last lines so far go to standard error.
func testOutput(t testing.TB) io.Writer {
	return testOutputTo(t, os.Stderr)
}

// tailLines is how many of its last writes a test's server log keeps for
// the deadline.
const tailLines = 100

// testOutputTo is testOutput with the deadline's lines written to late.
func testOutputTo(t testing.TB, late io.Writer) io.Writer {
	o := &lockedOutput{w: t.Output()}
	var alarm *time.Timer
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if when, ok := d.Deadline(); ok {
			if wait := time.Until(when) - 30*time.Second; wait > 0 {
				alarm = time.AfterFunc(wait, func() { o.writeTail(late, t.Name()) })
			}
		}
	}
	t.Cleanup(func() {
		if alarm != nil {
			alarm.Stop()
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		o.w = nil
	})
	return o
}

// lockedOutput writes to w until w is nil, and keeps its last tailLines
// writes (a slog handler writes a line at a time).
type lockedOutput struct {
	mu   sync.Mutex
	w    io.Writer
	tail [tailLines][]byte
	n    int // writes so far
}

func (o *lockedOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.w == nil {
		return len(p), nil
	}
	o.tail[o.n%tailLines] = append(o.tail[o.n%tailLines][:0], p...)
	o.n++
	return o.w.Write(p)
}

// writeTail writes the last lines kept to w, under a line naming the test.
func (o *lockedOutput) writeTail(w io.Writer, test string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.w == nil {
		return
	}
	first := max(0, o.n-tailLines)
	fmt.Fprintf(w, "%s is still running 30 s before the test binary's deadline; its Gantry's last %d log lines:\n", test, o.n-first)
	for i := first; i < o.n; i++ {
		w.Write(o.tail[i%tailLines])
	}
}

// Token makes a personal access token for a development user (alice,
// lee, pat, ada or vic with the default users).
func (g *Gantry) Token(user string) string {
	g.t.Helper()
	tok, err := g.DevToken(context.Background(), user)
	if err != nil {
		g.t.Fatal(err)
	}
	return tok
}
