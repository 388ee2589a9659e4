package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestLoopsRunOnTheServersClock: the policy reload loop ticks on the clock
// Run was given, not on the wall clock: an edit that takes alice out of team
// vision is not in force until the fake clock steps past the reload interval,
// and is in force after it.
func TestLoopsRunOnTheServersClock(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	policy := t.TempDir()
	for _, f := range []string{"model.conf", "roles.csv", "bindings.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "policy", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(policy, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fake := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	g := servertest.WithOverrides(t, server.Overrides{Clock: fake}, func(c *config.Config) { c.PolicyDir = policy })
	tok := g.Token("alice") // group ml-vision: a member of team vision
	launch := func() int {
		return servertest.Send(t, http.MethodPost, g.URL+"/api/v1/workloads", tok, `{"template":"dev-environment","team":"vision"}`)
	}
	if s := launch(); s != 201 {
		t.Fatalf("launch as a member of vision: %d", s)
	}
	b, _ := os.ReadFile(filepath.Join(policy, "bindings.yaml"))
	edited := strings.Replace(string(b), "  - {group: ml-vision, team: vision, role: member}\n", "", 1)
	if edited == string(b) {
		t.Fatal("bindings.yaml has no ml-vision binding to remove")
	}
	if err := os.WriteFile(filepath.Join(policy, "bindings.yaml"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	// Past the reload interval in wall time, the server's clock has not
	// moved: the old policy holds all along.
	if err := waitfor.Poll(4*time.Second, func() error {
		if s := launch(); s != 201 {
			return nil // the edit took effect (or something broke)
		}
		return errors.New("the old policy holds")
	}); err == nil {
		t.Fatal("the policy changed before the server's clock moved")
	}
	// The clock steps past the interval (again at each poll: a step before
	// the policy loop's ticker waits is lost).
	waitfor.Until(t, 30*time.Second, "the reload after the clock stepped", func() error {
		fake.Step(3 * time.Second)
		if s := launch(); s != 403 {
			return fmt.Errorf("launch answered %d, want 403", s)
		}
		return nil
	})
}

// TestNewFailsCleanly: a failure after the listener is bound (here: the
// OpenID provider does not answer) is an error, not a panic, and frees the
// port.
func TestNewFailsCleanly(t *testing.T) {
	cfg := servertest.Config(t)
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	cfg.OIDC.Issuer, cfg.OIDC.ClientID, cfg.Images.DevRegistry = "http://127.0.0.1:1", "gantry-portal", false
	_, err := server.New(context.Background(), cfg, server.Overrides{})
	if err == nil {
		t.Fatal("New succeeded with an OpenID provider that does not answer")
	}
}

// TestAPIOnTheServersClock: what the API reports by time follows the clock
// Run was given, not the wall clock: the default cost period is the fake
// clock's month, and the audit log stamps requests at the fake time.
func TestAPIOnTheServersClock(t *testing.T) {
	fake := clocktesting.NewFakeClock(time.Date(2031, 3, 15, 9, 0, 0, 0, time.UTC))
	g := servertest.WithOverrides(t, server.Overrides{Clock: fake})
	get := func(tok, path string, out any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, g.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	var costs struct{ From, To time.Time }
	get(g.Token("ada"), "/api/v1/costs", &costs)
	if !costs.From.Equal(time.Date(2031, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("the default period starts %v, want the fake clock's month", costs.From)
	}
	// A request that is audited (not a read): an estimate.
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v1/workloads/estimate", strings.NewReader(`{"template":"dev-environment","team":"vision"}`))
	req.Header.Set("Authorization", "Bearer "+g.Token("ada"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var audit struct{ Items []struct{ At time.Time } }
	get(g.Token("ada"), "/api/v1/audit?limit=5", &audit)
	if len(audit.Items) == 0 || audit.Items[0].At.Year() != 2031 {
		t.Errorf("the audit log's newest records: %+v, want them stamped in 2031", audit.Items)
	}
}
