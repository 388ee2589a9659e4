package faultsuite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/telemetrydb"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// oneGPU is a node with one GPU that reads the same every pass, and
// keeps when it was read (the readings the agent made) and how many times
// (its passes).
type oneGPU struct {
	mu     sync.Mutex
	read   map[time.Time]bool
	passes int
}

func (*oneGPU) Inventory(context.Context) ([]telemetry.GPUState, error) {
	return []telemetry.GPUState{{Device: telemetry.Device{GPU: "GPU-a", Index: 0, Model: "NVIDIA H100 80GB HBM3"}, MemoryMiB: 81559}}, nil
}
func (g *oneGPU) Sample(_ context.Context, now time.Time) ([]agent.DeviceSample, error) {
	g.mu.Lock()
	g.read[now] = true
	g.passes++
	g.mu.Unlock()
	v := telemetry.NoValues()
	v[telemetry.GPUUtil], v[telemetry.Power] = 60, 400
	return []agent.DeviceSample{{Device: telemetry.Device{GPU: "GPU-a", Index: 0, Model: "NVIDIA H100 80GB HBM3"}, Values: v}}, nil
}
func (*oneGPU) Events() []telemetry.Event { return nil }

// TestAgentCutOffTenMinutes: a node agent whose link to Gantry is cut for
// ten minutes keeps its readings and delivers them when the link returns;
// the first push after it is taken by Gantry but its answer is lost, so
// the agent sends that batch again. Gantry's real ingest on a real store
// keeps every 10-second reading of the whole time exactly once: none
// lost, none counted twice. (A pass is the agent's tick of the test's
// clock: two ticks it takes at one moment make one reading time, so the
// readings are counted as the GPU was read.)
func TestAgentCutOffTenMinutes(t *testing.T) {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	db, err := store.Open(context.Background(), store.SQLite, filepath.Join(t.TempDir(), "gantry.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	samples := telemetrydb.New(db)
	ingest, err := telemetry.New(telemetry.Options{Store: samples, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	cut, loseAnswer := false, false
	pushes, taken := 0, 0
	gantry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		pushes++
		isCut, lose := cut, loseAnswer
		mu.Unlock()
		if isCut {
			// The link is down: the connection drops without an answer.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		var b telemetry.Batch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := ingest.Ingest(r.Context(), "n1", b); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		taken++
		if lose {
			loseAnswer = false
		}
		mu.Unlock()
		if lose {
			// Taken, but the answer never reaches the agent.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer gantry.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("agent-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	sink, err := agent.NewHTTPSink(gantry.URL, tokenFile, "")
	if err != nil {
		t.Fatal(err)
	}
	gpu := &oneGPU{read: map[time.Time]bool{}}
	a, err := agent.New(agent.Options{Node: "n1", GPUs: gpu, Sink: sink, Clock: clk, Interval: 10 * time.Second, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	// A pass each 10 s: 3 online, then 60 (ten minutes) cut off. Each
	// step waits for the agent's pass on its tick before the next: a step
	// taken while the agent is still behind would find the ticker's one
	// pending tick already there and be lost (a slow machine lost two and
	// the agent never caught up), or two passes would read the GPU at one
	// moment.
	sampled := func(want int) {
		waitfor.Until(t, 60*time.Second, fmt.Sprintf("pass %d sampled", want), func() error {
			gpu.mu.Lock()
			defer gpu.mu.Unlock()
			if gpu.passes < want {
				return fmt.Errorf("%d passes", gpu.passes)
			}
			return nil
		})
	}
	sampled(1) // the pass when the agent starts: its ticker exists then
	passes := 1
	step := func() {
		passes++
		clk.Step(10 * time.Second)
		sampled(passes)
	}
	for range 3 {
		step()
	}
	mu.Lock()
	cut = true
	mu.Unlock()
	for range 60 {
		step()
	}
	if a.Buffered() < 30 {
		t.Fatalf("%d readings buffered after ten minutes cut off", a.Buffered())
	}
	mu.Lock()
	cut, loseAnswer = false, true
	mu.Unlock()
	// The link is back: past any backoff (at most a minute), the buffer
	// drains; one more pass makes the count known.
	waitfor.Until(t, 2*time.Minute, "the buffer delivered", func() error {
		clk.Step(time.Minute)
		if b := a.Buffered(); b > 0 {
			return fmt.Errorf("%d readings still buffered", b)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Each pass's reading is one stored sample at its own time: as many
	// samples as distinct times, whatever the retries.
	var times map[time.Time]int
	waitfor.Until(t, 30*time.Second, "every reading stored", func() error {
		times = map[time.Time]int{}
		if err := samples.SamplesBetween(context.Background(), start.Add(-time.Minute), clk.Now().Add(time.Minute), func(s telemetry.Sample) error { times[s.Time]++; return nil }); err != nil {
			return err
		}
		gpu.mu.Lock()
		defer gpu.mu.Unlock()
		for at := range gpu.read {
			// A pass at the clock's last moment may be taken after the
			// buffer was seen empty: not yet sent when the agent stops.
			if times[at] == 0 && at.Before(clk.Now()) {
				return fmt.Errorf("the reading of %s is not stored (%d of %d)", at.Format(time.TimeOnly), len(times), len(gpu.read))
			}
		}
		return nil
	})
	for at, n := range times {
		if n != 1 {
			t.Errorf("the reading of %s stored %d times", at.Format(time.TimeOnly), n)
		}
	}
	if len(times) < len(gpu.read)-1 || len(times) < 40 || taken < 2 {
		t.Fatalf("%d readings stored of %d made over %d passes (%d pushes, %d taken)", len(times), len(gpu.read), passes, pushes, taken)
	}
	t.Logf("%d readings stored once each over %d passes and a ten-minute cut; %d pushes, %d taken (one answer lost)", len(times), passes, pushes, taken)
}
