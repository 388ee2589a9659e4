package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gantryhq/gantry/internal/servertest"
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
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
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
	poll := func(what, cond string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
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
