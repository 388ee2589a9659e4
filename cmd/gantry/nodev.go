//go:build !dev

package main

import (
	"context"
	"errors"
	"io"
)

// devCmd is not in production builds: the local cluster, the development
// sign-in and the development registry come with -tags dev.
func devCmd(context.Context, []string, io.Writer, io.Writer) error {
	return errors.New("gantry dev is not in this build: run make dev (or go run -tags dev ./cmd/gantry dev)")
}

// capacityReplayCmd needs the local cluster: -tags dev.
func capacityReplayCmd(context.Context, []string, io.Writer, io.Writer) error {
	return errors.New("gantry capacity replay is not in this build: it runs a local cluster (go run -tags dev ./cmd/gantry capacity replay)")
}
