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
	var profile *os.File
	if *cpuProfile != "" {
		// A new file only, readable by its owner: never one that is there.
		if profile, err = os.OpenFile(*cpuProfile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer profile.Close()
	}
	srv, err := server.New(ctx, cfg, server.Overrides{})
	if err != nil {
		return err
	}
	gcPercent, memLimit := tuneGC(os.Getenv, "/sys/fs/cgroup/memory.max")
	srv.Log.Info("starting gantry", "version", version, "gc_percent", gcPercent, "memory_limit", memLimit)
	srv.UseLogger()
	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	return srv.Run(ctx)
}
