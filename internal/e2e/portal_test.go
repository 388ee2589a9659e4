package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// TestPortalLaunchWatchStop drives a real Chromium through the portal on the
// local cluster, as a member of team vision: a launch refused for a
// parameter shows the server's message next to that field and launches
// nothing; a jupyter-notebook launched from the form with a MIG profile
// lands on its page, which shows it go from Pending to Running live (server-
// sent events), streams its log, and shows it Stopped after Stop. The list
// shows it and not another team's workload, and no page breaks its Content
// Security Policy.
func TestPortalLaunchWatchStop(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	ctx := servertest.Browser(t, 3*time.Minute)
	pg := servertest.NewPage(t, ctx, 60*time.Second)
	step, js, poll := pg.Do, pg.JS, pg.Poll
	// Every page keeps its Content Security Policy and passes axe-core
	// with no serious or critical violation.
	noCSPViolations := func(page string) {
		t.Helper()
		if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
			t.Errorf("%s broke the Content Security Policy: %v %v", page, v, err)
		}
		if v := servertest.Accessibility(t, ctx); len(v) > 0 {
			t.Errorf("%s: accessibility violations: %v", page, v)
		}
	}
	shot := func(name string) { t.Helper(); screenshot(t, ctx, name) }
	// chartsReadable: every label of every chart lies inside its chart
	// (none clipped, as "l0.0 GiB" was) and is drawn at least 9 px high.
	chartsReadable := func(where string) {
		t.Helper()
		bad := js(`(() => { const bad = []; for (const s of document.querySelectorAll('#charts svg')) { const vb = s.viewBox.baseVal;
			for (const t of s.querySelectorAll('text')) { const b = t.getBBox(), h = t.getBoundingClientRect().height;
				if (b.x < vb.x - 0.5 || b.y < vb.y - 0.5 || b.x + b.width > vb.x + vb.width + 0.5 || b.y + b.height > vb.y + vb.height + 0.5 || h < 9)
					bad.push(JSON.stringify(t.textContent) + ' at ' + [b.x, b.y, b.width, b.height].map(Math.round).join(',') + ', ' + h.toFixed(1) + ' px high'); } }
			return bad.join('; '); })()`)
		if bad != "" {
			t.Errorf("chart labels %s clipped or too small: %s", where, bad)
		}
	}
	// Another team's workload, launched through the API as a platform admin.
	s, other := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "ops"})
	if s != 201 {
		t.Fatalf("launch for ops: %d", s)
	}

	// A launch form opened signed out comes back to it after the sign-in.
	pg.SignIn(g.URL+"/launch/batch-inference", "alice", "launch")
	poll("the form's parameters", `!!document.getElementById('p-input')`)
	step("a parameter the template's pattern refuses",
		chromedp.SetValue(chromedp.ID("p-input"), "not a file!"),
		chromedp.Click(chromedp.ID("submit")))
	poll("the server's message next to the field", `document.getElementById('err-parameters.input').textContent.length > 0`)
	if msg := js(`document.getElementById('err-parameters.input').textContent`); !strings.Contains(msg, "does not match") && !strings.Contains(msg, "pattern") {
		t.Errorf("the field's message: %q", msg)
	}
	if inv := js(`document.getElementById('p-input').getAttribute('aria-invalid') || ''`); inv != "true" {
		t.Errorf("the refused field is not marked invalid: %q", inv)
	}
	noCSPViolations("the launch form")
	shot("launch-refused")
	list := servertest.Must(g.api.ListWorkloadsWithResponse(t.Context(), &model.ListWorkloadsParams{Team: new("vision")}))(t)
	if list.StatusCode() != 200 {
		t.Fatalf("GET /api/v1/workloads?team=vision: %d %s", list.StatusCode(), list.Body)
	}
	if len(list.JSON200.Items) != 0 {
		t.Fatalf("a refused launch left workloads: %s", asJSON(list.JSON200.Items))
	}

	step("the catalog", chromedp.Navigate(g.URL+"/"), chromedp.WaitVisible(chromedp.ID("templates")))
	poll("the cards", `document.querySelectorAll('#templates .card').length > 0`)
	noCSPViolations("the catalog")
	shot("catalog")
	step("launch a notebook on a MIG slice",
		chromedp.Navigate(g.URL+"/launch/jupyter-notebook"),
		chromedp.WaitVisible(chromedp.ID("launch")))
	poll("the MIG profiles of the default class", `[...document.getElementById('f-mig').options].some(o => o.value === '1g.10gb')`)
	step("choose and submit",
		chromedp.SetValue(chromedp.ID("f-class"), "H100-80GB"),
		chromedp.SetValue(chromedp.ID("f-mig"), "1g.10gb"))
	poll("the estimate", `document.getElementById('estimate').textContent.includes('per hour')`)
	shot("launch")
	step("submit, land on the workload's page", chromedp.Click(chromedp.ID("submit")), chromedp.WaitVisible(chromedp.ID("w-status")))
	id := strings.TrimPrefix(js(`location.pathname`), "/workloads/")
	if w := g.workload(id); servertest.Deref(w.Gpu.MigProfile) != "1g.10gb" || w.Gpu.Class != "H100-80GB" {
		t.Fatalf("launched %s", asJSON(w))
	}
	// Running as the cluster reports it (on simulated nodes it can be
	// Running before the page first reads it: the live update is checked
	// below, on a change the test makes itself).
	poll("Running", `document.getElementById('w-status').textContent === 'Running'`)
	poll("the log streams into the page", `document.getElementById('logs').textContent.includes('simulated container: ready')`)
	poll("the cluster's events", `document.getElementById('events').textContent.includes('Scheduled')`)

	// The node agent reports the notebook's GPU: the page draws it.
	pod := podsOf(t, "vision", id)[0]
	now := time.Now().UTC().Truncate(time.Second)
	b := telemetry.Batch{Node: pod.Spec.NodeName, Agent: "e2e", GPUs: []telemetry.GPUState{{Device: telemetry.Device{GPU: "GPU-portal-0", Index: 0, Model: "NVIDIA H100 80GB HBM3"}, MemoryMiB: 81559}}}
	for i := range 12 {
		v := telemetry.NoValues()
		v[telemetry.SMActive], v[telemetry.GPUUtil], v[telemetry.FBUsed] = 0.05*float64(i%4), 10*float64(i%4), 4000
		b.Readings = append(b.Readings, telemetry.Reading{Time: now.Add(time.Duration(i-12) * 10 * time.Second), Device: telemetry.Device{GPU: "GPU-portal-0", Index: 0},
			Pod: telemetry.PodRef{Namespace: "gantry-vision", Name: pod.Name, Container: "main"}, Share: 1, Attribution: "exclusive", Values: v})
	}
	if s, body := push(t, g, agentToken(t, "gantry-system", "gantry-agent", pod.Spec.NodeName, "gantry"), b); s != 202 && s != 200 {
		t.Fatalf("push: %d %s", s, body)
	}
	step("the last 15 minutes", chromedp.SetValue(chromedp.ID("window"), "15"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('window').dispatchEvent(new Event('change')); undefined`))
	poll("the GPU charts", `!!document.querySelector('#charts figure[data-metric="sm_active"] polyline') && !!document.querySelector('#charts figure[data-metric="gpu_util"]')`)
	chartsReadable("at 1280 px")
	poll("the advice section", `document.getElementById('advice').textContent.length > 0 && !document.getElementById('advice').textContent.startsWith('No advice:')`)
	if cli := js(`document.getElementById('repro-cli').textContent`); cli != "gantry launch jupyter-notebook --team vision --gpu H100-80GB:1 --mig 1g.10gb --set memory=32Gi --wait" {
		t.Errorf("the CLI line to reproduce it: %q", cli)
	}
	noCSPViolations("the workload's page")
	shot("workload")

	step("stop it", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true; undefined`), chromedp.Click(chromedp.ID("stop")))
	poll("Stopped", `document.getElementById('w-status').textContent === 'Stopped'`)
	// A change the page did not make reaches it live: started and stopped
	// again through the API, the open page follows without a reload.
	if s, _ := g.startAgain(id); s != 200 {
		t.Fatalf("start through the API: %d", s)
	}
	poll("started elsewhere, live", `document.getElementById('w-status').textContent !== 'Stopped'`)
	if s, _ := g.stop(id); s != 200 {
		t.Fatalf("stop through the API: %d", s)
	}
	poll("stopped elsewhere, live", `document.getElementById('w-status').textContent === 'Stopped'`)
	// Its history: when it started and ended, how long it ran, over how
	// many attempts (it was started again once).
	poll("its history", `document.getElementById('w-ended').textContent !== '-' && document.getElementById('w-started').textContent !== '-'`)
	if ran := js(`document.getElementById('w-ran').textContent`); !regexp.MustCompile(`^\d+ (s|min \d\d s|h \d\d min) over [12] attempts?$`).MatchString(ran) {
		t.Errorf("its running time: %q", ran)
	}

	step("the history", chromedp.Navigate(g.URL+"/history"))
	poll("the history's rows", `!!document.querySelector('#history tbody tr[data-id="`+id+`"]')`)
	if row := js(`document.querySelector('#history tbody tr[data-id="` + id + `"]').textContent`); !strings.Contains(row, "Stopped") || !strings.Contains(row, "jupyter-notebook v") {
		t.Errorf("the history's row: %q", row)
	}
	if total := js(`document.getElementById('history-total').textContent`); !regexp.MustCompile(`^\d+ ended workloads?, .* running, \$\d+\.\d\d in all$`).MatchString(total) {
		t.Errorf("the history's total: %q", total)
	}
	noCSPViolations("the history")
	shot("history")

	step("my workloads", chromedp.Navigate(g.URL+"/workloads"))
	poll("the list", `document.querySelectorAll('#workloads tbody tr').length > 0`)
	rows := js(`[...document.querySelectorAll('#workloads tbody tr')].map(r => r.dataset.id).join(',')`)
	shot("workloads")
	if !strings.Contains(rows, id) || strings.Contains(rows, other.Id) {
		t.Errorf("alice's list: %s (hers %s, ops's %s)", rows, id, other.Id)
	}
	step("another team's workload", chromedp.Navigate(g.URL+"/workloads/"+other.Id))
	poll("refused", `document.getElementById('status').textContent.length > 0 || document.getElementById('stream-state').textContent.length > 0`)
	if st := js(`document.getElementById('w-status').textContent`); st != "…" {
		t.Errorf("alice sees ops's workload as %q", st)
	}
	noCSPViolations("the list")

	// A laptop at 200 % zoom: a 1280 px window is a 640 px viewport. The
	// pages reflow: nothing scrolls sideways.
	step("200% zoom", chromedp.EmulateViewport(640, 450))
	for _, page := range []string{"/", "/launch/jupyter-notebook", "/workloads", "/history", "/workloads/" + id} {
		step(page+" at 200%", chromedp.Navigate(g.URL+page), chromedp.WaitVisible(chromedp.ID("main")))
		poll(page+" filled", `document.getElementById('status').textContent.length > 0 || !!document.querySelector('#templates .card, #launch select option, #workloads tbody tr, #history tbody tr, #events tbody tr')`)
		if strings.HasPrefix(page, "/workloads/") {
			poll("the charts at 200%", `!!document.querySelector('#charts svg text')`)
			chartsReadable("at 640 px")
		}
		if w := js(`document.documentElement.scrollWidth + '/' + document.documentElement.clientWidth`); func() bool {
			var sw, cw int
			fmt.Sscanf(w, "%d/%d", &sw, &cw)
			return sw > cw
		}() {
			t.Errorf("%s at 200%% zoom scrolls sideways (scroll/client width %s)", page, w)
		}
	}
	step("back to 100%", chromedp.EmulateReset())

	// The portal's pages answer with the strict policy.
	resp, err := http.Get(g.URL + "/workloads") // raw: the portal's page, not the API
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q", csp)
	}
}

// TestPortalTeamView: a team-admin's team page shows the budget against its
// amount with the 80 % and 100 % marks, and the launches waiting for
// approval; approving one there (with a reason) lets it go to Kueue.
func TestPortalTeamView(t *testing.T) {
	g := start(t, storetest.SQLitePath(t), true, func(c *config.Config) {
		c.PolicyDir = policyWith(t, "  vision:\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    quota: {gpus: {\"*\": 1000}}\n"+
			"    approval: {launchCeiling: 1, expires: 1h}\n"+
			"    budget: {amount: 100}\n")
	})
	s, w := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "vision"})
	if s != 201 || w.Status != "PendingApproval" {
		t.Fatalf("launch above the ceiling: %d %s", s, asJSON(w))
	}
	ctx := servertest.Browser(t, 2*time.Minute)
	pg := servertest.NewPage(t, ctx, 60*time.Second)
	poll := pg.Poll
	pg.SignIn(g.URL+"/teams/vision", "lee", "approvals")
	poll("the budget", `document.getElementById('budget-text') && document.getElementById('budget-text').textContent.includes('of $100.00 spent')`)
	poll("the 80 % and 100 % marks", `document.querySelectorAll('#budget .mark').length === 2`)
	poll("the month's cost and energy", `document.getElementById('month-text').textContent.includes(' kWh on the GPUs (')`)
	poll("the launch waiting", `!!document.querySelector('#approvals tr[data-id="`+w.Id+`"]')`)
	screenshot(t, ctx, "team")
	if v, err := servertest.CSPViolations(ctx); err != nil || len(v) > 0 {
		t.Errorf("the team page broke its Content Security Policy: %v %v", v, err)
	}
	if v := servertest.Accessibility(t, ctx); len(v) > 0 {
		t.Errorf("the team page: accessibility violations: %v", v)
	}
	pg.Do("approve with a reason",
		chromedp.SendKeys(chromedp.ID("reason-"+w.Id), "within the quarter's plan"),
		chromedp.Click(chromedp.CSS(`#approvals tr[data-id="`+w.Id+`"] button[data-verb="approve"]`)))
	poll("the row gone once approved", `!document.querySelector('#approvals tr[data-id="`+w.Id+`"]')`)
	if got := g.workload(w.Id); got.Status == "PendingApproval" {
		t.Errorf("after the approval: %s", asJSON(got))
	}
}

// screenshot saves the page as docs/portal/<name>.png when make screenshots
// asks (GANTRY_SCREENSHOTS names the directory).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("GANTRY_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
