package kube

import (
	"context"

	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// Telemetry adapts a lazily loaded cluster to what the telemetry service
// asks of it: token reviews, pod places and acting on unhealthy GPUs.
type Telemetry struct{ Lazy *Lazy }

// ReviewToken implements telemetry.TokenReviewer.
func (t Telemetry) ReviewToken(ctx context.Context, token, audience string) (telemetry.Review, error) {
	c, err := t.Lazy.get()
	if err != nil {
		return telemetry.Review{}, err
	}
	return c.nodes.ReviewToken(ctx, token, audience)
}

// LocatePod implements telemetry.PodLocator.
func (t Telemetry) LocatePod(ctx context.Context, namespace, name string) (telemetry.PodPlace, error) {
	c, err := t.Lazy.get()
	if err != nil {
		return telemetry.PodPlace{}, err
	}
	return c.nodes.LocatePod(ctx, namespace, name)
}

// GPUUnhealthy implements telemetry.Health.
func (t Telemetry) GPUUnhealthy(ctx context.Context, node string, gpu telemetry.GPURecord, pods []telemetry.PodRef) error {
	c, err := t.Lazy.get()
	if err != nil {
		return err
	}
	return c.nodes.GPUUnhealthy(ctx, node, gpu, pods)
}

// Runs adapts a lazily loaded cluster to what run tokens ask of it.
type Runs struct{ Lazy *Lazy }

// ReviewRunToken implements runs.Reviewer.
func (r Runs) ReviewRunToken(ctx context.Context, token, audience, workload string) (runs.Review, error) {
	c, err := r.Lazy.get()
	if err != nil {
		return runs.Review{}, err
	}
	return c.ReviewRunToken(ctx, token, audience, workload)
}
