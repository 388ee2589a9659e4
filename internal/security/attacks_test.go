package security

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/servertest"
)

// world is what every attack starts from: one server, everyone signed in
// with a browser and holding a full personal access token, ada's probe
// template and alice's notebook.
type world struct {
	g        *gantry
	ses      map[string]*client // signed-in browsers, by username
	tok      map[string]token   // full tokens, by username
	api      map[string]*client // scripts with those tokens
	readOnly token              // alice's read-only token
	notebook string             // alice's dev-environment workload in team vision
	nlp      string             // nina's dev-environment workload in team nlp
	issuer   string             // the OpenID provider, from /auth/config
	idToken  string             // alice's ID token from the provider (device grant, as gantry login gets it)
}

// TestAttacks runs one `gantry serve` and replays every attack against it,
// in order (some change what later ones see: a flood, a deactivation), then
// stops it and checks its audit log and its log.
func TestAttacks(t *testing.T) {
	g := start(t)
	slow := g.openSlowHeaders(t) // checked in "slow and huge headers", once ReadHeaderTimeout has passed
	w := &world{g: g, ses: map[string]*client{}, tok: map[string]token{}, api: map[string]*client{}}
	for _, u := range []string{"alice", "lee", "pat", "ada", "vic"} {
		w.ses[u] = g.signIn(t, u, u) // development passwords equal the usernames
	}
	w.ses["nina"] = g.signIn(t, outsider.Username, string(outsider.Password))
	for u, s := range w.ses {
		w.tok[u] = s.token(t, map[string]any{"name": "security-probe", "expiresInDays": 1})
		w.api[u] = g.bearerClient(t, w.tok[u].Secret)
	}
	w.readOnly = w.ses["alice"].token(t, map[string]any{"name": "read-only probe", "expiresInDays": 1, "readOnly": true})
	var ac struct{ Issuer string }
	w.api["alice"].call(t, "GET", "/auth/config", nil).decode(t, &ac)
	w.issuer = ac.Issuer

	if r := w.api["ada"].call(t, "POST", "/api/v1/templates", probeTemplate("sec-probe")); r.status != http.StatusCreated {
		t.Fatalf("ada creates the probe template: %s", r)
	}
	r := w.api["alice"].call(t, "POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "vision"})
	var nb workload
	if r.status != http.StatusCreated {
		t.Fatalf("alice launches dev-environment in vision: %s", r)
	}
	r.decode(t, &nb)
	if nb.Kind != "notebook" || nb.Status != "Pending" {
		t.Fatalf("alice's notebook: %s; want a Pending notebook (no cluster: launches are recorded)", r)
	}
	w.notebook = nb.ID
	r = w.api["nina"].call(t, "POST", "/api/v1/workloads", map[string]any{"template": "dev-environment", "team": "nlp"})
	if r.status != http.StatusCreated {
		t.Fatalf("nina launches dev-environment in nlp: %s", r)
	}
	r.decode(t, &nb)
	w.nlp = nb.ID
	w.idToken = g.deviceSignIn(t, "alice", "alice")

	for _, a := range []struct {
		name string
		run  func(*testing.T, *world)
	}{
		{"open redirect after sign-in", testOpenRedirect},
		{"team-narrowed token of a platform admin", testNarrowedAdminToken},
		{"read-only token", testReadOnlyToken},
		{"preview refuses what launch refuses", testPreviewRefusesWhatLaunchRefuses},
		{"undeclared api paths", testUndeclaredPaths},
		{"oversized bodies", testOversizedBodies},
		{"duplicate JSON keys", testDuplicateKeys},
		{"deep and wide JSON bodies", testDeepBodies},
		{"quantities with huge exponents", testHugeExponents},
		{"forged JWTs", testForgedJWTs},
		{"another team's workload", testAnotherTeamsWorkload},
		{"notebook proxy", testNotebookProxy},
		{"CSRF", testCSRF},
		{"template injection through parameters", testTemplateInjection},
		{"revoked template version", testRevokedVersion},
		{"anonymous flood", testAnonymousFlood},
		{"streams end with their credential", testStreamsEndWithTheirCredential},
		{"second factor for platform work", testSecondFactor},
		{"the portal offers what one may do", testPortalShowsWhatOneMayDo},
		{"deactivated user", testDeactivatedUser},
		{"slow and huge headers", func(t *testing.T, w *world) { testHeaders(t, w, slow) }},
	} {
		t.Run(a.name, func(t *testing.T) { a.run(t, w) })
	}

	g.stop(t)
	t.Run("audit chain intact", func(t *testing.T) { testAuditChain(t, g) })
	t.Run("no secrets in the log", func(t *testing.T) { testNoSecretsInLog(t, g) })
}

// workload is what the tests read of a workload.
type workload struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Status string `json:"status"`
	Owner  string `json:"owner"`
	Team   string `json:"team"`
}

// probeTemplate is a job template of ada's whose parameters reach a quantity
// (mem → resources.memory) and free text (note → an environment variable
// and an argument), with no pattern: what injection attempts aim at.
func probeTemplate(name string) map[string]any {
	return map[string]any{
		"apiVersion": "gantry.dev/v1alpha1", "kind": "Template",
		"metadata": map[string]any{"name": name, "title": "Security probe"},
		"spec": map[string]any{
			"workload": "job", "image": "pytorch:25.01-py3",
			"gpu":       map[string]any{"classes": []string{"L4"}, "defaultClass": "L4", "count": map[string]any{"min": 1, "max": 1, "default": 1}},
			"resources": map[string]any{"cpu": "1", "memory": "{{mem}}"},
			"env":       []any{map[string]any{"name": "NOTE", "value": "{{note}}"}},
			"command":   []string{"echo"},
			"args":      []string{"{{note}}"},
			"parameters": []any{
				map[string]any{"name": "note", "type": "string", "default": "hello"},
				map[string]any{"name": "mem", "type": "string", "default": "1Gi"},
			},
		},
	}
}

// with returns doc with the value at a dotted path replaced.
func with(doc map[string]any, path string, v any) map[string]any {
	keys := strings.Split(path, ".")
	m := doc
	for _, k := range keys[:len(keys)-1] {
		m = m[k].(map[string]any)
	}
	m[keys[len(keys)-1]] = v
	return doc
}

// wantStatus fails unless r has status want and, for an error, is a
// problem+json document; it returns the problem (zero for a success).
func wantStatus(t *testing.T, what string, r reply, want int) problem {
	t.Helper()
	if r.status != want {
		t.Errorf("%s: %s; want %d", what, r, want)
		return problem{}
	}
	if want < 400 {
		return problem{}
	}
	return r.problem(t)
}

// userID finds the id of the user with subject in a GET /api/v1/users answer.
func userID(t *testing.T, r reply, subject string) string {
	t.Helper()
	var list struct {
		Items []struct {
			ID, Subject string
			Active      bool
		}
	}
	if r.status != http.StatusOK {
		t.Fatalf("list users: %s", r)
	}
	r.decode(t, &list)
	for _, u := range list.Items {
		if u.Subject == subject {
			return u.ID
		}
	}
	t.Fatalf("no user with subject %s in %s", subject, r)
	return ""
}

// templateStatus is the status of one version of a template.
func templateStatus(t *testing.T, c *client, name string, version int) string {
	t.Helper()
	r := c.call(t, "GET", fmt.Sprintf("/api/v1/templates/%s?version=%d", name, version), nil)
	if r.status != http.StatusOK {
		t.Fatalf("read %s version %d: %s", name, version, r)
	}
	var v struct{ Status string }
	r.decode(t, &v)
	return v.Status
}

// workloadStatus reads a workload's status as c.
func workloadStatus(t *testing.T, c *client, id string) string {
	t.Helper()
	r := c.call(t, "GET", "/api/v1/workloads/"+id, nil)
	if r.status != http.StatusOK {
		t.Fatalf("read workload %s: %s", id, r)
	}
	var wl workload
	r.decode(t, &wl)
	return wl.Status
}

// 19. After all of that, the audit log's hash chain is intact, and agrees
// with the checkpoints the server signed into its log.
func testAuditChain(t *testing.T, g *gantry) {
	logFile := filepath.Join(g.dir, "gantry.log")
	if err := os.WriteFile(logFile, []byte(g.p.Log.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(g.dir, "data", "gantry", "dev-audit-checkpoint.pub")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"hash chain", []string{"audit", "verify", "--db", g.db}, "audit log intact"},
		{"against the logged checkpoints", []string{"audit", "verify", "--db", g.db, "--checkpoints", logFile, "--key", pub}, "matches"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(servertest.Binary(t), c.args...)
			cmd.Env = servertest.Env(g.env...)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), c.want) {
				t.Errorf("gantry %s: %v\n%s", strings.Join(c.args, " "), err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// 16. No secret the run handled is in the server's log: tokens, session
// cookies, CSRF tokens, passwords, ID tokens.
func testNoSecretsInLog(t *testing.T, g *gantry) {
	log := g.p.Log.String()
	if !strings.Contains(log, `msg=request`) {
		t.Fatalf("the log has no access log lines: is it the server's?\n%.2000s", log)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.secrets) < 20 {
		t.Fatalf("only %d secrets collected: the check would prove little", len(g.secrets))
	}
	for s, what := range g.secrets {
		if strings.Contains(log, s) {
			t.Errorf("the log carries %s", what)
		}
	}
	t.Logf("%d secrets, none in %d bytes of log", len(g.secrets), len(log))
}
