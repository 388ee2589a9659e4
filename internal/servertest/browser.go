package servertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// Accessibility runs axe-core (portal/axe.sh installs it, cached by version)
// in the current page and returns its serious and critical violations, each
// as "rule: the first element's selector (n elements)". Without npm it skips
// the test, except in CI.
func Accessibility(t *testing.T, ctx context.Context) []string {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", filepath.Join(root, "portal", "axe.sh")).Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("install axe-core (portal/axe.sh): %v", err)
		}
		t.Skipf("axe-core not installed (portal/axe.sh: %v)", err)
	}
	src, err := os.ReadFile(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
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
