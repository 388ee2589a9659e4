//go:build dev

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/internal/capreplay"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/forecast"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// capacityReplayCmd replays a trace's pods, time-compressed, onto a local
// cluster whose node group Karpenter scales: once reactive, once warmed
// ahead of the forecast, each on a cluster of its own.
func capacityReplayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry capacity replay", stderr)
	file := fs.String("file", "", "the trace (openb's pod list, CSV)")
	day := fs.Float64("day", 130, "the window's start, in days from the trace's start")
	span := fs.Duration("span", 24*time.Hour, "the window's length (trace time)")
	warmup := fs.Duration("warmup", time.Hour, "replayed before the window, not measured")
	compress := fs.Float64("compress", 72, "trace seconds a real second (72: a day in 20 minutes)")
	policy := fs.String("policy", "both", "reactive, ahead or both")
	nodes := fs.Int("nodes", 10, "the node group's max machines")
	perNode := fs.Int("gpus-per-node", 8, "GPUs a machine")
	price := fs.Float64("price", 55.2, "a machine-hour, USD")
	boot := fs.Duration("boot", 3*time.Minute, "a machine's boot time (trace time)")
	quiet := fs.Duration("quiet", 10*time.Minute, "how long an empty machine stays (trace time)")
	warmPerDay := fs.Float64("warm-per-day", 0, "the warm machines' daily cap, USD (default: a tenth of the group's day at its max)")
	out := fs.String("o", "", "write the results (a JSON line per policy) to this file too")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageError{"replay takes no arguments"}
	}
	if *file == "" {
		return usageError{"--file is required"}
	}
	policies := map[string][]bool{"reactive": {false}, "ahead": {true}, "both": {false, true}}[*policy]
	if policies == nil {
		return usageError{fmt.Sprintf("--policy %q: reactive, ahead or both", *policy)}
	}
	if *compress <= 0 || *nodes < 1 || *perNode < 1 {
		return usageError{"--compress, --nodes and --gpus-per-node must be above 0"}
	}
	path, err := filepath.Abs(*file)
	if err != nil {
		return err
	}
	root, err := devcluster.RepoRoot()
	if err != nil {
		return fmt.Errorf("gantry capacity replay runs from a checkout of the repository: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	trace, err := forecast.ReadOpenB(bufio.NewReader(f), *file, "")
	f.Close()
	if err != nil {
		return err
	}
	classes, err := gpu.LoadFile(filepath.Join(root, "templates", "gpu-classes.yaml"))
	if err != nil {
		return err
	}
	g := nodegroup.Group{Name: "replay", Class: "H100-80GB", Purchase: nodegroup.OnDemand, GPUsPerNode: *perNode, Max: *nodes,
		PricePerNodeHour: *price, BootTime: config.Duration(*boot), QuietTime: config.Duration(*quiet), WarmPerDay: *warmPerDay}
	if g.WarmPerDay == 0 {
		g.WarmPerDay = 0.1 * float64(*nodes) * *price * 24
	}
	// The cluster's group runs in real time: its quiet time compressed
	// (Karpenter's consolidateAfter), its boot time by BootScale.
	real := g
	real.QuietTime = config.Duration(float64(*quiet) / *compress)
	var w io.Writer = io.Discard
	if *out != "" {
		of, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer of.Close()
		w = of
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	from := time.Unix(int64(*day*86400), 0).UTC()
	fmt.Fprintf(stdout, "%-9s %5s %6s %9s %9s %9s %9s %7s %10s %10s %10s %10s %8s %7s\n", "POLICY", "PODS", "PLACED", "WAIT P50", "WAIT P90", "WAIT MAX", "MEAN", ">1 MIN", "PAID GPU-H", "USED GPU-H", "IDLE GPU-H", "WARM GPU-H", "MACHINES", "PARTIAL")
	for _, ahead := range policies {
		fmt.Fprintf(stderr, "gantry capacity replay: starting a local cluster (ahead=%v)\n", ahead)
		cl, err := devcluster.Start(ctx, devcluster.Options{Name: "gantry-capreplay", Root: root, Log: io.Discard, Ephemeral: true,
			Fleet: []devcluster.NodeSpec{}, NodeGroups: []nodegroup.Group{real}, BootScale: 1 / *compress})
		if err != nil {
			return fmt.Errorf("the local cluster did not start: %w", err)
		}
		dyn, err := dynamic.NewForConfig(cl.Config())
		if err != nil {
			cl.Stop(context.Background())
			return err
		}
		fmt.Fprintf(stderr, "gantry capacity replay: replaying %s from day %g (%s after a %s warm-up) in %s\n", *file, *day, *span, *warmup,
			time.Duration(float64(*span+*warmup) / *compress).Round(time.Second))
		r, err := capreplay.Run(ctx, capreplay.Options{Core: cl.Client, Dynamic: dyn, Trace: trace, From: from, Span: *span, Warmup: *warmup,
			Compress: *compress, Group: g, Classes: classes, Ahead: ahead, WarmInterval: 5 * time.Minute, Log: log})
		cl.Stop(context.Background())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-9s %5d %6d %8.0fs %8.0fs %8.0fs %8.1fs %7d %10.2f %10.2f %10.2f %10.2f %8d %7d\n", r.Policy, r.Pods, r.Placed, r.WaitP50, r.WaitP90, r.WaitMax, r.WaitMean, r.Waited,
			r.PaidGPUHours, r.UsedGPUHours, r.IdleGPUHours, r.WarmGPUHours, r.Machines, r.PartialGangs)
		if err := json.NewEncoder(w).Encode(r); err != nil {
			return err
		}
	}
	return nil
}
