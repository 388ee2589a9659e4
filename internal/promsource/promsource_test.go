package promsource_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/promsource"
	"github.com/gantryhq/gantry/internal/promtest"
	"github.com/gantryhq/gantry/internal/replay"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/telemetry/sourcetest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestSourceConformance: the suite Gantry's own store passes, on a real
// Prometheus whose history promtool backfilled with the suite's readings.
func TestSourceConformance(t *testing.T) {
	promtest.Require(t)
	sourcetest.Run(t, func(t *testing.T, rs []telemetry.Reading) telemetry.Source {
		p := promtest.Start(t, promtest.Options{OpenMetrics: promsource.OpenMetrics("n1", rs)})
		s, err := promsource.New(promsource.Options{URL: p.URL})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestScrapeTheAgent: gantry-agent's /metrics, scraped by a real
// Prometheus, read back through the Prometheus source: the values the
// replay GPUs played.
func TestScrapeTheAgent(t *testing.T) {
	promtest.Require(t)
	node := replay.NewNode([]replay.GPU{{UUID: "GPU-scrape", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}})
	prof, _ := replay.Lookup("memory-bound", "")
	node.Play("GPU-scrape", prof, time.Now(), 1)
	pods := podList{{Pod: telemetry.PodRef{Namespace: "gantry-vision", Name: "train-abcde", Container: "main"}, Resources: map[string][]string{"nvidia.com/gpu": {"GPU-scrape"}}}}
	a, err := agent.New(agent.Options{Node: "gpu-node-1", GPUs: node, Pods: pods, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Run(ctx)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	p := promtest.Start(t, promtest.Options{Targets: []string{strings.TrimPrefix(srv.URL, "http://")}, ScrapeInterval: time.Second})
	src, err := promsource.New(promsource.Options{URL: p.URL})
	if err != nil {
		t.Fatal(err)
	}
	target := telemetry.Target{ID: "w1", Namespace: "gantry-vision", Name: "train"}
	start := time.Now().Truncate(time.Second)
	waitfor.Until(t, 60*time.Second, "DRAM activity read back through Prometheus", func() error {
		got, err := src.Series(context.Background(), telemetry.Query{Target: target, From: start.Add(-time.Minute), To: time.Now().Add(time.Second), Step: 10 * time.Second,
			Metrics: []telemetry.Metric{telemetry.DRAMActive, telemetry.FBUsed}})
		if err != nil {
			return err
		}
		if len(got) != 2 {
			return fmt.Errorf("%d series", len(got))
		}
		for _, s := range got {
			if s.Pod.Name != "train-abcde" || s.Device.GPU != "GPU-scrape" || len(s.Points) == 0 {
				return fmt.Errorf("series %+v", s)
			}
			p := s.Points[len(s.Points)-1]
			switch s.Metric {
			case telemetry.DRAMActive:
				if math.Abs(p.Avg-0.82) > 0.03 {
					return fmt.Errorf("DRAM activity %v, want the profile's 0.82", p.Avg)
				}
			case telemetry.FBUsed:
				if math.Abs(p.Avg-0.6*81559) > 2 {
					return fmt.Errorf("memory %v MiB, want 60%% of 81559", p.Avg)
				}
			}
		}
		return nil
	})
}

type podList []agent.PodDevices

func (p podList) List(context.Context) ([]agent.PodDevices, error) { return p, nil }

func TestPodPattern(t *testing.T) {
	for _, tc := range []struct {
		name, pod string
		match     bool
	}{
		{"train", "train-x7k2p", true},           // a Job's pod
		{"train", "train-0", true},               // a StatefulSet's
		{"train", "train-7d9f8c6b5-x7k2p", true}, // a Deployment's
		{"train", "train-2-x7k2p", false},        // another workload's
		{"train", "xtrain-x7k2p", false},         // anchored
		{"a.b", "aXb-x7k2p", false},              // metacharacters quoted
		{"nb", "nb-12", true},
	} {
		q := promsource.Query("avg", "DCGM_FI_DEV_GPU_UTIL", telemetry.Target{Namespace: "ns", Name: tc.name}, time.Minute)
		re := "^(?:" + promsource.PodPattern(tc.name) + ")$"
		if got := mustMatch(re, tc.pod); got != tc.match {
			t.Errorf("%s ~ %s: %v, want %v (%s)", tc.pod, re, got, tc.match, q)
		}
	}
	if q := promsource.Query("p95", "DCGM_FI_PROF_SM_ACTIVE", telemetry.Target{Namespace: `we"ird`, Name: "a"}, 90*time.Second); !strings.Contains(q, `namespace="we\"ird"`) || !strings.HasPrefix(q, "quantile_over_time(0.95, ") || !strings.Contains(q, "[1m30s]") {
		t.Errorf("query: %s", q)
	}
}

func mustMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestStepBoundaries: on a real Prometheus, samples 1 ms either side of a
// step's start land in one step each — the range selectors of Prometheus 2
// include their start, so a window of a whole step would count the sample
// at T−1 ms twice.
func TestStepBoundaries(t *testing.T) {
	promtest.Require(t)
	from := time.Now().Add(-20 * time.Minute).Truncate(time.Minute)
	dev := telemetry.Device{GPU: "GPU-edge", Index: 0, Model: "NVIDIA H100 80GB HBM3"}
	pod := telemetry.PodRef{Namespace: "gantry-vision", Name: "train-x7k2p", Container: "main"}
	var rs []telemetry.Reading
	for i, at := range []time.Duration{0, time.Minute - time.Millisecond, time.Minute, 2*time.Minute - time.Millisecond, 2 * time.Minute} {
		v := telemetry.NoValues()
		v[telemetry.SMActive] = float64(i+1) / 10
		rs = append(rs, telemetry.Reading{Time: from.Add(at), Device: dev, Pod: pod, Share: 1, Values: v, Workload: "w1"})
	}
	p := promtest.Start(t, promtest.Options{OpenMetrics: promsource.OpenMetrics("n1", rs)})
	src, err := promsource.New(promsource.Options{URL: p.URL})
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Series(context.Background(), telemetry.Query{Target: telemetry.Target{ID: "w1", Namespace: "gantry-vision", Name: "train"},
		From: from, To: from.Add(3 * time.Minute), Step: time.Minute, Metrics: []telemetry.Metric{telemetry.SMActive}})
	if err != nil {
		t.Fatal(err)
	}
	want := []telemetry.Point{
		{T: from, Avg: 0.15, Max: 0.2, P95: 0.195, N: 2},
		{T: from.Add(time.Minute), Avg: 0.35, Max: 0.4, P95: 0.395, N: 2},
		{T: from.Add(2 * time.Minute), Avg: 0.5, Max: 0.5, P95: 0.5, N: 1},
	}
	if len(got) != 1 || len(got[0].Points) != len(want) {
		t.Fatalf("series %+v, want one of %d points", got, len(want))
	}
	for i, p := range got[0].Points {
		w := want[i]
		if !p.T.Equal(w.T) || p.N != w.N || math.Abs(p.Avg-w.Avg) > 1e-9 || math.Abs(p.Max-w.Max) > 1e-9 || math.Abs(p.P95-w.P95) > 1e-9 {
			t.Errorf("point %d: %+v, want %+v", i, p, w)
		}
	}
}

// fakeProm answers build info with version (an error when empty) and
// range queries with an empty matrix, or with errBody (status 400);
// it records the queries and the credentials they came with.
type fakeProm struct {
	version, errBody string
	mu               sync.Mutex
	queries, auths   []string
	buildinfos       int
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	user, pw, _ := r.BasicAuth()
	f.auths = append(f.auths, user+":"+pw+"|"+r.Header.Get("Authorization"))
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/api/v1/status/buildinfo":
		f.buildinfos++
		if f.version == "" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"status":"success","data":{"version":%q}}`, f.version)
	case "/api/v1/query_range":
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.queries = append(f.queries, r.Form.Get("query"))
		if f.errBody != "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, f.errBody)
			return
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
	default:
		http.NotFound(w, r)
	}
}

// TestQueryWindow: the window each step looks back over follows the
// server's range semantics, learnt once from its build info.
func TestQueryWindow(t *testing.T) {
	for _, tc := range []struct {
		version, window string
		buildinfos      int
	}{
		{"2.42.0+ds", "[59s999ms]", 1}, // closed ranges: one millisecond short of the step
		{"3.1.0", "[1m]", 1},           // left-open ranges: the whole step
		{"", "[59s999ms]", 2},          // unknown: taken for Prometheus 2, asked again next time
	} {
		t.Run(tc.version, func(t *testing.T) {
			f := &fakeProm{version: tc.version}
			srv := httptest.NewServer(f)
			defer srv.Close()
			src, err := promsource.New(promsource.Options{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			q := telemetry.Query{Target: telemetry.Target{ID: "w1", Namespace: "ns", Name: "train"}, From: time.Now().Add(-time.Hour), To: time.Now(), Step: time.Minute,
				Metrics: []telemetry.Metric{telemetry.SMActive}}
			for range 2 {
				if _, err := src.Series(context.Background(), q); err != nil {
					t.Fatal(err)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.queries) != 8 || f.buildinfos != tc.buildinfos {
				t.Fatalf("%d queries, %d build info requests; want 8 and %d", len(f.queries), f.buildinfos, tc.buildinfos)
			}
			for _, got := range f.queries {
				if !strings.Contains(got, tc.window) {
					t.Errorf("query %s does not look back over %s", got, tc.window)
				}
			}
		})
	}
}

// TestErrors: credentials in the URL go out as basic auth and never into an
// error; a refused query and a bad step are errors that say so.
func TestErrors(t *testing.T) {
	f := &fakeProm{version: "2.42.0", errBody: `{"status":"error","errorType":"bad_data","error":"parse error at char 1"}`}
	srv := httptest.NewServer(f)
	defer srv.Close()
	src, err := promsource.New(promsource.Options{URL: strings.Replace(srv.URL, "http://", "http://alice:s3cret@", 1)})
	if err != nil {
		t.Fatal(err)
	}
	q := telemetry.Query{Target: telemetry.Target{ID: "w1", Namespace: "ns", Name: "train"}, From: time.Now().Add(-time.Hour), To: time.Now(), Step: time.Minute,
		Metrics: []telemetry.Metric{telemetry.SMActive}}
	_, err = src.Series(context.Background(), q)
	if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(srv.URL, "http://")) || !strings.Contains(err.Error(), "parse error") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v: want the server's address and its complaint, without the password", err)
	}
	f.mu.Lock()
	for _, a := range f.auths {
		if a != "alice:s3cret|Basic YWxpY2U6czNjcmV0" {
			t.Errorf("request with credentials %q, want alice's basic auth", a)
		}
	}
	f.mu.Unlock()
	for _, step := range []time.Duration{time.Millisecond, 1500 * time.Microsecond} {
		q.Step, q.To = step, q.From.Add(10*step)
		if _, err := src.Series(context.Background(), q); err == nil || !strings.Contains(err.Error(), "milliseconds") {
			t.Errorf("step %s: error %v, want one about milliseconds", step, err)
		}
	}
	if _, err := promsource.New(promsource.Options{URL: "http://bob:hunter2@[::1"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("unparsable URL: error %v, want one without the password", err)
	}
}
