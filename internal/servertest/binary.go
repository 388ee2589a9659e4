package servertest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/syncbuf"
	"github.com/gantryhq/gantry/internal/waitfor"
)

var (
	binaryOnce sync.Once
	binaryDir  string
	binaryPath string
	binaryErr  error
)

// Binary is the development gantry binary (go build -tags dev ./cmd/gantry),
// built once per test process for the tests that run Gantry as users do: as
// a process of its own (killed, upgraded, attacked, loaded). A TestMain that
// uses it calls RemoveBinary after m.Run. When GANTRY_TEST_BINARY names one
// (.ci/test builds it once for every package), that one is used: linking
// Gantry costs about 25 s of a CI machine's two cores per test process.
func Binary(t testing.TB) string {
	t.Helper()
	binaryOnce.Do(func() {
		if path := os.Getenv("GANTRY_TEST_BINARY"); path != "" {
			if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
				binaryErr = fmt.Errorf("GANTRY_TEST_BINARY=%s is not an executable (%v)", path, err)
				return
			}
			binaryPath = path
			return
		}
		root, err := devcluster.RepoRoot()
		if err != nil {
			binaryErr = err
			return
		}
		if binaryDir, binaryErr = os.MkdirTemp("", "gantry-servertest-"); binaryErr != nil {
			return
		}
		path := binaryDir + "/gantry"
		build := exec.Command("go", "build", "-tags", "dev", "-o", path, "./cmd/gantry")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			binaryErr = fmt.Errorf("go build -tags dev ./cmd/gantry: %v\n%s", err, out)
			return
		}
		binaryPath = path
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

// RemoveBinary removes what Binary built.
func RemoveBinary() {
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
}

// RemovingBinary runs m's tests, then RemoveBinary: for a TestMain that
// hands m on.
func RemovingBinary(m interface{ Run() int }) interface{ Run() int } { return removing{m} }

type removing struct{ m interface{ Run() int } }

func (r removing) Run() int {
	defer RemoveBinary()
	return r.m.Run()
}

// ProcessOptions say how StartBinary runs `gantry serve`.
type ProcessOptions struct {
	// Bin is the binary (default Binary).
	Bin string
	// Dir is its working directory (default the repository root).
	Dir string
	// Args follow `serve --listen 127.0.0.1:0`.
	Args []string
	// Env is added to the test's environment, from which every GANTRY_*
	// variable and XDG_DATA_HOME are dropped: only what a test sets here
	// configures the server.
	Env []string
	// MemoryKiB limits the address space it may map (ulimit -v; default 4
	// GiB: several times what it uses, far below the machine's).
	MemoryKiB int
}

// Env is the test's environment without its GANTRY_* variables and
// XDG_DATA_HOME, and with extra: what a gantry process a test runs sees.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GANTRY_") && !strings.HasPrefix(kv, "XDG_DATA_HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Process is a running `gantry serve`.
type Process struct {
	Cmd *exec.Cmd
	// URL is where it serves, as it logged it.
	URL string
	// Log is everything it wrote to stdout and stderr.
	Log *Log
	// Exited is closed when it has exited; Err is then its exit.
	Exited <-chan struct{}
	Err    error
}

// Stop kills the process (SIGKILL) and waits for it.
func (p *Process) Stop() {
	p.Cmd.Process.Kill()
	<-p.Exited
}

// Terminate asks the process to stop (SIGTERM), as Kubernetes does, and
// waits for it, killing it after grace.
func (p *Process) Terminate(grace time.Duration) {
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
	case <-time.After(grace):
		p.Stop()
	}
}

var servingRE = regexp.MustCompile(`msg="gantry is serving" url=(http://\S+)`)

// healthClient asks /healthz, never for long.
var healthClient = &http.Client{Timeout: 5 * time.Second}

// StartBinary runs `gantry serve` on a port the kernel picks and waits until
// it says where it serves and answers /healthz there (nothing picks a port
// and hands it on). It is killed when the test ends, and its log shown if
// the test failed.
func StartBinary(t testing.TB, o ProcessOptions) *Process {
	t.Helper()
	if o.Bin == "" {
		o.Bin = Binary(t)
	}
	if o.Dir == "" {
		root, err := devcluster.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		o.Dir = root
	}
	if o.MemoryKiB == 0 {
		o.MemoryKiB = 4 << 20
	}
	args := append([]string{"-c", fmt.Sprintf(`ulimit -v %d && exec "$0" "$@"`, o.MemoryKiB), o.Bin, "serve", "--listen", "127.0.0.1:0"}, o.Args...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir, cmd.Env = o.Dir, Env(o.Env...)
	exited := make(chan struct{})
	p := &Process{Cmd: cmd, Log: &Log{}, Exited: exited}
	cmd.Stdout, cmd.Stderr = p.Log, p.Log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.Err = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("gantry serve (pid %d) logged:\n%s", cmd.Process.Pid, p.Log)
		}
	})
	waitfor.Until(t, 2*time.Minute, "gantry serve to serve", func() error {
		select {
		case <-exited:
			t.Fatalf("gantry serve exited before serving (%v):\n%s", p.Err, p.Log)
		default:
		}
		m := servingRE.FindStringSubmatch(p.Log.String())
		if m == nil {
			return errors.New(`no "gantry is serving" line yet`)
		}
		resp, err := healthClient.Get(m[1] + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz answered %d", resp.StatusCode)
		}
		p.URL = m[1]
		return nil
	})
	return p
}

// Log is what a process writes, read by the test while it runs.
type Log = syncbuf.Buffer
