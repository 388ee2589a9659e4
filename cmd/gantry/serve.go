package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/server"
)

func loadConfig(path string, f config.Flags) (config.Config, error) {
	if path == "" {
		path = os.Getenv("GANTRY_CONFIG")
	}
	return config.Load(path, os.LookupEnv, f)
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flags("gantry serve", stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML); also $GANTRY_CONFIG")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (go tool pprof) to this file until the server stops: for measuring it under load")
	flagValues := config.FlagSet(fs) // every option with a flag (docs/configuration.md)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, flagValues())
	if err != nil {
		return err
	}
	server.UseLogger(cfg.Logger()) // before the cluster's clients log
	srv, err := server.New(ctx, cfg, server.Overrides{})
	if err != nil {
		return err
	}
	gcPercent, memLimit := tuneGC(os.Getenv, "/sys/fs/cgroup/memory.max")
	srv.Log.Info("starting gantry", "version", version, "gc_percent", gcPercent, "memory_limit", memLimit)
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	return srv.Run(ctx)
}

// startCPUProfile writes a CPU profile to path until stop is called, for
// --cpuprofile; with path "", it does nothing. The file must be new, and is
// readable by its owner only: never one that is there.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
