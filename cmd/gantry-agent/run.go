package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/node/nodegpu"
	"github.com/gantryhq/gantry/internal/node/podresources"
	"github.com/gantryhq/gantry/internal/replay"
)

// runAgent is `gantry-agent run`: the DaemonSet's loop until ctx ends.
func runAgent(ctx context.Context, args []string, lib nodegpu.Metrics, stderr io.Writer) int {
	fs := flag.NewFlagSet("gantry-agent run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := fs.String("node", os.Getenv("NODE_NAME"), "this node's name (env NODE_NAME, from the downward API)")
	gantryURL := fs.String("gantry-url", os.Getenv("GANTRY_URL"), "Gantry's URL to push to (env GANTRY_URL); empty: /metrics only")
	caFile := fs.String("ca-file", os.Getenv("GANTRY_CA_FILE"), "PEM CA certificate(s) that Gantry's HTTPS certificate must chain to (env GANTRY_CA_FILE); empty: the system's")
	tokenFile := fs.String("token-file", "/var/run/secrets/gantry/token", "the projected ServiceAccount token (audience gantry)")
	interval := fs.Duration("interval", agent.DefaultInterval, "time between samples")
	listen := fs.String("listen", ":9400", "address for /metrics and /healthz")
	socket := fs.String("pod-resources-socket", podresources.DefaultSocket, "the kubelet's PodResources socket; empty: readings are not attributed to pods")
	podLogs := fs.String("pod-logs", podresources.DefaultPodLogs, "the kubelet's pod log directory, whose entry names map pods to their UIDs for per-process attribution of shared GPUs; empty: no per-process attribution")
	proc := fs.String("proc", "/proc", "the proc filesystem in which NVML's process ids are read (/proc/<pid>/cgroup names the pod); needs the host's PID namespace")
	buffer := fs.Int("buffer", agent.DefaultBuffer, "readings kept while Gantry is away (the oldest are dropped past it)")
	replayProfile := fs.String("replay", "", "no NVML: simulate one GPU playing this replay profile ("+strings.Join(replay.Names(), ", ")+")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	fail := func(err error) int {
		log.Error("gantry-agent", "err", err)
		return 1
	}
	if *node == "" {
		return fail(errors.New("--node (or NODE_NAME) is required"))
	}
	if *interval < time.Second || *interval > 10*time.Minute {
		return fail(fmt.Errorf("--interval %s must be between 1s and 10m", *interval))
	}
	var gpus agent.GPUs
	if *replayProfile != "" {
		p, err := replay.Lookup(*replayProfile, *node)
		if err != nil {
			return fail(err)
		}
		n := replay.NewNode([]replay.GPU{{UUID: "GPU-replay-" + *node, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}})
		n.Play("GPU-replay-"+*node, p, time.Now(), 1)
		gpus = n
	} else {
		r, err := nodegpu.Open(lib)
		if errors.Is(err, nodegpu.ErrNoDriver) {
			return fail(errors.New("no NVIDIA driver on this node (NVML library not found): run the agent on GPU nodes only (nodeSelector nvidia.com/gpu.present=true)"))
		}
		if err != nil {
			return fail(err)
		}
		defer r.Close()
		gpus = r
	}
	o := agent.Options{Node: *node, GPUs: gpus, Interval: *interval, Buffer: *buffer, Log: log, Version: version, Procs: agent.CgroupPods{Proc: *proc}}
	if *socket != "" {
		c, err := podresources.Dial(*socket)
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		c.PodLogs = *podLogs
		o.Pods = c
	}
	if *gantryURL != "" {
		sink, err := agent.NewHTTPSink(*gantryURL, *tokenFile, *caFile)
		if err != nil {
			return fail(err)
		}
		if strings.HasPrefix(*gantryURL, "http://") {
			log.Warn("pushing to Gantry over plain HTTP: the node's token and readings cross the network unencrypted; give Gantry a certificate (tls.certFile) and the agent its CA (--ca-file)", "gantry", *gantryURL)
		}
		o.Sink = sink
	}
	a, err := agent.New(o)
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail(fmt.Errorf("listen: %w", err))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", a.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("gantry-agent running", "node", *node, "listen", ln.Addr().String(), "gantry", *gantryURL, "interval", interval.String(), "version", version)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.Run(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	log.Info("gantry-agent stopped")
	return 0
}
