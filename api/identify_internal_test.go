package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/gantryhq/gantry/internal/clientaddr"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
)

// sourceSeen records the source its caller's context carries.
type sourceSeen struct{ src string }

func (s *sourceSeen) AuthenticateAgent(ctx context.Context, _ string) (identity.Identity, error) {
	s.src = clientaddr.SourceFrom(ctx)
	return identity.Identity{Subject: "agent", Node: "n1"}, nil
}

func (s *sourceSeen) Authenticate(ctx context.Context, _, workload string) (identity.Identity, error) {
	s.src = clientaddr.SourceFrom(ctx)
	return identity.Identity{Subject: "run", Workload: workload}, nil
}

// TestTokenReviewsKnowTheirSource: an agent's push and a run's report reach
// their authenticators with the source they are charged to (an IPv6 /64),
// which the TokenReview budget spends per source.
func TestTokenReviewsKnowTheirSource(t *testing.T) {
	seen := &sourceSeen{}
	e := echo.New()
	e.Use(identify(credentials{}, seen, seen))
	e.POST(AgentPath, func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	e.POST("/api/v1/workloads/:id/progress", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	for _, tc := range []struct{ path, token string }{
		{AgentPath, "any-token"},
		{"/api/v1/workloads/k7f3x9q2ab/progress", runTokenShaped(t)},
	} {
		seen.src = ""
		req := httptest.NewRequest(http.MethodPost, tc.path, nil)
		req.RemoteAddr = "[2001:db8:1:2::7]:5000"
		req.Header.Set("Authorization", "Bearer "+tc.token)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != http.StatusNoContent || seen.src != "2001:db8:1:2::/64" {
			t.Errorf("%s: %d, source %q, want 204 from 2001:db8:1:2::/64", tc.path, rec.Code, seen.src)
		}
	}
}

// runTokenShaped is an unsigned token shaped as a run's (runs.IsRunToken):
// the authenticator stands in for the review.
func runTokenShaped(t *testing.T) string {
	t.Helper()
	payload := `{"aud":["` + runs.Audience + `"],"exp":4102444800,"kubernetes.io":{"namespace":"gantry-vision","pod":{"name":"job-0"}}}`
	tok := "e30." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
	if !runs.IsRunToken(tok) {
		t.Fatal("the test's token is not shaped as a run's")
	}
	return tok
}
