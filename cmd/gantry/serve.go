package main

import (
	"context"
	"io"
	"os"

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
	var f config.Flags
	fs.StringVar(&f.Listen, "listen", "", "address to listen on (loopback only), e.g. 127.0.0.1:8080")
	fs.StringVar(&f.Driver, "db-driver", "", "database driver: sqlite or postgres")
	fs.StringVar(&f.DSN, "db", "", "database: SQLite file or PostgreSQL URL")
	fs.StringVar(&f.LogLevel, "log-level", "", "debug, info, warn or error")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "cluster to apply workloads to (default: record them only)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, f)
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	srv.Log.Info("starting gantry", "version", version)
	srv.UseLogger()
	return srv.Run(ctx)
}
