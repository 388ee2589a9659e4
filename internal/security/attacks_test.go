package security

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/servertest"
)

// world is what every attack starts from: one server, everyone signed in
// with a browser and holding a full personal access token, ada's probe
// template and alice's notebook.
type world struct {
	g        *gantry
	ses      map[string]*client            // signed-in browsers, by username
	tok      map[string]model.TokenCreated // full tokens, by username
	api      map[string]*client            // scripts with those tokens
	readOnly model.TokenCreated            // alice's read-only token
	notebook string                        // alice's dev-environment workload in team vision
	nlp      string                        // nina's dev-environment workload in team nlp
	issuer   string                        // the OpenID provider, from /auth/config
	idToken  string                        // alice's ID token from the provider (device grant, as gantry login gets it)
}

// TestAttacks runs one `gantry serve` and replays every attack against it,
// in order (some change what later ones see: a flood, a deactivation), then
// stops it and checks its audit log and its log.
func TestAttacks(t *testing.T) {
	g := start(t)
	slow := g.openSlowHeaders(t) // checked in "slow and huge headers", once ReadHeaderTimeout has passed
	w := &world{g: g, ses: map[string]*client{}, tok: map[string]model.TokenCreated{}, api: map[string]*client{}}
	for _, u := range []string{"alice", "lee", "pat", "ada", "vic"} {
		w.ses[u] = g.signIn(t, u, u) // development passwords equal the usernames
	}
	w.ses["nina"] = g.signIn(t, outsider.Username, string(outsider.Password))
	for u, s := range w.ses {
		w.tok[u] = s.token(t, model.TokenRequest{Name: "security-probe", ExpiresInDays: 1})
		w.api[u] = g.bearerClient(t, w.tok[u].Token)
	}
	w.readOnly = w.ses["alice"].token(t, model.TokenRequest{Name: "read-only probe", ExpiresInDays: 1, ReadOnly: new(true)})
	ctx := t.Context()
	ac := servertest.Must(w.api["alice"].GetAuthConfigWithResponse(ctx))(t)
	if ac.StatusCode() != http.StatusOK {
		t.Fatalf("the sign-in configuration: %s", show(ac))
	}
	w.issuer = ac.JSON200.Issuer

	if r := servertest.Must(w.api["ada"].CreateTemplateWithResponse(ctx, probeTemplate("sec-probe")))(t); r.StatusCode() != http.StatusCreated {
		t.Fatalf("ada creates the probe template: %s", show(r))
	}
	r := servertest.Must(w.api["alice"].CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if r.StatusCode() != http.StatusCreated {
		t.Fatalf("alice launches dev-environment in vision: %s", show(r))
	}
	if nb := r.JSON201; nb.Kind != model.WorkloadKindNotebook || nb.Status != model.Pending {
		t.Fatalf("alice's notebook: %s; want a Pending notebook (no cluster: launches are recorded)", show(r))
	}
	w.notebook = r.JSON201.Id
	r = servertest.Must(w.api["nina"].CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "nlp"}))(t)
	if r.StatusCode() != http.StatusCreated {
		t.Fatalf("nina launches dev-environment in nlp: %s", show(r))
	}
	w.nlp = r.JSON201.Id
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

// probeTemplate is a job template of ada's whose parameters reach a quantity
// (mem → resources.memory) and free text (note → an environment variable
// and an argument), with no pattern: what injection attempts aim at.
func probeTemplate(name string) model.TemplateDocument {
	doc := model.TemplateDocument{ApiVersion: model.GantryDevv1alpha1, Kind: model.TemplateDocumentKindTemplate,
		Metadata: model.TemplateMetadata{Name: name, Title: "Security probe"},
		Spec: model.TemplateSpec{
			Workload: model.TemplateSpecWorkloadJob, Image: "pytorch:25.01-py3",
			Gpu:       &model.TemplateGPU{Classes: []string{"L4"}, DefaultClass: "L4"},
			Resources: model.TemplateResources{Cpu: "1", Memory: "{{mem}}"},
			Env:       &[]model.EnvVar{{Name: "NOTE", Value: "{{note}}"}},
			Command:   &[]string{"echo"},
			Args:      &[]string{"{{note}}"},
			Parameters: &[]model.Parameter{
				{Name: "note", Type: model.String, Default: "hello"},
				{Name: "mem", Type: model.String, Default: "1Gi"},
			},
		},
	}
	doc.Spec.Gpu.Count.Min, doc.Spec.Gpu.Count.Max, doc.Spec.Gpu.Count.Default = 1, 1, 1
	return doc
}

// wantStatus fails unless r has status want and, for an error, is a
// problem+json document; it returns the problem (zero for a success).
func wantStatus(t *testing.T, what string, r answer, want int) problem {
	t.Helper()
	if r.StatusCode() != want {
		t.Errorf("%s: %s; want %d", what, show(r), want)
		return problem{}
	}
	if want < 400 {
		return problem{}
	}
	return problemOf(t, r)
}

// userID finds the id of the user with subject, as c lists them.
func userID(t *testing.T, c *client, subject string) string {
	t.Helper()
	r := servertest.Must(c.ListUsersWithResponse(t.Context()))(t)
	if r.StatusCode() != http.StatusOK {
		t.Fatalf("list users: %s", show(r))
	}
	for _, u := range r.JSON200.Items {
		if u.Subject == subject {
			return u.Id
		}
	}
	t.Fatalf("no user with subject %s in %s", subject, show(r))
	return ""
}

// templateStatus is the status of one version of a template.
func templateStatus(t *testing.T, c *client, name string, version int) string {
	t.Helper()
	r := servertest.Must(c.GetTemplateWithResponse(t.Context(), name, &model.GetTemplateParams{Version: &version}))(t)
	if r.StatusCode() != http.StatusOK {
		t.Fatalf("read %s version %d: %s", name, version, show(r))
	}
	return string(servertest.Deref(r.JSON200.Status))
}

// workloadStatus reads a workload's status as c.
func workloadStatus(t *testing.T, c *client, id string) string {
	t.Helper()
	r := servertest.Must(c.GetWorkloadWithResponse(t.Context(), id))(t)
	if r.StatusCode() != http.StatusOK {
		t.Fatalf("read workload %s: %s", id, show(r))
	}
	return string(r.JSON200.Status)
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
