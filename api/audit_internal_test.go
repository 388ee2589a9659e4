package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gantryhq/gantry/internal/audit"
)

// ctxStore is an audit store that, like a database, refuses a write on an
// ended context.
type ctxStore struct{ got []audit.Record }

func (s *ctxStore) AppendAudit(ctx context.Context, r audit.Record) (audit.Record, error) {
	if err := ctx.Err(); err != nil {
		return audit.Record{}, err
	}
	s.got = append(s.got, r)
	return r, nil
}
func (s *ctxStore) AuditRecords(context.Context, audit.Filter) ([]audit.Record, error) {
	return nil, nil
}
func (s *ctxStore) EachAudit(context.Context, func(audit.Record) error) error { return nil }

// TestAuditOutlivesTheClient: a mutating request whose client went away
// before the answer (its context ended) is still audited.
func TestAuditOutlivesTheClient(t *testing.T) {
	store := &ctxStore{}
	e := echo.New()
	e.Use(auditLog(store, slog.New(slog.DiscardHandler), time.Now))
	ctx, cancel := context.WithCancel(context.Background())
	e.POST("/api/v1/workloads/estimate", func(c echo.Context) error {
		cancel() // the browser navigated away while it was served
		return c.NoContent(http.StatusOK)
	})
	req := httptest.NewRequest(http.MethodPost, "/api/v1/workloads/estimate", nil).WithContext(ctx)
	e.ServeHTTP(httptest.NewRecorder(), req)
	if len(store.got) != 1 || store.got[0].Action != "POST /api/v1/workloads/estimate" {
		t.Fatalf("records %+v, want the request's", store.got)
	}
}
