package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// TestAuditClipsWhatRequestsName: an audit record keeps a bounded part of
// the path a request named (a megabyte of it would be an append-only row of
// a megabyte), and a method no HTTP client sends is answered 501 before it
// is recorded or counted anywhere.
func TestAuditClipsWhatRequestsName(t *testing.T) {
	store := &ctxStore{}
	e := echo.New()
	e.Pre(knownMethods)
	e.Use(auditLog(store, slog.New(slog.DiscardHandler), time.Now))
	e.Any("/api/v1/*", func(c echo.Context) error { return c.NoContent(http.StatusNotFound) })
	long := "/api/v1/" + strings.Repeat("é", 100_000)
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/api/v1/x", nil))
	req := httptest.NewRequest(http.MethodPost, "/api/v1/x", nil)
	req.URL.Path = long
	e.ServeHTTP(httptest.NewRecorder(), req)
	if len(store.got) != 2 {
		t.Fatalf("records %+v, want two", store.got)
	}
	if o := store.got[1].Object; len(o) > auditObjectBytes+len("…") || !strings.HasPrefix(long, strings.TrimSuffix(o, "…")) || !utf8.ValidString(o) {
		t.Fatalf("the long path recorded as %d bytes (%.40q…), want at most %d, valid UTF-8, its start", len(o), o, auditObjectBytes)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("MADEUP"+strings.Repeat("X", 1000), "/api/v1/x", nil))
	if rec.Code != http.StatusNotImplemented || len(store.got) != 2 {
		t.Fatalf("a made-up method: %d, %d records, want 501 and none more", rec.Code, len(store.got))
	}
}
