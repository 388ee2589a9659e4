package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/labstack/echo/v4"
)

// TestClosedBy: a request whose live connection the registry closed answers
// with the refusal that closed it — the workload's own fault, else 401 (not
// an echo 401, which the rate limiter charges as an anonymous failure) —
// while one the client gave up on, one already answered, or one that failed
// otherwise keeps its error.
func TestClosedBy(t *testing.T) {
	notRunning := &fault.Conflict{Kind: "workload", Name: "w1", Reason: "is Pending: it opens once it is Running"}
	closed := func(refusal error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(fmt.Errorf("%w: %w", live.ErrClosed, refusal))
		return ctx
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	canceled := fmt.Errorf("read workload w1: %w", context.Canceled)
	other := errors.New("disk on fire")
	for _, tc := range []struct {
		name        string
		ctx, client context.Context
		committed   bool
		err         error
		status      int // the answer's status through the one mapping
	}{
		{"closed: the workload not running", closed(notRunning), context.Background(), false, canceled, http.StatusConflict},
		{"closed: the workload hidden now", closed(&fault.NotFound{Kind: "workload", Name: "w1"}), context.Background(), false, canceled, http.StatusNotFound},
		{"closed: the token revoked", closed(errors.New("token revoked")), context.Background(), false, canceled, http.StatusUnauthorized},
		{"closed once answered", closed(notRunning), context.Background(), true, canceled, 499},
		{"the client gone", closed(notRunning), gone, false, canceled, 499},
		{"cancelled otherwise", gone, context.Background(), false, canceled, 499},
		{"another error", closed(notRunning), context.Background(), false, other, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := closedBy(tc.ctx, tc.client, tc.committed, tc.err)
			if status, _ := problemFor(got); status != tc.status {
				t.Fatalf("%v: status %d, want %d", got, status, tc.status)
			}
		})
	}
	if closedBy(closed(notRunning), context.Background(), false, nil) != nil {
		t.Fatal("no error became one")
	}
	var he *echo.HTTPError
	if errors.As(closedBy(closed(errors.New("x")), context.Background(), false, canceled), &he) {
		t.Fatal("a credential's refusal is an echo error, which the rate limiter charges to the address")
	}
}
