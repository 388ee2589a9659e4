package promsource_test

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/agent"
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
		s, err := promsource.New(p.URL, nil)
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
	src, err := promsource.New(p.URL, nil)
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
