// Package promtest runs a real Prometheus server for tests (Debian's
// prometheus package; .ci/test installs it): on history backfilled with
// promtool, or scraping given targets. Prometheus binds port 0 itself and the
// test learns the port from the kernel's socket table, so no port is grabbed
// and handed on.
package promtest

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/syncbuf"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// Binaries are where Debian's package puts them.
var (
	Prometheus = "/usr/bin/prometheus"
	Promtool   = "/usr/bin/promtool"
)

// Require skips the test when Prometheus is not installed, unless
// GANTRY_TEST_PROMETHEUS is set (CI sets it: a missing server fails there).
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{Prometheus, Promtool} {
		if _, err := os.Stat(bin); err != nil {
			if os.Getenv("GANTRY_TEST_PROMETHEUS") != "" || os.Getenv("CI") != "" {
				t.Fatalf("%s is missing: apt-get install prometheus (make test does)", bin)
			}
			t.Skipf("%s is missing (apt-get install prometheus; make test installs it)", bin)
		}
	}
}

// Options configure a server.
type Options struct {
	// Targets are host:port addresses scraped every ScrapeInterval (default 1s)
	// at /metrics.
	Targets        []string
	ScrapeInterval time.Duration
	// OpenMetrics, when set, is backfilled (promtool tsdb
	// create-blocks-from openmetrics) before the server starts.
	OpenMetrics []byte
}

// Server is a running Prometheus.
type Server struct {
	URL string
	PID int // Prometheus's process
}

// Start runs Prometheus until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if len(o.OpenMetrics) > 0 {
		in := filepath.Join(dir, "backfill.om")
		if err := os.WriteFile(in, o.OpenMetrics, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(Promtool, "tsdb", "create-blocks-from", "openmetrics", in, data).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool backfill: %v\n%s", err, out)
		}
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = time.Second
	}
	var cfg bytes.Buffer
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\nscrape_configs:\n", o.ScrapeInterval, o.ScrapeInterval)
	if len(o.Targets) > 0 {
		fmt.Fprintf(&cfg, "  - job_name: gantry-agent\n    scrape_interval: %s\n    static_configs:\n      - targets: [%s]\n", o.ScrapeInterval, quoteAll(o.Targets))
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, cfg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	cmd := exec.Command(Prometheus, "--config.file="+cfgPath, "--storage.tsdb.path="+data, "--web.listen-address=127.0.0.1:0",
		"--storage.tsdb.retention.time=30d", "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	s := &Server{PID: cmd.Process.Pid}
	waitfor.Until(t, 60*time.Second, "Prometheus ready", func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus exited: %v\n%s", err, logs.String())
		default:
		}
		if s.URL == "" {
			ports, err := listeningPorts(cmd.Process.Pid)
			if err != nil || len(ports) == 0 {
				return fmt.Errorf("not listening yet (%v)", err)
			}
			s.URL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
		}
		resp, err := probe.Get(s.URL + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/-/ready: %d", resp.StatusCode)
		}
		return nil
	})
	return s
}

// probe asks whether the server is ready; a hung server is a failed probe,
// asked again.
var probe = &http.Client{Timeout: 5 * time.Second}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// listeningPorts finds the TCP ports a process listens on: its socket
// inodes (/proc/<pid>/fd) matched against the kernel's table of listening
// sockets (/proc/net/tcp, state 0A).
func listeningPorts(pid int) ([]int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, port, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(port, 16, 32); ok && err == nil {
				ports = append(ports, int(p))
			}
		}
		f.Close()
	}
	return ports, nil
}
