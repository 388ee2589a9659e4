package servertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
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
