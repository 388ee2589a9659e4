package faultsuite_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
)

// retryingClient launches as a client that tries again on 503 would, and
// counts what the database faults made of it.
type retryingClient struct {
	api *client.ClientWithResponses
	// limit is how long one launch may take before the test fails; pause
	// the client's wait between tries.
	limit, pause time.Duration
	// refusals counts 503s (the database away: try again); others every
	// other answer that is not a launch (each logged).
	refusals, others atomic.Int64
}

// launch launches dev-environment for team vision under key until it is
// accepted (201, or 200 for a key seen before) and says whether it was.
func (c *retryingClient) launch(ctx context.Context, t *testing.T, key string) bool {
	began := time.Now()
	for try := 0; ; try++ {
		r, err := c.api.CreateWorkloadWithResponse(ctx, &model.CreateWorkloadParams{IdempotencyKey: &key}, model.LaunchRequest{Template: "dev-environment", Team: "vision"})
		if err != nil {
			t.Error(err)
			return false
		}
		if r.StatusCode() == 201 || r.StatusCode() == 200 {
			return true
		}
		if r.StatusCode() == 503 {
			c.refusals.Add(1)
		} else {
			c.others.Add(1)
			t.Logf("launch %s: %d %s", key, r.StatusCode(), r.Body)
		}
		if time.Since(began) > c.limit {
			t.Errorf("launch %s not accepted in %v (%d tries)", key, c.limit, try)
			return false
		}
		time.Sleep(c.pause) // a client's pause before it tries again
	}
}
