package portal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
)

// finishing is a Sessions whose Finish fails with err.
type finishing struct{ err error }

func (f finishing) Begin(context.Context, string, bool) (string, string, error) { return "", "", nil }
func (f finishing) Finish(context.Context, weblogin.Callback) (string, weblogin.Session, string, error) {
	return "", weblogin.Session{}, "", f.err
}
func (f finishing) Authenticate(context.Context, string) (weblogin.Session, error) {
	return weblogin.Session{}, weblogin.ErrNoSession
}
func (f finishing) End(context.Context, string) error { return nil }

type records []audit.Record

func (r *records) AppendAudit(_ context.Context, rec audit.Record) (audit.Record, error) {
	*r = append(*r, rec)
	return rec, nil
}

// TestCallbackRefusals: a refused sign-in says what the person can do — a
// bad link: start again (400); a deactivated account: ask an admin (400);
// Gantry failing to record it: try again shortly (503) — never why in
// detail, and each is audited as a denial with the reason.
func TestCallbackRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		says   string
	}{
		{"bad link", fmt.Errorf("%w: unknown or already used state", weblogin.ErrFailed), 400, "the sign-in link is invalid"},
		{"deactivated", fmt.Errorf("%w: %w", weblogin.ErrFailed, user.ErrDeactivated), 400, "your account is deactivated"},
		{"not recorded", errors.New("record the user: the database (connection lost) unavailable"), 503, "could not record it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var audited records
			h, err := New(Options{Now: time.Now, Sessions: finishing{tc.err}, Audit: &audited, Logger: slog.New(slog.DiscardHandler),
				Teams: func(identity.Identity, access.Permission) (bool, []string) { return false, nil }})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/auth/callback?state=s&code=c", nil))
			body, _ := io.ReadAll(rec.Result().Body)
			if rec.Code != tc.status || !strings.Contains(string(body), tc.says) || strings.Contains(string(body), "connection lost") {
				t.Errorf("%d, page %q; want %d saying %q and no detail", rec.Code, body, tc.status, tc.says)
			}
			if len(audited) != 1 || audited[0].Decision != audit.Deny || audited[0].Status != tc.status || audited[0].Reason != tc.err.Error() {
				t.Errorf("audited %+v", audited)
			}
		})
	}
}
