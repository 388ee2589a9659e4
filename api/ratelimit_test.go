package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/auditlog"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// limitedEnv is Gantry whole on a fake clock (so that buckets refill and
// windows close only when the test steps it), with the default anonymous
// limit (5/s, burst 50) and denial window (1m); the bearer JWT "good" is a
// platform admin, any other is refused.
func limitedEnv(t *testing.T) (*servertest.Gantry, *clocktesting.FakeClock) {
	t.Helper()
	fake := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 21, 3, 0, 0, time.UTC))
	g := servertest.WithOverrides(t, server.Overrides{Clock: fake, Identify: func(r *http.Request) (identity.Identity, error) {
		if r.Header.Get("Authorization") == "Bearer good" {
			return identity.Identity{Issuer: "https://idp", Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
		}
		return identity.Identity{}, errors.New("not a token of this provider")
	}})
	if g.Config.Security.AnonymousRate != 5 || g.Config.Security.AnonymousBurst != 50 || g.Config.Audit.Window() != time.Minute {
		t.Fatalf("defaults changed: %+v, window %v", g.Config.Security, g.Config.Audit.Window())
	}
	return g, fake
}

// get sends GET path with the Authorization header auth (none if empty) and
// returns the status and Retry-After. Raw: a flood with missing, forged and
// valid headers, on API routes and /w/ alike, is what these tests send.
func get(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusTooManyRequests && (resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), `"status":429`)) {
		t.Errorf("429 without a problem document: %s %s", resp.Header.Get("Content-Type"), body)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

func auditLog(t *testing.T, g *servertest.Gantry) []audit.Record {
	t.Helper()
	recs, err := g.Store.AuditRecords(context.Background(), audit.Filter{Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestAnonymousFlood: 1,000 requests without credentials from one address
// get 401 for the burst and 429 after it, and the audit log grows by four
// records (the first 401, the first 429, and a summary of each when the
// window closes) instead of a thousand; the chain verifies.
func TestAnonymousFlood(t *testing.T) {
	g, fake := limitedEnv(t)
	codes := map[int]int{}
	for range 1000 {
		code, retry := get(t, g.URL+"/api/v1/workloads", "")
		codes[code]++
		if code == http.StatusTooManyRequests {
			if s, err := strconv.Atoi(retry); err != nil || s < 1 {
				t.Fatalf("429 with Retry-After %q", retry)
			}
		}
	}
	if codes[401] != 50 || codes[429] != 950 {
		t.Fatalf("answers %v, want 50 401s (the burst) and 950 429s", codes)
	}
	if recs := auditLog(t, g); len(recs) != 2 {
		t.Fatalf("%d audit records during the window, want 2 (the first of each kind)", len(recs))
	}
	// The window closes (again at each poll: a step before the denial
	// loop's ticker waits is lost; the windows after it hold no denials).
	waitfor.Until(t, 10*time.Second, "the window's summaries", func() error {
		fake.Step(time.Minute)
		if n := len(auditLog(t, g)); n != 4 {
			return fmt.Errorf("%d audit records, want 4", n)
		}
		return nil
	})
	recs := auditLog(t, g)
	want := map[int]string{401: "49 more denials like this one", 429: "949 more denials like this one"}
	for _, r := range recs[2:] {
		if r.Decision != audit.Deny || r.Actor != "anonymous" || r.Action != "GET /api/v1/workloads" || r.Source != "127.0.0.1" ||
			!strings.HasPrefix(r.Reason, want[r.Status]) || want[r.Status] == "" {
			t.Errorf("summary %+v", r)
		}
		delete(want, r.Status)
	}
	if n, problems, err := audit.Verify(context.Background(), g.Store); err != nil || len(problems) > 0 || n != 4 {
		t.Errorf("verify: %d records, %v, %v", n, problems, err)
	}
	// A minute later the bucket is full again.
	if code, _ := get(t, g.URL+"/api/v1/workloads", ""); code != http.StatusUnauthorized {
		t.Errorf("after the bucket refilled: %d, want 401", code)
	}
}

// TestLimitedSource: while an address is limited, valid credentials from it
// still work, public routes answer, and requests without credentials or with
// bad ones get 429; an address sending only bad credentials ends up limited
// too.
func TestLimitedSource(t *testing.T) {
	g, _ := limitedEnv(t)
	// Only bad credentials: each is checked, answered 401 and charged.
	codes := map[int]int{}
	for range 60 {
		code, _ := get(t, g.URL+"/api/v1/workloads", "Bearer forged")
		codes[code]++
	}
	if codes[401] != 50 || codes[429] != 10 {
		t.Fatalf("bad credentials: answers %v, want 50 401s and 10 429s", codes)
	}
	pat := g.Token("ada")
	tests := []struct {
		name, path, auth string
		want             int
	}{
		{"no credentials", "/api/v1/workloads", "", 429},
		{"no credentials, an interactive workload", "/w/abcdefghij/", "", 429},
		{"a bad bearer token", "/api/v1/workloads", "Bearer forged", 429},
		{"a bad personal access token", "/api/v1/workloads", "Bearer gnt_nope", 429},
		{"a valid bearer token", "/api/v1/workloads", "Bearer good", 200},
		{"a valid personal access token", "/api/v1/me", "Bearer " + pat, 200},
		{"health", "/healthz", "", 200},
		{"the spec", "/openapi.yaml", "", 200},
		{"sign-in configuration", "/auth/config", "", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, _ := get(t, g.URL+tc.path, tc.auth); code != tc.want {
				t.Errorf("%s: %d, want %d", tc.path, code, tc.want)
			}
		})
	}
}

// TestDenialsSummedUpAtShutdown: the denials counted in the last window are
// summed up when Gantry stops, before the store closes.
func TestDenialsSummedUpAtShutdown(t *testing.T) {
	if !server.DevBuild {
		t.Skip("Gantry whole needs the development sign-in: run the tests with -tags dev")
	}
	cfg := servertest.Config(t)
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	fake := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.New(ctx, cfg, server.Overrides{Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	for range 5 {
		if code, _ := get(t, srv.URL()+"/api/v1/templates", ""); code != http.StatusUnauthorized {
			t.Fatalf("without credentials: %d, want 401", code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.SQLite, string(cfg.Database.DSN))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := auditlog.New(st).AuditRecords(context.Background(), audit.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Reason != "not authenticated" || !strings.HasPrefix(recs[1].Reason, "4 more denials like this one") {
		t.Fatalf("after stopping: %+v, want the first denial and a summary of 4 more", recs)
	}
}
