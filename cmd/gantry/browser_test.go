package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestBrowserSignIn drives a real Chromium through the portal: it lands on
// the signed-out page, follows "Sign in" to the development provider, is
// refused with a wrong password, signs in, lands on the signed-in page (whose
// script lists the templates through the API with the session cookie), finds
// the session cookie HttpOnly and SameSite=Lax, and signs out.
func TestBrowserSignIn(t *testing.T) {
	ctx := servertest.Browser(t, 90*time.Second)
	g := startGantry(t)

	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(sel)))
		if err != nil {
			t.Fatalf("text of #%s: %v", sel, err)
		}
		return v
	}
	pg := servertest.NewPage(t, ctx, 20*time.Second)
	step, poll := pg.Do, pg.Poll
	step("open the portal, follow Sign in",
		chromedp.Navigate(g.URL),
		chromedp.WaitVisible(chromedp.ID("sign-in")),
		chromedp.Click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("username")))
	step("a wrong password",
		chromedp.SendKeys(chromedp.ID("username"), "alice"),
		chromedp.SendKeys(chromedp.ID("password"), "not-her-password"),
		chromedp.Click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.CSS(".error")))
	if refused, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".error"))); !strings.Contains(refused, "Wrong username or password") {
		t.Errorf("wrong password page said %q", refused)
	}
	step("sign in",
		chromedp.SendKeys(chromedp.ID("username"), "alice"),
		chromedp.SendKeys(chromedp.ID("password"), "alice"),
		chromedp.Click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.ID("signed-in-as")))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('status').textContent.includes('templates')`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the page's script did not list the templates: %v", err)
	}
	if who, teams, status := text("signed-in-as"), text("teams"), text("status"); !strings.Contains(who, "Alice Moreau") || teams != "vision" || status != fmt.Sprintf("%d templates", starterTemplatesIn(t, "../../templates")) {
		t.Errorf("signed-in page: %q, teams %q, status %q", who, teams, status)
	}
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{g.URL}})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range res.Cookies {
		if c.Name == "gantry_session" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteLax {
		t.Errorf("session cookie in the browser: %+v", session)
	}
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the page broke its Content Security Policy: %v %v", v, err)
	}
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the catalog page: accessibility violations: %v", v)
	}
	// Tokens: a refused form says why next to the field; a created token is
	// shown once, works, is listed, and stops working when revoked.
	step("the tokens page", chromedp.Navigate(g.URL+"/tokens"), chromedp.WaitVisible(chromedp.ID("new-token")))
	step("a token without a name", chromedp.Click(chromedp.ID("create-token")))
	poll("the name's error", `document.getElementById('err-name').textContent.length > 0`)
	step("create one",
		chromedp.SendKeys(chromedp.ID("t-name"), "notebook"),
		chromedp.SetValue(chromedp.ID("t-team"), "vision"),
		chromedp.Click(chromedp.ID("t-readonly")),
		chromedp.Click(chromedp.ID("create-token")))
	poll("the new token", `document.getElementById('token-value').textContent.startsWith('gnt_')`)
	tok, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('token-value').textContent`))
	poll("the list", `document.querySelectorAll('#tokens tbody tr').length === 1`)
	me := func() int {
		req, _ := http.NewRequest(http.MethodGet, g.URL+"/api/v1/workloads", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := me(); s != 200 {
		t.Fatalf("the new token: %d", s)
	}
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the tokens page: accessibility violations: %v", v)
	}
	step("revoke it", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true; undefined`), chromedp.Click(chromedp.CSS("#tokens tbody button")))
	poll("revoked", `document.querySelector('#tokens tbody tr td:nth-child(5)').textContent === 'revoked'`)
	if s := me(); s != 401 {
		t.Errorf("a revoked token: %d", s)
	}
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the tokens page broke its Content Security Policy: %v %v", v, err)
	}
	// The platform page as a member: the catalogs are readable, and verifying
	// an image works; the audit log is a platform-admin's, and the section
	// says which permission is missing instead of breaking the page.
	step("the platform page", chromedp.Navigate(g.URL+"/platform"), chromedp.WaitVisible(chromedp.ID("images")))
	poll("images and classes", `document.querySelectorAll('#images tbody tr').length > 0 && document.querySelectorAll('#classes tbody tr').length > 0`)
	poll("the audit log refused, saying why", `document.getElementById('audit-status').textContent.length > 0`)
	if msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('audit-status').textContent`)); !strings.Contains(msg, "audit") {
		t.Errorf("the audit section as a member: %q", msg)
	}
	step("verify an image", chromedp.Click(chromedp.CSS(`#images tr[data-name="cuda"] button`)))
	poll("verified", `document.querySelector('#images tr[data-name="cuda"] .verification').textContent.startsWith('verified: sha256:')`)
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the platform page: accessibility violations: %v", v)
	}
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the platform page broke its Content Security Policy: %v %v", v, err)
	}
	step("sign out",
		chromedp.Click(chromedp.ID("sign-out")),
		chromedp.WaitVisible(chromedp.ID("sign-in")))
	if out := text("signed-out"); !strings.Contains(out, "not signed in") {
		t.Errorf("after sign-out: %q", out)
	}
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the signed-out page: accessibility violations: %v", v)
	}
}

// TestBrowserTemplateEditor: a platform engineer opens a template in the
// editor (the live version, which the server finds unchanged), breaks it and
// sees the server's file:line problem with its field path, fixes it with a
// real change and sees the diff, previews the objects of the edit before
// saving, saves a new version, and rolls back to the first version (a third
// version equal to it).
func TestBrowserTemplateEditor(t *testing.T) {
	ctx := servertest.Browser(t, 90*time.Second)
	g := startGantry(t)
	pg := servertest.NewPage(t, ctx, 20*time.Second)
	step, js, poll := pg.Do, pg.JS, pg.Poll
	pg.SignIn(g.URL+"/templates/dev-environment/edit", "pat", "source")
	poll("the live version, unchanged", `document.getElementById('diff').textContent === 'Unchanged.'`)
	if o := js(`document.getElementById('editor-origin').textContent`); !strings.Contains(o, "managed from files (gantry:initial-catalog)") {
		t.Errorf("the editor does not say the template came from files: %q", o)
	}
	// An edit as a person types it: the page checks it once the typing stops.
	edit := func(from, to string) {
		t.Helper()
		js(`(() => { const s = document.getElementById('source'); s.value = s.value.replace(` + strconvQuote(from) + `, ` + strconvQuote(to) + `); s.dispatchEvent(new Event('input')); return 'ok'; })()`)
	}
	edit("max: ", "max: two-")
	poll("the server's problem", `document.getElementById('problems').textContent.includes('dev-environment.yaml:')`)
	if p := js(`document.getElementById('problems').textContent`); !strings.Contains(p, "spec.gpu.count.max") {
		t.Errorf("the problem: %q", p)
	}
	edit("max: two-", "max: ")
	edit("title: ", "title: Edited ")
	poll("the diff", `document.getElementById('diff').textContent.startsWith('update')`)
	step("preview the edit for team vision", chromedp.SendKeys(chromedp.ID("preview-team"), "vision"), chromedp.Click(chromedp.ID("preview")))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('objects').textContent.includes('kind: Service') && document.getElementById('objects').textContent.includes('app.kubernetes.io/managed-by: gantry')`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the objects: %q", js(`document.getElementById('objects').textContent.slice(0, 500)`))
	}
	if o := js(`document.getElementById('objects').textContent`); !strings.Contains(o, "dev-environment@0") {
		t.Errorf("the preview is not of the unsaved edit (version 0): %.300q", o)
	}
	step("save", chromedp.Click(chromedp.ID("save")))
	poll("version 2", `!!document.querySelector('#versions tr[data-version="2"]')`)
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the editor: accessibility violations: %v", v)
	}
	step("roll back to version 1", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true; undefined`),
		chromedp.Click(chromedp.CSS(`#versions tr[data-version="1"] button`)))
	poll("version 3", `!!document.querySelector('#versions tr[data-version="3"]')`)
	step("compare 1 and 3", chromedp.SetValue(chromedp.ID("cmp-a"), "1"), chromedp.SetValue(chromedp.ID("cmp-b"), "3"),
		chromedp.Click(chromedp.CSS(`#compare button`)))
	poll("no differences", `document.getElementById('version-diff').textContent === 'no differences'`)
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the editor broke its Content Security Policy: %v %v", v, err)
	}
}

// strconvQuote is a Go string as a JavaScript string literal.
func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestBrowserPlatformEdits: a platform engineer changes a GPU class's price
// and a team's budget on the Platform page; both are in force at once
// (the API serves them), listed with who made them, audited; a quota naming
// a class that does not exist is refused with its field, one with a bound
// on cores is kept with it; a reset goes back to the file's price.
func TestBrowserPlatformEdits(t *testing.T) {
	ctx := servertest.Browser(t, 90*time.Second)
	g := startGantry(t)
	pg := servertest.NewPage(t, ctx, 20*time.Second)
	step, js, poll := pg.Do, pg.JS, pg.Poll
	pg.SignIn(g.URL+"/platform", "pat", "classes")
	poll("the classes", `!!document.querySelector('#classes tr[data-class="L4"] input')`)
	// The node groups, and the forecast of the first class with groups,
	// drawn with its words for who cannot see it.
	poll("the node groups", `document.querySelectorAll('#groups tbody tr').length === 3`)
	if warm := js(`document.querySelector('#groups tr[data-group="h100-on-demand"] td:nth-child(7)').textContent`); warm != "up to $100.00 a day" {
		t.Errorf("the on-demand group kept warm: %q", warm)
	}
	// A node group changed from the page: in force in the table at once,
	// listed among the edits; a reserved group's max is refused by field.
	step("the spot group's max", chromedp.SetValue(chromedp.ID("group-name"), "h100-spot"), chromedp.SendKeys(chromedp.ID("group-max"), "3"),
		chromedp.Click(chromedp.CSS(`#group-form button`)))
	poll("the spot group at 3 machines", `document.querySelector('#groups tr[data-group="h100-spot"] td:nth-child(5)').textContent === '0–3'`)
	poll("the group's edit", `!!document.querySelector('#edits tr[data-kind="nodeGroup"][data-key="h100-spot"]')`)
	step("the reserved group's max", chromedp.SetValue(chromedp.ID("group-name"), "h100-reserved"), chromedp.Click(chromedp.CSS(`#group-form button`)))
	poll("refused, naming the field", `document.getElementById('group-status').textContent.includes('max: a reserved group')`)
	step("reset the group", chromedp.Click(chromedp.CSS(`#edits tr[data-kind="nodeGroup"] button`)))
	poll("the spot group back at 2", `document.querySelector('#groups tr[data-group="h100-spot"] td:nth-child(5)').textContent === '0–2'`)
	poll("the forecast chart", `!!document.querySelector('#forecast-chart svg[role="img"]')`)
	if label := js(`document.querySelector('#forecast-chart svg').getAttribute('aria-label')`); !strings.HasPrefix(label, "H100-80GB: 0.0 GPUs wanted now; in 2 h 0.0") {
		t.Errorf("the forecast's label: %q", label)
	}
	poll("the reserved-size advice", `document.getElementById('reserved-advice').textContent.includes('no launches of H100-80GB')`)
	get := func(path string, out any) {
		t.Helper()
		req, _ := http.NewRequest("GET", g.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+g.Token("ada"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(out)
	}
	var l4 struct{ Price struct{ OnDemand float64 } }
	get("/api/v1/gpu-classes/L4", &l4)
	filePrice := l4.Price.OnDemand

	step("a new L4 price", chromedp.SetValue(chromedp.CSS(`#classes tr[data-class="L4"] input`), "0.77"),
		chromedp.Click(chromedp.CSS(`#classes tr[data-class="L4"] button`)))
	poll("the price's edit", `!!document.querySelector('#edits tr[data-kind="price"][data-key="L4"]')`)
	if get("/api/v1/gpu-classes/L4", &l4); l4.Price.OnDemand != 0.77 {
		t.Errorf("the price in force: %v, want 0.77", l4.Price.OnDemand)
	}
	if by := js(`document.querySelector('#edits tr[data-kind="price"] td:nth-child(4)').textContent`); !strings.Contains(by, "Pat") {
		t.Errorf("the edit's author: %q", by)
	}
	step("vision's budget", chromedp.SendKeys(chromedp.ID("budget-team"), "vision"), chromedp.SendKeys(chromedp.ID("budget-amount"), "4321"),
		chromedp.Click(chromedp.CSS(`#budget-form button`)))
	poll("the budget's edit", `!!document.querySelector('#edits tr[data-kind="budget"][data-key="vision"]')`)
	var budgets struct {
		Items []struct {
			Team   string
			Amount float64
		}
	}
	get("/api/v1/budgets", &budgets)
	found := false
	for _, b := range budgets.Items {
		found = found || (b.Team == "vision" && b.Amount == 4321)
	}
	if !found {
		t.Errorf("vision's budget in force: %+v", budgets.Items)
	}
	step("a quota of a class that is not", chromedp.SendKeys(chromedp.ID("quota-team"), "vision"), chromedp.SendKeys(chromedp.ID("quota-gpus"), "V100=2"),
		chromedp.Click(chromedp.CSS(`#quota-form button`)))
	poll("refused, naming the field", `document.getElementById('edits-status').textContent.includes('gpus.V100')`)
	if n := js(`String(document.querySelectorAll('#edits tbody tr').length)`); n != "2" {
		t.Errorf("%s edits after a refused one, want 2", n)
	}
	// A quota with a bound on the team's CPU-only cores.
	step("vision's quota with cores", chromedp.SetValue(chromedp.ID("quota-gpus"), "H100-80GB=4"), chromedp.SendKeys(chromedp.ID("quota-cores"), "6"),
		chromedp.Click(chromedp.CSS(`#quota-form button`)))
	poll("the quota's edit, with its cores", `(document.querySelector('#edits tr[data-kind="quota"][data-key="vision"] td:nth-child(3)') || {textContent: ''}).textContent.includes('"cores":6')`)
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the platform page: accessibility violations: %v", v)
	}
	step("reset the price", chromedp.Click(chromedp.CSS(`#edits tr[data-kind="price"] button`)))
	poll("the price's edit gone", `!document.querySelector('#edits tr[data-kind="price"]')`)
	if get("/api/v1/gpu-classes/L4", &l4); l4.Price.OnDemand != filePrice {
		t.Errorf("after the reset: %v, want the file's %v", l4.Price.OnDemand, filePrice)
	}
	var audit struct {
		Items []struct{ Object, Actor string }
	}
	get("/api/v1/audit?limit=50", &audit)
	audited := 0
	for _, a := range audit.Items {
		if a.Object == "/api/v1/gpu-classes/L4/price" || a.Object == "/api/v1/teams/vision/budget" {
			audited++
		}
	}
	if audited < 3 {
		t.Errorf("%d of the 3 changes are in the audit log: %+v", audited, audit.Items)
	}
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the platform page broke its Content Security Policy: %v %v", v, err)
	}
}

// TestBrowserClusters: with worker clusters, the Platform page lists each
// with where it is, its offers and its state, and under them each team's
// GPUs per cluster beside its quota and its cap there; a platform engineer
// cordons a cluster from the page (in force at once, listed among the
// edits) and the edit's reset takes it back.
func TestBrowserClusters(t *testing.T) {
	ctx := servertest.Browser(t, 90*time.Second)
	g := startGantry(t, func(c *config.Config) {
		c.ClustersFile = filepath.Join(filepath.Dir(c.GPUClassesFile), "clusters.yaml")
	})
	pg := servertest.NewPage(t, ctx, 20*time.Second)
	step, js, poll := pg.Do, pg.JS, pg.Poll
	pg.SignIn(g.URL+"/platform", "pat", "clusters")
	poll("both clusters", `document.querySelectorAll('#clusters tbody tr').length === 2`)
	cell := func(sel string, n int) string {
		t.Helper()
		return js(fmt.Sprintf(`document.querySelector('%s td:nth-child(%d)').textContent`, sel, n))
	}
	on := `#clusters tr[data-cluster="onprem-a100"]`
	if where := cell(on, 2); where != "eu-central / dc1, on-premises; residency=onprem" {
		t.Errorf("where: %q", where)
	}
	if offers := cell(on, 3); offers != "A100-80GB reserved $1.10/GPU-h, 16 GPUs, MIG 1g.10gb 3g.40gb; CPU reserved $0.02/core-h, 256 cores" {
		t.Errorf("offers: %q", offers)
	}
	// This test's workers have no credentials: once read, they say so.
	if state := cell(on, 5); state != "not read yet" && !strings.HasPrefix(state, "unreachable: its credentials cannot be read") {
		t.Errorf("state: %q", state)
	}
	// The use table: vision's quota of H100s, and nlp's cap on cloud-east.
	if shown := js(`String(!document.getElementById('cluster-use-wrap').hidden)`); shown != "true" {
		t.Error("the use table is hidden")
	}
	if head := js(`[...document.querySelectorAll('#cluster-use thead th')].map((h) => h.textContent).join('|')`); head != "Team|GPU class|Quota|On onprem-a100|On cloud-east|In all" {
		t.Errorf("the use table's columns: %q", head)
	}
	if q := cell(`#cluster-use tr[data-team="vision"][data-class="H100-80GB"]`, 3); q != "8" {
		t.Errorf("vision's H100 quota: %q", q)
	}
	if c := cell(`#cluster-use tr[data-team="nlp"][data-class="H100-80GB"]`, 5); c != "0 (cap 16)" {
		t.Errorf("nlp's H100s on cloud-east, under its cap there: %q", c)
	}
	// Cores: nlp's cap in the cloud, and no bound on its cores ("*" is
	// every GPU class, not cores).
	if q, c := cell(`#cluster-use tr[data-team="nlp"][data-class="CPU"]`, 3), cell(`#cluster-use tr[data-team="nlp"][data-class="CPU"]`, 5); q != "no bound" || c != "0 (cap 64)" {
		t.Errorf("nlp's cores: quota %q, on cloud-east %q", q, c)
	}
	if q := cell(`#cluster-use tr[data-team="nlp"][data-class="H100-80GB"]`, 3); q != "4" {
		t.Errorf("nlp's H100 quota, from its \"*\": %q", q)
	}

	step("cordon cloud-east", chromedp.Click(chromedp.CSS(`#clusters tr[data-cluster="cloud-east"] button[aria-label="Cordon cloud-east"]`)))
	poll("cloud-east cordoned", `document.querySelector('#clusters tr[data-cluster="cloud-east"] td:nth-child(5)').textContent.includes('cordoned: no new work')`)
	poll("the cordon's edit", `!!document.querySelector('#edits tr[data-kind="cluster"][data-key="cloud-east"]')`)
	// Cordoned here: it may still be drained, or uncordoned.
	if b := js(`[...document.querySelectorAll('#clusters tr[data-cluster="cloud-east"] button')].map((b) => b.textContent).join(',')`); b != "Drain,Uncordon" {
		t.Errorf("cloud-east's buttons once cordoned: %q", b)
	}
	list := servertest.Must(servertest.Client(g.URL, g.Token("ada")).ListClustersWithResponse(t.Context()))(t)
	if list.JSON200 == nil || len(list.JSON200.Items) != 2 || !list.JSON200.Items[1].Cordoned {
		t.Errorf("the API after the cordon: %d %s", list.StatusCode(), list.Body)
	}
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the platform page: accessibility violations: %v", v)
	}
	step("reset the cordon", chromedp.Click(chromedp.CSS(`#edits tr[data-kind="cluster"] button`)))
	poll("cloud-east takes work again", `!!document.querySelector('#clusters tr[data-cluster="cloud-east"] button[aria-label="Cordon cloud-east"]')`)
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the platform page broke its Content Security Policy: %v %v", v, err)
	}
}

// TestBrowserRunProgress: a training Job's page shows what its run
// reported — the bar with its step and percent, a chart a metric by step,
// the link to its W&B run (its template's tracker) —
// and, once its early-stopping rule flags it, the verdict and a "Keep it
// going" button that its owner presses (recorded as who kept it).
func TestBrowserRunProgress(t *testing.T) {
	ctx := servertest.Browser(t, 90*time.Second)
	g := startGantry(t)
	// The platform team gives cpu-train a W&B tracker.
	admin := servertest.Client(g.URL, g.Token("ada"))
	live := servertest.Must(admin.GetTemplateWithResponse(t.Context(), "cpu-train", nil))(t)
	var doc map[string]any
	if err := json.Unmarshal(live.Body, &doc); err != nil {
		t.Fatal(err)
	}
	tpl := doc["template"].(map[string]any)
	tpl["spec"].(map[string]any)["tracking"] = map[string]any{"wandb": map[string]any{"project": "cpu-train", "entity": "vision", "credentials": "wandb-key"}}
	body, _ := json.Marshal(tpl)
	if up := servertest.Must(admin.UpdateTemplateWithBodyWithResponse(t.Context(), "cpu-train", nil, "application/json", strings.NewReader(string(body))))(t); up.JSON200 == nil {
		t.Fatalf("the tracker: %d %s", up.StatusCode(), up.Body)
	}
	cl := servertest.Client(g.URL, g.Token("alice"))
	launched := servertest.Must(cl.CreateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: "cpu-train", Team: "vision", CpuOnly: new(true)}))(t)
	if launched.JSON201 == nil {
		t.Fatalf("launch: %d %s", launched.StatusCode(), launched.Body)
	}
	w := launched.JSON201
	// Its run: 32 reports, loss falling for 10 then flat (cpu-train's
	// plateau rule flags 20 reports without a gain).
	ns := g.Workloads.Namespace(workload.Workload{Team: "vision"})
	run := identity.With(t.Context(), identity.Identity{Via: identity.ViaRun, Workload: w.Id, Pod: ns + "/train-" + w.Id})
	at := time.Now().Add(-time.Hour)
	for i := range 32 {
		loss := 0.25
		if i < 10 {
			loss = 1 - 0.075*float64(i)
		}
		at = at.Add(10 * time.Second)
		if _, err := g.Runs.Report(run, w.Id, []runs.Report{{Time: at, Step: int64(10 * (i + 1)), TotalSteps: 1000, Epoch: math.NaN(), ResumedFrom: -1,
			Metrics: map[string]float64{"loss": loss, "samples_per_s": 2048}}}); err != nil {
			t.Fatal(err)
		}
	}
	// It was moved off a node quarantined for a failed GPU (package
	// quarantine records it so): the page says so.
	moved := time.Date(2026, 12, 3, 10, 42, 0, 0, time.UTC)
	mv := quarantine.Move{Workload: w.Id, Node: "h100-3", MarkAt: moved, GPU: "GPU-3-2", Index: 2, Reason: "critical XID 79", Kind: "job",
		Phase: quarantine.Resumed, Detail: "requeued through Kueue, its retries not used up", At: moved, ResumedAt: moved.Add(time.Minute),
		ResumedOn: "h100-7", ResumedFrom: 1200, UpdatedAt: moved.Add(time.Minute)}
	msg, _ := notify.New(quarantine.EventResumed, mv.Notice(), nil, moved)
	if ok, err := g.Store.Governance.RecordMove(t.Context(), mv, msg); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if one := servertest.Must(cl.GetWorkloadWithResponse(t.Context(), w.Id))(t); one.JSON200 == nil || one.JSON200.Moves == nil {
		t.Fatalf("the workload's moves: %d %s", one.StatusCode(), one.Body)
	}
	pg := servertest.NewPage(t, ctx, 20*time.Second)
	step, js, poll := pg.Do, pg.JS, pg.Poll
	pg.SignIn(g.URL+"/workloads/"+w.Id, "alice", "w-name")
	poll("the move's notice", `!!document.querySelector('#w-moves p.move')`)
	if text := js(`document.getElementById('w-moves').textContent`); text != "Moved off node h100-3: GPU 2 critical XID 79, at 10:42; requeued through Kueue, its retries not used up; running again on node h100-7, resumed from step 1,200." {
		t.Errorf("the move's notice: %q", text)
	}
	poll("the progress bar", `!!document.querySelector('#w-progress progress[value="32"]')`)
	if text := js(`document.getElementById('w-progress').textContent`); !strings.Contains(text, "step 320 of 1000") || !strings.Contains(text, "loss 0.25") ||
		!strings.Contains(text, "early stopping (plateau, flagged)") {
		t.Errorf("progress: %q", text)
	}
	poll("the tracker", `!!document.getElementById('tracker-link')`)
	if href := js(`document.getElementById('tracker-link').href`); href != "https://wandb.ai/vision/cpu-train/runs/gantry-"+w.Id {
		t.Errorf("the tracker's link: %q", href)
	}
	poll("a chart a metric", `document.querySelectorAll('#run-charts figure').length === 2`)
	if label := js(`document.querySelector('#run-charts figure[data-metric="loss"] svg').getAttribute('aria-label')`); label != "Run metric loss: latest 0.25 at step 320" {
		t.Errorf("the loss chart: %q", label)
	}
	if shown := js(`String(!document.getElementById('run-metrics').hidden)`); shown != "true" {
		t.Error("the run metrics are hidden on a Job's page")
	}
	step("keep it going", chromedp.Click(chromedp.ID("keep-run")))
	poll("kept", `document.getElementById('w-progress').textContent.includes('kept going by')`)
	p := servertest.Must(cl.GetWorkloadProgressWithResponse(t.Context(), w.Id, nil))(t)
	if p.JSON200 == nil || p.JSON200.KeptBy == nil || !strings.Contains(*p.JSON200.KeptBy, "alice") {
		t.Errorf("kept by: %d %s", p.StatusCode(), p.Body)
	}
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the workload page: accessibility violations: %v", v)
	}
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the workload page broke its Content Security Policy: %v %v", v, err)
	}
}

// TestBrowserTrial: a trial's page shows each choice's measurements, the
// best marked, and why; the trials page lists it.
func TestBrowserTrial(t *testing.T) {
	ctx := servertest.Browser(t, 90*time.Second)
	g := startGantry(t, func(c *config.Config) { c.Runs.ReportURL = "http://gantry.gantry-system.svc:8080" })
	cl := servertest.Client(g.URL, g.Token("alice"))
	started := servertest.Must(cl.CreateTrialWithResponse(t.Context(), nil, model.TrialRequest{Template: "pytorch-train", Team: "vision",
		Classes: []string{"H100-80GB", "A100-80GB"}, Steps: 50}))(t)
	if started.JSON201 == nil {
		t.Fatalf("trial: %d %s", started.StatusCode(), started.Body)
	}
	tr := started.JSON201
	// Each run reports 5 steps, 0.4 s a step on the H100 and 1 s on the
	// A100, of a full run of 10,000.
	ns := g.Workloads.Namespace(workload.Workload{Team: "vision"})
	at := time.Now().Add(-time.Hour)
	for _, r := range tr.Runs {
		secs := map[string]float64{"H100-80GB": 0.4, "A100-80GB": 1}[r.Class]
		run := identity.With(t.Context(), identity.Identity{Via: identity.ViaRun, Workload: *r.Workload, Pod: ns + "/train-" + *r.Workload})
		for step := int64(10); step <= 50; step += 10 {
			if _, err := g.Runs.Report(run, *r.Workload, []runs.Report{{Time: at.Add(time.Duration(float64(step) * secs * float64(time.Second))), Step: step,
				TotalSteps: 10000, Epoch: math.NaN(), ResumedFrom: -1}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pg := servertest.NewPage(t, ctx, 20*time.Second)
	js, poll := pg.JS, pg.Poll
	pg.SignIn(g.URL+"/trials/"+tr.Id, "alice", "trial-runs")
	poll("the measured runs", `document.querySelectorAll('#trial-runs tbody tr').length === 2 && document.getElementById('trial-why').textContent !== ''`)
	if row := js(`document.querySelector('#trial-runs tr.best').textContent`); !strings.Contains(row, "H100-80GB × 1 (best)") || !strings.Contains(row, "Stopped") ||
		!strings.Contains(row, "0.4 (0.4–0.4)") || !strings.Contains(row, "1 h 06 min") || !strings.Contains(row, "$7.67") {
		t.Errorf("the best row: %q", row)
	}
	if why := js(`document.getElementById('trial-why').textContent`); !strings.HasPrefix(why, "H100-80GB × 1 is the cheapest of 2 measured choices") {
		t.Errorf("why: %q", why)
	}
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the trial page: accessibility violations: %v", v)
	}
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the trial page broke its Content Security Policy: %v %v", v, err)
	}
	// A trial of a MIG slice beside the whole GPU: each row named by its choice.
	profiles := []string{"3g.40gb"}
	sliced := servertest.Must(cl.CreateTrialWithResponse(t.Context(), nil, model.TrialRequest{Template: "batch-inference", Team: "vision",
		Classes: []string{"H100-80GB"}, MigProfiles: &profiles, Parameters: &model.Parameters{"input": "p.jsonl"}, Steps: 50}))(t)
	if sliced.JSON201 == nil {
		t.Fatalf("a trial of a MIG slice: %d %s", sliced.StatusCode(), sliced.Body)
	}
	pg.Do("the sliced trial's page", chromedp.Navigate(g.URL+"/trials/"+sliced.JSON201.Id))
	poll("the slice's row", `(document.querySelector('#trial-runs tr[data-choice="H100-80GB 3g.40gb"] th') || {}).textContent === 'H100-80GB 3g.40gb' &&
		!!document.querySelector('#trial-runs tr[data-choice="H100-80GB×1"]')`)
	pg.Do("the trials page", chromedp.Navigate(g.URL+"/trials"))
	poll("the trial listed", `!!document.querySelector('#trials tr[data-id="`+tr.Id+`"]')`)
	poll("the sliced trial listed by its choices", `(document.querySelector('#trials tr[data-id="`+sliced.JSON201.Id+`"]') || {textContent: ''}).textContent.includes('H100-80GB × 1, H100-80GB 3g.40gb')`)
}
