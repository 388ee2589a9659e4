package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/store/workloads"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

// BenchmarkSoak runs the real `gantry serve` (SQLite, or PostgreSQL with
// GANTRY_SOAK_DB=postgres; the production loop
// interval, under ulimit -v 4 GiB) for GANTRY_SOAK (default 3 minutes; the
// Faults issue's soak is an hour) against the test cluster while it takes
// 20 launches a second (a short Job each, deleted by its owner a minute
// after it was answered, finished or still queued, so the cluster and
// Gantry's caches of it keep a steady number of live objects), holds 1,000
// open watch streams (100 on each of 10 running services) and takes
// telemetry from 104 GPUs (13 nodes of 8, a batch per node every 10 s
// through the agents' TokenReview). Every 30 s it reads the server's own
// /metrics — resident memory, Go heap in use, goroutines, open files — and
// at the end fits a line through the samples after the first fifth (the
// warm-up: caches, the rollups' first hour) and reports each slope per
// hour, beside the load's own figures: launches answered and their
// p50/p99, errors, streams that dropped, pushes refused. It fails on a
// lost or duplicated launch (the answers against the database's records
// afterwards), a failed push or a refused stream, never on a slope: the
// figures go in docs/reliability.md.
//
//	GANTRY_SOAK=1h GANTRY_TEST_CLUSTER=1 go test -tags dev -run '^$' -bench Soak -benchtime 1x -timeout 100m -v ./internal/e2e
func BenchmarkSoak(b *testing.B) {
	if cluster == nil {
		b.Skip(clustertest.ErrNotRequested)
	}
	length := 3 * time.Minute
	if v := os.Getenv("GANTRY_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("GANTRY_SOAK: %v", err)
		}
		length = d
	}
	const (
		rate, streams, services = 20, 1000, 10
		nodes, gpusPerNode      = 13, 8
		sampleEvery             = 30 * time.Second
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The agents' 13 nodes, and 20 more of the class: 264 GPUs for the
	// Jobs to run on (those Kueue admits; the rest wait their minute).
	if err := cluster.AddNodes(ctx, []devcluster.NodeSpec{{Prefix: "soak-h100", Count: nodes + 20, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: gpusPerNode, Whole: gpusPerNode}}); err != nil {
		b.Fatal(err)
	}
	// SQLite, or PostgreSQL with GANTRY_SOAK_DB=postgres (a fresh schema
	// on GANTRY_TEST_POSTGRES_DSN).
	driver, db := store.SQLite, filepath.Join(b.TempDir(), "g.db")
	switch v := os.Getenv("GANTRY_SOAK_DB"); v {
	case "", "sqlite":
	case "postgres":
		driver, db = store.Postgres, storetest.PostgresDSN(b)
	default:
		b.Fatalf("GANTRY_SOAK_DB=%q: sqlite or postgres", v)
	}
	// The streams come from one token here, so the cap per person (100 by
	// default) is raised to hold them; the cap per replica (10,000) stays.
	p := startServe(b, "", "", filepath.Join(b.TempDir(), "data"), []string{"GANTRY_RECONCILE_INTERVAL=15s", "GANTRY_CAPACITY_INFORMERS=true",
		"GANTRY_SECURITY_STREAMS_PER_IDENTITY=" + strconv.Itoa(streams)},
		"--db-driver", driver, "--db", db)
	tok := signInToken(b, p.URL, "ada")
	api := servertest.Client(p.URL, tok)
	benchTemplate(b, api, "../../templates/pytorch-train.yaml", "soak-job")
	const teamName = "soak"
	body, _ := json.Marshal(model.LaunchRequest{Template: "soak-job", Team: teamName, Gpu: &model.GPUChoice{Count: new(1)}})

	// The streams' services, running before the clock starts.
	var svcIDs []string
	for range services {
		r := servertest.Must(api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "vllm-inference", Team: teamName}))(b)
		if r.JSON201 == nil {
			b.Fatalf("launch a service: %d %s", r.StatusCode(), r.Body)
		}
		svcIDs = append(svcIDs, r.JSON201.Id)
	}
	for _, id := range svcIDs {
		waitRunning(b, p.URL, tok, id)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * streams, MaxConnsPerHost: 0}}
	var (
		launched, launchErrs, dropped, streamErrs, pushed, pushErrs, deleted, deleteErrs atomic.Int64
		// unanswered: launches with no answer or an error for one (each
		// may have a record); undeleted: answered launches the owners
		// were too far behind to take.
		unanswered, undeleted atomic.Int64
		firstErr              atomic.Value
		latMu                 sync.Mutex
		lat                   []time.Duration
		ids                   sync.Map
	)
	fail := func(err error) { firstErr.CompareAndSwap(nil, err.Error()) }
	type launch struct {
		id string
		at time.Time
	}
	const keep = time.Minute
	toDelete := make(chan launch, 10_000)
	var wg sync.WaitGroup

	// 1,000 streams, each reopened if it drops (counted); one refused is
	// an error.
	for i := range streams {
		id := svcIDs[i%services]
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/workloads/"+id+"/watch", nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err == nil {
					if resp.StatusCode != http.StatusOK {
						streamErrs.Add(1)
						fail(fmt.Errorf("watch: %d", resp.StatusCode))
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if ctx.Err() == nil {
					dropped.Add(1)
					select { // a client's pause before it reopens
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}
		})
	}

	// 104 GPUs: an agent per node, its token refreshed as the kubelet would.
	for n := range nodes {
		node := fmt.Sprintf("soak-h100-%d", n)
		tokens := agentTokens(b, node)
		wg.Go(func() {
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			for ctx.Err() == nil {
				batch := telemetry.Batch{Node: node, Agent: "soak"}
				now := time.Now().UTC().Truncate(time.Second)
				for g := range gpusPerNode {
					d := telemetry.Device{GPU: fmt.Sprintf("GPU-%s-%d", node, g), Index: g, Model: "NVIDIA H100 80GB HBM3"}
					batch.GPUs = append(batch.GPUs, telemetry.GPUState{Device: d, MemoryMiB: 81559})
					v := telemetry.NoValues()
					v[telemetry.GPUUtil], v[telemetry.Power], v[telemetry.Energy] = float64(g*10), 300, float64(now.Unix()*300_000) // mJ: 300 W
					batch.Readings = append(batch.Readings, telemetry.Reading{Time: now, Device: d, Share: 1, Values: v})
				}
				data, _ := json.Marshal(batch)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/api/v1/telemetry", bytes.NewReader(data))
				req.Header.Set("Authorization", "Bearer "+tokens())
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err == nil && ctx.Err() != nil {
					resp.Body.Close()
				}
				switch {
				case ctx.Err() != nil:
				case err != nil:
					pushErrs.Add(1)
					fail(err)
				default:
					msg, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						pushErrs.Add(1)
						fail(fmt.Errorf("push: %d %.200s", resp.StatusCode, msg))
					} else {
						pushed.Add(1)
					}
				}
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		})
	}

	// 20 launches a second, paced; each answered one handed to the owners.
	wg.Go(func() {
		t := time.NewTicker(time.Second / rate)
		defer t.Stop()
		sem := make(chan struct{}, 200)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				launchErrs.Add(1) // 200 in flight: the server is not keeping up
				fail(fmt.Errorf("200 launches in flight"))
				continue
			}
			// Counted in wg: a launch asked for before the end is answered
			// and tallied before the records are compared.
			wg.Go(func() {
				defer func() { <-sem }()
				// Not cancelled with the run (an answer on its way is
				// waited for), but never waited on for more than a minute.
				lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
				defer lcancel()
				req, _ := http.NewRequestWithContext(lctx, http.MethodPost, p.URL+"/api/v1/workloads", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					launchErrs.Add(1)
					unanswered.Add(1)
					fail(err)
					return
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				took := time.Since(start)
				var w struct{ ID string }
				if resp.StatusCode != http.StatusCreated || json.Unmarshal(data, &w) != nil {
					launchErrs.Add(1)
					unanswered.Add(1)
					fail(fmt.Errorf("launch: %d %.200s", resp.StatusCode, data))
					return
				}
				if _, dup := ids.LoadOrStore(w.ID, true); dup {
					launchErrs.Add(1)
					fail(fmt.Errorf("workload %s answered twice", w.ID))
					return
				}
				launched.Add(1)
				select {
				case toDelete <- launch{w.ID, time.Now()}:
				default: // the deleters are 10,000 launches behind: leave it, counted
					undeleted.Add(1)
				}
				latMu.Lock()
				lat = append(lat, took)
				latMu.Unlock()
			})
		}
	})
	// The owners cleaning up: each launch is deleted a minute after it was
	// answered, finished or not (this cluster's Kueue admits far fewer Jobs a
	// second on 2 cores than the 20 launched: without this the
	// queue, and every cache of it, would grow all hour), by 8 workers.
	for range 8 {
		wg.Go(func() {
			for {
				var l launch
				select {
				case <-ctx.Done():
					return
				case l = <-toDelete:
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(l.at.Add(keep))):
				}
				if d, err := api.DeleteWorkloadWithResponse(ctx, l.id); err == nil && d.StatusCode()/100 == 2 {
					deleted.Add(1)
				} else if ctx.Err() == nil {
					deleteErrs.Add(1)
				}
			}
		})
	}

	// The server's own gauges every 30 s.
	var samples []soakSample
	began := time.Now()
	b.ResetTimer()
	sampler := time.NewTicker(sampleEvery)
	for end := time.After(length); ; {
		s, err := readGauges(p.URL)
		if err != nil {
			b.Fatal(err)
		}
		s.at = time.Since(began)
		samples = append(samples, s)
		b.Logf("soak %6.1f min: rss %7.1f MiB, heap %7.1f MiB, %5.0f goroutines, %4.0f open files; %d launched, %d deleted, %d pushes, %d streams dropped",
			s.at.Minutes(), s.rss/(1<<20), s.heap/(1<<20), s.goroutines, s.fds, launched.Load(), deleted.Load(), pushed.Load(), dropped.Load())
		select {
		case <-end:
			sampler.Stop()
			b.StopTimer()
			cancel()
			wg.Wait()
			report(b, samples, length)
			latMu.Lock()
			slices.Sort(lat)
			var p50, p99 time.Duration
			if len(lat) > 0 {
				p50, p99 = lat[len(lat)/2], lat[(len(lat)*99+99)/100-1]
			}
			latMu.Unlock()
			lost, extra := soakRecords(b, driver, db, teamName, &ids)
			b.Logf("soak %v: %d launches answered (%.1f/s), p50 %v, p99 %v, %d errors; %d deleted (%d refused); %d pushes (%d refused); %d stream drops (%d refused); first error: %v",
				length, launched.Load(), float64(launched.Load())/length.Seconds(), p50.Round(time.Millisecond), p99.Round(time.Millisecond), launchErrs.Load(),
				deleted.Load(), deleteErrs.Load(), pushed.Load(), pushErrs.Load(), dropped.Load(), streamErrs.Load(), firstErr.Load())
			b.Logf("soak records: %d answered launches not in the database, %d recorded launches more than answered (unanswered: %d); %d answered launches left undeleted (the owners 10,000 behind)", lost, extra, unanswered.Load(), undeleted.Load())
			if lost > 0 || int64(extra) > unanswered.Load() {
				b.Errorf("%d answered launches lost, %d recorded twice or unanswered", lost, extra)
			}
			if launchErrs.Load() > 0 || pushErrs.Load() > 0 || streamErrs.Load() > 0 {
				b.Errorf("%d launches, %d pushes and %d streams failed; the first: %v", launchErrs.Load(), pushErrs.Load(), streamErrs.Load(), firstErr.Load())
			}
			return
		case <-sampler.C:
		}
	}
}

// soakRecords reads the launches of team from the database beside the
// server (SQLite allows a reader): how many answered ones (ids) are not
// there, and how many more are there than were answered.
func soakRecords(b *testing.B, driver, db, team string, ids *sync.Map) (lost, extra int) {
	b.Helper()
	ctx := context.Background()
	database, err := store.Open(ctx, driver, db)
	if err != nil {
		b.Fatal(err)
	}
	defer database.Close()
	recorded, err := workloads.New(database).ListWorkloads(ctx, workload.Filter{Team: gteam(team), Template: "soak-job", Limit: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	in := map[string]bool{}
	for _, w := range recorded {
		in[w.ID] = true
	}
	answered := 0
	ids.Range(func(k, _ any) bool {
		answered++
		if !in[k.(string)] {
			lost++
		}
		return true
	})
	return lost, len(in) - (answered - lost)
}

// waitRunning waits until workload id runs.
func waitRunning(b testing.TB, url, tok, id string) {
	b.Helper()
	waitfor.Until(b, 2*time.Minute, "workload "+id+" to run", func() error {
		r, err := servertest.Client(url, tok).GetWorkloadWithResponse(context.Background(), id)
		if err != nil || r.JSON200 == nil {
			return fmt.Errorf("%v %v", err, r)
		}
		if r.JSON200.Status != "Running" {
			return fmt.Errorf("%s", r.JSON200.Status)
		}
		return nil
	})
}

// agentTokens makes the agent's pod on node and returns a function that
// gives its projected token, made again every 5 minutes (they live 10).
func agentTokens(b testing.TB, node string) func() string {
	b.Helper()
	ctx := context.Background()
	c := cluster.Client
	const ns, sa = "gantry-system", "gantry-agent"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-"},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "agent", Image: "gantry-agent"}}}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
	var mu sync.Mutex
	var tok string
	var made time.Time
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(made) > 5*time.Minute {
			exp := int64(600)
			tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
				Audiences: []string{"gantry"}, ExpirationSeconds: &exp,
				BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
			if err == nil {
				tok, made = tr.Status.Token, time.Now()
			}
		}
		return tok
	}
}

// soakSample is the server's gauges at one time.
type soakSample struct {
	at                         time.Duration
	rss, heap, goroutines, fds float64
}

// gaugeClient reads /metrics, never for longer than 30 s.
var gaugeClient = &http.Client{Timeout: 30 * time.Second}

// readGauges reads the server's /metrics.
func readGauges(url string) (soakSample, error) {
	var s soakSample
	resp, err := gaugeClient.Get(url + "/metrics")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "process_resident_memory_bytes":
			s.rss = v
		case "go_memstats_heap_inuse_bytes":
			s.heap = v
		case "go_goroutines":
			s.goroutines = v
		case "process_open_fds":
			s.fds = v
		}
	}
	return s, sc.Err()
}

// report fits a line through the samples after the first fifth and logs
// each gauge's slope per hour, with its mean and its range there.
func report(b *testing.B, samples []soakSample, length time.Duration) {
	var steady []soakSample
	for _, s := range samples {
		if s.at >= length/5 {
			steady = append(steady, s)
		}
	}
	if len(steady) < 3 {
		b.Logf("soak: %d samples after the warm-up: too few for a slope", len(steady))
		return
	}
	for _, g := range []struct {
		name  string
		unit  float64
		label string
		get   func(soakSample) float64
	}{
		{"resident memory", 1 << 20, "MiB", func(s soakSample) float64 { return s.rss }},
		{"Go heap in use", 1 << 20, "MiB", func(s soakSample) float64 { return s.heap }},
		{"goroutines", 1, "", func(s soakSample) float64 { return s.goroutines }},
		{"open files", 1, "", func(s soakSample) float64 { return s.fds }},
	} {
		var sx, sy, sxx, sxy float64
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range steady {
			x, y := s.at.Hours(), g.get(s)/g.unit
			sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
			lo, hi = min(lo, y), max(hi, y)
		}
		n := float64(len(steady))
		slope := (n*sxy - sx*sy) / (n*sxx - sx*sx)
		b.Logf("soak slope: %-16s %+9.2f %s/h (mean %.1f, from %.1f to %.1f over %d samples after %v)",
			g.name, slope, g.label, sy/n, lo, hi, len(steady), (length / 5).Round(time.Second))
		b.ReportMetric(slope, strings.ReplaceAll(g.name, " ", "-")+"/h")
	}
}
