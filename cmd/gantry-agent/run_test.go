package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gantryhq/gantry/internal/syncbuf"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestRun: `gantry-agent run` on a replay profile serves /metrics under
// dcgm-exporter's names and pushes to Gantry with its token; SIGTERM (ctx)
// stops it cleanly.
func TestRun(t *testing.T) {
	var mu sync.Mutex
	var got []telemetry.Batch
	var auth []string
	gantry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b telemetry.Batch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		got, auth = append(got, b), append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(202)
	}))
	defer gantry.Close()
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("sa-token"), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- runAgent(ctx, []string{"--node", "gpu-node-7", "--gantry-url", gantry.URL, "--token-file", token, "--interval", "1s",
			"--listen", "127.0.0.1:0", "--pod-resources-socket", "", "--replay", "compute-bound"}, nil, &stderr)
	}()
	var addr string
	waitfor.Until(t, 10*time.Second, "the agent listening", func() error {
		m := regexp.MustCompile(`"listen":"([^"]+)"`).FindStringSubmatch(stderr.String())
		if m == nil {
			return fmt.Errorf("log: %s", stderr.String())
		}
		addr = m[1]
		return nil
	})
	waitfor.Until(t, 10*time.Second, "SM activity on /metrics", func() error {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !regexp.MustCompile(`DCGM_FI_PROF_SM_ACTIVE\{[^}]*Hostname="gpu-node-7"[^}]*\} 0\.9`).Match(body) {
			return fmt.Errorf("%s", body)
		}
		return nil
	})
	waitfor.Until(t, 10*time.Second, "a push", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 || got[0].Node != "gpu-node-7" || len(got[0].Readings) == 0 || auth[0] != "Bearer sa-token" {
			return fmt.Errorf("%d pushes", len(got))
		}
		return nil
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

func TestRunWithoutDriver(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	var stderr syncbuf.Buffer
	if code := runAgent(context.Background(), []string{"--node", "n", "--listen", "127.0.0.1:0"}, lib, &stderr); code != 1 || !strings.Contains(stderr.String(), "no NVIDIA driver") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
