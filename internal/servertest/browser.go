package servertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/internal/devcluster"
)

// Browser starts a headless Chromium for a test and returns its context
// (ending after timeout). Every page it opens records the Content Security
// Policy violations it reports in window.__cspViolations (CSPViolations
// reads them). In CI (or with GANTRY_TEST_BROWSER set) a missing browser
// fails the test instead of skipping it.
func Browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		if os.Getenv("CI") != "" || os.Getenv("GANTRY_TEST_BROWSER") != "" {
			t.Fatal("chromium is not installed (apt-get install chromium); .ci/test installs it")
		}
		t.Skip("chromium is not installed: the browser test is skipped (make test installs it)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Headless,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	// Before any page's own script: collect CSP violations.
	if err := chromedp.Do(ctx); err != nil { // starts the browser and its first tab
		t.Fatalf("start the browser: %v", err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));`}); err != nil {
		t.Fatalf("watch for CSP violations: %v", err)
	}
	return ctx
}

// CSPViolations are the violations the current page reported.
func CSPViolations(ctx context.Context) ([]string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__cspViolations || []`))
}

// axeSource is axe-core's script, installed (portal/axe.sh) and read once
// per test binary.
var axeSource = sync.OnceValues(func() ([]byte, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("bash", filepath.Join(root, "portal", "axe.sh")).Output()
	if err != nil {
		return nil, err
	}
	return os.ReadFile(strings.TrimSpace(string(out)))
})

// Accessibility runs axe-core (portal/axe.sh installs it, cached by version)
// in the current page and returns its serious and critical violations, each
// as "rule: the first element's selector (n elements)". Without npm it skips
// the test, except in CI.
func Accessibility(t *testing.T, ctx context.Context) []string {
	t.Helper()
	src, err := axeSource()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("install axe-core (portal/axe.sh): %v", err)
		}
		t.Skipf("axe-core not installed (portal/axe.sh: %v)", err)
	}
	// DevTools' evaluation is not the page's script: the CSP does not apply.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](string(src)+"\n;undefined")); err != nil {
		t.Fatalf("load axe-core: %v", err)
	}
	found, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`axe.run(document, {resultTypes: ['violations']}).then(r =>
  r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => v.id + ': ' + v.nodes[0].target.join(' ') + ' (' + v.nodes.length + ' elements)'))`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("run axe-core: %v", err)
	}
	return found
}

// Page drives a test's browser; each step fails the test saying what it was
// doing (and what the page's status line said).
type Page struct {
	t       *testing.T
	ctx     context.Context
	timeout time.Duration // for Poll
}

// NewPage is a Page on the browser ctx; Poll waits up to timeout.
func NewPage(t *testing.T, ctx context.Context, timeout time.Duration) Page {
	return Page{t: t, ctx: ctx, timeout: timeout}
}

// Do runs steps.
func (p Page) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// JS evaluates a JavaScript expression to a string.
func (p Page) JS(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// Poll waits until the JavaScript condition holds.
func (p Page) Poll(what, cond string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(p.timeout))); err != nil {
		status, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`(document.getElementById('status') || {}).textContent || ''`))
		p.t.Fatalf("%s (%s): %v; the status line says %q", what, cond, err, status)
	}
}

// SignIn opens start signed out, follows Sign in to the development
// provider, signs in as user (password = user) and waits, back on start, for
// the element with id landed.
func (p Page) SignIn(start, user, landed string) {
	p.t.Helper()
	p.Do("sign in as "+user+" from "+start,
		chromedp.Navigate(start),
		chromedp.WaitVisible(chromedp.ID("sign-in")),
		chromedp.Click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), user),
		chromedp.SendKeys(chromedp.ID("password"), user),
		chromedp.Click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.ID(landed)))
}
