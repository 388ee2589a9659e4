package promtest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/promtest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// instant asks Prometheus for expr at t and returns the single value.
func instant(s *promtest.Server, expr string, t time.Time) (string, error) {
	resp, err := http.PostForm(s.URL+"/api/v1/query", url.Values{"query": {expr}, "time": {strconv.FormatInt(t.Unix(), 10)}})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", err
	}
	if len(body.Data.Result) != 1 {
		return "", fmt.Errorf("%s: %d results (%s)", expr, len(body.Data.Result), body.Error)
	}
	return fmt.Sprint(body.Data.Result[0].Value[1]), nil
}

// TestBackfillAndScrape: the backfilled history answers at its own times,
// and a scraped target's value arrives within a few scrape intervals.
func TestBackfillAndScrape(t *testing.T) {
	promtest.Require(t)
	at := time.Now().Add(-30 * time.Minute).Truncate(time.Second)
	om := fmt.Sprintf("# TYPE g gauge\ng{pod=\"a\"} 1.5 %d\ng{pod=\"a\"} 2.5 %d\n# EOF\n", at.Unix(), at.Unix()+10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE live gauge\nlive{pod=\"b\"} 42")
	}))
	defer srv.Close()
	p := promtest.Start(t, promtest.Options{OpenMetrics: []byte(om), Targets: []string{strings.TrimPrefix(srv.URL, "http://")}})
	for _, tc := range []struct {
		expr string
		at   time.Time
		want string
	}{
		{`g{pod="a"}`, at, "1.5"},
		{`g{pod="a"}`, at.Add(15 * time.Second), "2.5"},
		{`count_over_time(g[1m])`, at.Add(30 * time.Second), "2"},
	} {
		if got, err := instant(p, tc.expr, tc.at); err != nil || got != tc.want {
			t.Errorf("%s at %s: %s %v, want %s", tc.expr, tc.at, got, err, tc.want)
		}
	}
	waitfor.Until(t, 30*time.Second, "the scraped value", func() error {
		got, err := instant(p, `live{pod="b"}`, time.Now())
		if err == nil && got != "42" {
			err = fmt.Errorf("live = %s", got)
		}
		return err
	})
}

// TestNoOrphan: a test binary that dies without its cleanups takes its
// Prometheus with it.
func TestNoOrphan(t *testing.T) {
	if os.Getenv("PROMTEST_ORPHAN_CHILD") != "" {
		p := promtest.Start(t, promtest.Options{})
		fmt.Printf("PID=%d\n", p.PID)
		os.Exit(3) // no cleanups
	}
	promtest.Require(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoOrphan$")
	// The child's temporary directories, which it leaves behind by dying,
	// go under this test's own, removed with it.
	cmd.Env = append(os.Environ(), "PROMTEST_ORPHAN_CHILD=1", "TMPDIR="+t.TempDir())
	out, _ := cmd.Output()
	_, rest, ok := strings.Cut(string(out), "PID=")
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	if !ok || err != nil {
		t.Fatalf("the child printed no PID: %q", out)
	}
	gone := func() error {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil // gone and reaped
		}
		// A zombie waits for a reaper that may never come (PID 1 in a container).
		if _, after, _ := strings.Cut(string(stat), ") "); strings.HasPrefix(after, "Z") {
			return nil
		}
		return fmt.Errorf("still running: %.60s", stat)
	}
	t.Cleanup(func() { // the orphan this test failed to prevent
		if gone() != nil {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
	})
	waitfor.Until(t, 20*time.Second, fmt.Sprintf("Prometheus (pid %d) gone with its test binary", pid), gone)
}
