// Command gantry-agent runs on GPU nodes and reads the node's GPUs through NVML
// (the only cgo binary of Gantry). Verbs: run (the DaemonSet's: sample every
// interval, attribute devices to pods through the kubelet, serve /metrics
// under dcgm-exporter's names, push to Gantry), probe (print a snapshot of
// the node's GPUs as JSON, mapped to Gantry's GPU classes) and check (the
// preflight check of a quarantined node: exit 0 only when every GPU is
// healthy).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/node/nodegpu"
)

func main() {
	os.Exit(run(os.Args[1:], nvml.New(), os.Stdout, os.Stderr))
}

// version is set at build time (-ldflags -X main.version=…).
var version = "dev"

// probeReport is what probe prints: one snapshot per sample, and the Gantry GPU
// class each device maps to.
type probeReport struct {
	Samples []nodegpu.Snapshot `json:"samples"`
	Classes map[string]string  `json:"classes"` // device UUID -> Gantry GPU class ("" if none)
}

func run(args []string, lib nodegpu.Metrics, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "run" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		return runAgent(ctx, args[1:], lib, stderr)
	}
	if len(args) > 0 && args[0] == "check" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		return check(ctx, args[1:], lib, stdout, stderr)
	}
	if len(args) == 0 || args[0] != "probe" {
		fmt.Fprintln(stderr, "usage: gantry-agent run [flags] | probe [--gpu-classes FILE] [--samples N] [--interval D] | check [--watch D]")
		return 2
	}
	fs := flag.NewFlagSet("gantry-agent probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	classesFile := fs.String("gpu-classes", "templates/gpu-classes.yaml", "Gantry GPU class file")
	samples := fs.Int("samples", 1, "number of snapshots")
	interval := fs.Duration("interval", time.Second, "time between snapshots")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *samples < 1 || *samples > 3600 {
		fmt.Fprintln(stderr, "gantry-agent: --samples must be between 1 and 3600")
		return 2
	}
	classes, err := gpu.LoadFile(*classesFile)
	if err != nil {
		fmt.Fprintf(stderr, "gantry-agent: %v\n", err)
		return 1
	}
	rep := probeReport{Classes: map[string]string{}}
	for i := 0; i < *samples; i++ {
		if i > 0 {
			time.Sleep(*interval)
		}
		s, err := nodegpu.Read(lib)
		if err != nil {
			if errors.Is(err, nodegpu.ErrNoDriver) {
				fmt.Fprintln(stderr, "gantry-agent: no NVIDIA driver on this node (NVML library not found)")
			} else {
				fmt.Fprintf(stderr, "gantry-agent: %v\n", err)
			}
			return 1
		}
		rep.Samples = append(rep.Samples, s)
	}
	for _, d := range rep.Samples[0].Devices {
		rep.Classes[d.UUID] = classes.ForProduct(d.Product)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintf(stderr, "gantry-agent: %v\n", err)
		return 1
	}
	return 0
}

// check is the preflight check: every GPU's state through NVML, then the
// critical events for --watch; it prints the report as JSON and exits 0
// when every GPU is healthy, 1 when one is not (or NVML cannot be read).
func check(ctx context.Context, args []string, lib nodegpu.Metrics, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry-agent check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	watch := fs.Duration("watch", 30*time.Second, "how long to watch for critical events (XIDs, double-bit ECC errors)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *watch < 0 || *watch > time.Hour {
		fmt.Fprintln(stderr, "gantry-agent: --watch must be between 0s and 1h")
		return 2
	}
	r, err := nodegpu.Open(lib)
	if err != nil {
		fmt.Fprintf(stderr, "gantry-agent: %v\n", err)
		return 1
	}
	defer r.Close()
	rep, err := nodegpu.Check(ctx, r, *watch, func(ctx context.Context, d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	})
	if err != nil {
		fmt.Fprintf(stderr, "gantry-agent: check: %v\n", err)
		return 1
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintf(stderr, "gantry-agent: %v\n", err)
		return 1
	}
	if !rep.Healthy {
		fmt.Fprintln(stderr, "gantry-agent: check: a GPU is unhealthy (or none was found): the node stays quarantined")
		return 1
	}
	return 0
}
