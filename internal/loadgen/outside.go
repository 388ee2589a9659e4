package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Job is what a load generator in a process of its own sends (Outside):
// requests to URL, a client per token, until Requests are answered or
// Duration has passed.
type Job struct {
	URL    string
	Method string   // GET when empty
	Paths  []string // a request's path: spread over the clients and their requests
	Body   []byte   // each request's body, as JSON
	Tokens []string // one client each, its bearer token
	// Cookie, when set, names the cookie the tokens are sent as (a
	// browser's session) instead of a bearer token.
	Cookie string
	// Requests ends the run once that many are answered (0: Duration).
	Requests int
	Duration time.Duration
	// Status is what every answer must be (200 when 0); Count, when set,
	// how many times each answer's body holds Holds.
	Status int
	Holds  string
	Count  int
	// IDs collects the "id" of every answer (a launch's workload).
	IDs bool
}

// JobResult is what the process measured.
type JobResult struct {
	Requests           int
	Seconds            float64
	Rate, P50ms, P99ms float64
	Errors             int
	First              string
	IDs                []string
}

// jobEnv names the file that holds an outside process's job.
const jobEnv = "GANTRY_OUTSIDE_LOAD"

// Outside runs job in a process of its own — the test binary run again as
// its TestOutsideLoad, which calls ServeJob — so that the load generator
// shares neither a scheduler nor a garbage collector with the server it
// measures. It fails tb on any error the job's answers had.
func Outside(tb testing.TB, job Job) JobResult {
	tb.Helper()
	data, _ := json.Marshal(job)
	file := filepath.Join(tb.TempDir(), "job.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOutsideLoad$")
	// The process runs one test: not the local cluster a package's
	// TestMain starts for its tests (in CI, or when asked).
	cmd.Env = append(os.Environ(), jobEnv+"="+file, "GANTRY_TEST_CLUSTER=", "CI=")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("the load generator: %v\n%s", err, out)
	}
	var r JobResult
	for _, line := range bytes.Split(out, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("result ")); ok {
			if err := json.Unmarshal(rest, &r); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if r.Requests == 0 || r.Errors > 0 {
		tb.Fatalf("the load generator measured %d requests, %d errors; the first: %s", r.Requests, r.Errors, r.First)
	}
	return r
}

// ServeJob is the outside process: a package's TestOutsideLoad calls it.
// It runs the job its environment names and prints one "result" line; run
// alone (no job), it skips t.
func ServeJob(t *testing.T) {
	file := os.Getenv(jobEnv)
	if file == "" {
		t.Skip("the outside benchmarks' load generator: run by loadgen.Outside")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var job Job
	if err := json.Unmarshal(data, &job); err != nil {
		t.Fatal(err)
	}
	method, status := job.Method, job.Status
	if method == "" {
		method = http.MethodGet
	}
	if status == 0 {
		status = http.StatusOK
	}
	duration := job.Duration
	if job.Requests > 0 {
		duration = time.Hour // the count ends it
	}
	var mu sync.Mutex
	var ids []string
	n := len(job.Tokens)
	r := Run(context.Background(), Client(n), Options{
		Clients: n, Requests: job.Requests, Duration: duration,
		Request: func(c, i int) (*http.Request, error) {
			req, err := http.NewRequest(method, job.URL+job.Paths[(c*7919+i*104729)%len(job.Paths)], bytes.NewReader(job.Body))
			if err != nil {
				return nil, err
			}
			if job.Cookie != "" {
				req.AddCookie(&http.Cookie{Name: job.Cookie, Value: job.Tokens[c]})
			} else {
				req.Header.Set("Authorization", "Bearer "+job.Tokens[c])
			}
			if job.Body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			return req, nil
		},
		Check: func(resp *http.Response, data []byte) error {
			if resp.StatusCode != status {
				return fmt.Errorf("answered %d, want %d: %.100s", resp.StatusCode, status, data)
			}
			if job.Holds != "" && job.Count > 0 {
				if got := bytes.Count(data, []byte(job.Holds)); got != job.Count {
					return fmt.Errorf("%d of %q, want %d: %.80s", got, job.Holds, job.Count, data)
				}
			}
			if job.IDs {
				var w struct{ ID string }
				if err := json.Unmarshal(data, &w); err != nil || w.ID == "" {
					return fmt.Errorf("no id in the answer: %.100s", data)
				}
				mu.Lock()
				ids = append(ids, w.ID)
				mu.Unlock()
			}
			return nil
		},
	})
	res := JobResult{Requests: r.Requests, Seconds: r.Elapsed.Seconds(), Rate: r.Rate(),
		P50ms: float64(r.P50.Microseconds()) / 1000, P99ms: float64(r.P99.Microseconds()) / 1000, Errors: r.Errors, IDs: ids}
	if r.First != nil {
		res.First = r.First.Error()
	}
	line, _ := json.Marshal(res)
	fmt.Printf("result %s\n", line)
}
