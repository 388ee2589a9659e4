package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestAdminVerbs: nodes, users and the audit log from the CLI, as a platform
// admin with a token; a team-admin is refused with the server's reason.
func TestAdminVerbs(t *testing.T) {
	g := startGantry(t)
	admin, lee := g.Token("ada"), g.Token("lee")
	t.Setenv("GANTRY_SERVER", g.URL)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cli := func(token string, args ...string) (int, string, string) {
		t.Setenv("GANTRY_TOKEN", token)
		var o, e bytes.Buffer
		code := run(context.Background(), args, &o, &e)
		return code, o.String(), e.String()
	}
	code, out, errOut := cli(admin, "users", "ls", "-o", "json")
	var users []struct {
		ID, Subject string
		Active      bool
	}
	if err := json.Unmarshal([]byte(out), &users); code != 0 || err != nil {
		t.Fatalf("users ls: %d %q %q", code, out, errOut)
	}
	leeID := ""
	for _, u := range users {
		if u.Subject == "dev-lee" {
			leeID = u.ID
		}
	}
	if leeID == "" {
		t.Fatalf("users ls has no dev-lee: %s", out)
	}
	if code, out, _ := cli(admin, "users", "ls"); code != 0 || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "Lee Park") {
		t.Fatalf("users ls as a table, with the provider's names: %d %q", code, out)
	}
	if code, out, errOut := cli(admin, "users", "deactivate", leeID); code != 0 || !strings.Contains(out, "deactivated") {
		t.Fatalf("users deactivate: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(lee, "ls"); code != 1 || !strings.Contains(errOut, "deactivated") {
		t.Fatalf("a deactivated user's token: %d %q", code, errOut)
	}
	if code, out, _ := cli(admin, "users", "reactivate", leeID); code != 0 || !strings.Contains(out, "active") {
		t.Fatalf("users reactivate: %d %q", code, out)
	}
	if code, out, _ := cli(admin, "audit", "ls", "--decision", "deny"); code != 0 || !strings.HasPrefix(out, "SEQ ") || !strings.Contains(out, "deactivated") {
		t.Fatalf("audit ls: %d %q", code, out)
	}
	if code, out, _ := cli(admin, "nodes", "ls"); code != 0 || !strings.HasPrefix(out, "NODE ") {
		t.Fatalf("nodes ls: %d %q", code, out)
	}
	if code, _, errOut := cli(admin, "nodes", "get", "no-such-node"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("nodes get of a node no agent reports: %d %q", code, errOut)
	}
	// The node groups, and a class's forecast with the reserved-size advice
	// (no launches of H200 yet: said in its place).
	if code, out, errOut := cli(admin, "nodes", "groups"); code != 0 || !strings.HasPrefix(out, "GROUP ") || !strings.Contains(out, "h100-on-demand  H100-80GB  on-demand") {
		t.Fatalf("nodes groups: %d %q %q", code, out, errOut)
	}
	// A node group changed over its file, and back.
	if code, out, errOut := cli(admin, "nodes", "set-group", "h100-spot", "--max", "4", "--quiet", "2m"); code != 0 || !strings.Contains(out, "node group h100-spot changed: max 4, 36.00 a machine-hour, boot 180s, quiet 120s, never warmed") {
		t.Fatalf("nodes set-group: %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli(admin, "nodes", "groups"); !strings.Contains(out, "h100-spot       H100-80GB  spot       8             0-4") {
		t.Fatalf("nodes groups after set-group: %d %q", code, out)
	}
	if code, _, errOut := cli(admin, "nodes", "set-group", "h100-reserved", "--max", "4"); code != 1 || !strings.Contains(errOut, "max: a reserved group") {
		t.Fatalf("set-group of a reserved group's max: %d %q", code, errOut)
	}
	if code, _, errOut := cli(lee, "nodes", "set-group", "h100-spot", "--max", "9"); code != 1 || !strings.Contains(errOut, "gpu-classes:write") {
		t.Fatalf("set-group as a team-admin: %d %q", code, errOut)
	}
	if code, _, errOut := cli(admin, "nodes", "reset-group", "h100-spot"); code != 0 {
		t.Fatalf("nodes reset-group: %d %q", code, errOut)
	}
	if _, out, _ := cli(admin, "nodes", "groups"); !strings.Contains(out, "h100-spot       H100-80GB  spot       8             0-2") {
		t.Fatalf("nodes groups after reset-group: %q", out)
	}
	if code, out, errOut := cli(admin, "forecast", "show", "--class", "H200-141GB", "--horizon", "30m"); code != 0 ||
		!strings.HasPrefix(out, "H200-141GB: 0.0 GPUs wanted now (from 0 launches)\nAT ") || strings.Count(out, "\n") != 6 || !strings.Contains(out, "reserved: ") || !strings.Contains(out, "no launches of H200-141GB") {
		t.Fatalf("forecast show: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(admin, "forecast", "show", "--class", "H200-141GB", "--step", "2h"); code != 1 || !strings.Contains(errOut, "stepMinutes") {
		t.Fatalf("forecast show with a 2h step: %d %q", code, errOut)
	}
	if code, _, errOut := cli(lee, "users", "ls"); code != 1 || !strings.Contains(errOut, "users:manage") {
		t.Fatalf("users ls as a team-admin: %d %q", code, errOut)
	}
	if code, _, errOut := cli(admin, "users"); code != 2 || !strings.Contains(errOut, "gantry users ls") {
		t.Fatalf("users without a subcommand: %d %q", code, errOut)
	}
}

// TestOpen: gantry open names where a notebook opens (this server's /w/{id}/)
// once it runs, and says why not before, or for what is not a notebook.
func TestOpen(t *testing.T) {
	g := startGantry(t)
	t.Setenv("GANTRY_TOKEN", g.Token("alice"))
	t.Setenv("GANTRY_SERVER", g.URL)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cli := func(args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := run(context.Background(), args, &o, &e)
		return code, o.String(), e.String()
	}
	code, out, errOut := cli("launch", "dev-environment", "--team", "vision")
	m := regexp.MustCompile(`^launched ([a-z0-9]+) `).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("launch: %d %q %q", code, out, errOut)
	}
	w := struct{ ID string }{m[1]}
	if code, _, errOut := cli("open", w.ID); code != 1 || !strings.Contains(errOut, "opens once it is Running") {
		t.Fatalf("open before it runs: %d %q", code, errOut)
	}
	if _, err := g.Store.UpdateWorkload(context.Background(), w.ID, func(old workload.Workload) (workload.Workload, error) {
		old.Status = workload.Running
		return old, nil
	}); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli("open", w.ID); code != 0 || out != g.URL+"/w/"+w.ID+"/\n" {
		t.Fatalf("open: %d %q %q", code, out, errOut)
	}
}

// TestUsageForBuild: the production build's table (and so its help and
// completions) does not offer gantry dev, which it lacks; it still runs it,
// to say so (nodev.go).
func TestUsageForBuild(t *testing.T) {
	if c := find(table(false), "dev"); c == nil || !c.hidden {
		t.Error("the production build offers gantry dev, or cannot say it lacks it")
	}
	if c := find(table(true), "dev"); c == nil || c.hidden {
		t.Error("the development build does not offer gantry dev")
	}
	if got := strings.Contains(usage(), "gantry dev "); got != server.DevBuild {
		t.Errorf("this build's help lists gantry dev: %v; it has it: %v", got, server.DevBuild)
	}
}

// TestPrintable: what the server stored from a request path or a provider
// (an escape sequence, a bell) reaches the terminal escaped.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"Alice Moreau <alice@example.com>": "Alice Moreau <alice@example.com>",
		"/api/v1/\x1b]52;c;ZXZpbA==\x07":   `/api/v1/\x1b]52;c;ZXZpbA==\x07`,
		"line\nbreak":                      `line\x0abreak`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestClustersVerb: `gantry nodes clusters` lists the worker clusters and,
// under them, each team's use per cluster beside its quota in force and
// its cap there (this test's workers have no credentials: nothing in use).
func TestClustersVerb(t *testing.T) {
	g := startGantry(t, func(c *config.Config) {
		c.ClustersFile = filepath.Join(filepath.Dir(c.GPUClassesFile), "clusters.yaml")
	})
	t.Setenv("GANTRY_SERVER", g.URL)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("GANTRY_TOKEN", g.Token("ada"))
	var o, e bytes.Buffer
	if code := run(context.Background(), []string{"nodes", "clusters"}, &o, &e); code != 0 {
		t.Fatalf("nodes clusters: %d %q", code, e.String())
	}
	out := o.String()
	tables := strings.Split(out, "\n\n")
	if len(tables) != 2 || !strings.HasPrefix(tables[0], "CLUSTER ") || !strings.Contains(tables[0], "onprem-a100") {
		t.Fatalf("two tables, clusters first:\n%s", out)
	}
	use := strings.Split(strings.TrimSpace(tables[1]), "\n")
	if !regexp.MustCompile(`^TEAM +CLASS +QUOTA +ON ONPREM-A100 +ON CLOUD-EAST +IN ALL$`).MatchString(use[0]) {
		t.Errorf("the use table's head: %q", use[0])
	}
	for _, want := range []string{`^nlp +\* +4 +0 +0 +0$`, `^nlp +H100-80GB +4 +0 +0 \(cap 16\) +0$`, `^vision +H100-80GB +8 +0 +0 +0$`} {
		found := false
		for _, l := range use[1:] {
			found = found || regexp.MustCompile(want).MatchString(l)
		}
		if !found {
			t.Errorf("no row %s in\n%s", want, tables[1])
		}
	}
}
