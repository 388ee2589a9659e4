package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/internal/clilogin"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/servertest"
)

// startGantry runs the real server in process, as `gantry serve` does with
// the embedded defaults: SQLite, no cluster, the development provider.
func startGantry(t *testing.T, edit ...func(*config.Config)) *servertest.Gantry {
	t.Helper()
	return servertest.New(t, edit...)
}

// recorder keeps every Set-Cookie header a browser receives, redirects included.
type recorder struct {
	mu      sync.Mutex
	cookies []*http.Cookie
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.cookies = append(r.cookies, resp.Cookies()...)
		r.mu.Unlock()
	}
	return resp, err
}

func (r *recorder) named(name string) *http.Cookie {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.cookies) - 1; i >= 0; i-- {
		if r.cookies[i].Name == name {
			return r.cookies[i]
		}
	}
	return nil
}

func newBrowser() (*http.Client, *recorder) {
	jar, _ := cookiejar.New(nil)
	rec := &recorder{}
	return &http.Client{Jar: jar, Transport: rec, Timeout: 20 * time.Second}, rec
}

var csrfRE = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

func call(t *testing.T, c *http.Client, method, url string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestUnauthenticatedAPI: every /api/v1 operation in the spec answers 401
// with a WWW-Authenticate challenge to a request without credentials.
func TestUnauthenticatedAPI(t *testing.T) {
	// Every route at once, from one address: past the default burst of
	// requests without credentials (its own test is api.TestAnonymousFlood).
	g := startGantry(t, func(c *config.Config) { c.Security.AnonymousBurst = 1000 })
	doc, err := openapi3.NewLoader().LoadFromData(gantry.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	params := regexp.MustCompile(`\{[^}]+\}`)
	n := 0
	for path, item := range doc.Paths.Map() {
		if !strings.HasPrefix(path, "/api/v1") {
			continue
		}
		for method := range item.Operations() {
			req, _ := http.NewRequest(method, g.URL+params.ReplaceAllString(path, "abcdefghi"), strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			n++
			if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s without credentials: %d, WWW-Authenticate %q", method, path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d operations walked", n)
	}
}

// TestBrowserSessionFlow signs in through the development provider's form,
// checks the cookies, uses the session on the API (CSRF required on changes),
// and signs out; a callback with a wrong state gets no session.
func TestBrowserSessionFlow(t *testing.T) {
	g := startGantry(t)
	ctx := context.Background()
	b, rec := newBrowser()
	resp, body, err := devidp.SignIn(ctx, b, g.URL+"/auth/login", "alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Request.URL.String() != g.URL+"/" || !strings.Contains(body, "Signed in as <strong>Alice Moreau") || !strings.Contains(body, `<dd id="teams">vision</dd>`) {
		t.Fatalf("landed on %s:\n%s", resp.Request.URL, body)
	}
	ses := rec.named("gantry_session")
	if ses == nil || !ses.HttpOnly || ses.SameSite != http.SameSiteLaxMode || ses.Secure || ses.Path != "/" || ses.MaxAge <= 0 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Lax, not Secure over http, Path=/", ses)
	}
	if st := rec.named("gantry_login"); st == nil || !st.HttpOnly || st.Path != "/auth/callback" {
		t.Errorf("state cookie %+v", st)
	}
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the signed-in page")
	}
	csrf := m[1]

	code, me := call(t, b, "GET", g.URL+"/api/v1/me", nil, "")
	if code != 200 || !strings.Contains(me, `"via":"session"`) || !strings.Contains(me, `"launchTeams":["vision"]`) {
		t.Fatalf("/me with the session: %d %s", code, me)
	}
	tokenBody := `{"name":"nb","expiresInDays":1}`
	if code, body := call(t, b, "POST", g.URL+"/api/v1/tokens", map[string]string{"Content-Type": "application/json"}, tokenBody); code != 403 || !strings.Contains(body, "X-CSRF-Token") {
		t.Errorf("POST without the CSRF header: %d %s", code, body)
	}
	if code, _ := call(t, b, "POST", g.URL+"/api/v1/tokens", map[string]string{"Content-Type": "application/json", "X-CSRF-Token": "wrong"}, tokenBody); code != 403 {
		t.Errorf("POST with a wrong CSRF header: %d", code)
	}
	if code, body := call(t, b, "POST", g.URL+"/api/v1/tokens", map[string]string{"Content-Type": "application/json", "X-CSRF-Token": csrf}, tokenBody); code != 201 {
		t.Errorf("POST with the CSRF header: %d %s", code, body)
	}

	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if code, _ := call(t, b, "POST", g.URL+"/auth/logout", form, "csrf=forged"); code != 403 {
		t.Errorf("sign-out with a forged CSRF token: %d", code)
	}
	if code, _ := call(t, b, "GET", g.URL+"/api/v1/me", nil, ""); code != 200 {
		t.Fatalf("a refused sign-out ended the session: %d", code)
	}
	if code, body := call(t, b, "POST", g.URL+"/auth/logout", form, "csrf="+url.QueryEscape(csrf)); code != 200 || !strings.Contains(body, `id="sign-in"`) {
		t.Errorf("sign-out: %d %s", code, body)
	}
	if c := rec.named("gantry_session"); c == nil || c.MaxAge >= 0 {
		t.Errorf("sign-out did not clear the cookie: %+v", c)
	}
	// The old cookie value, replayed, is dead too.
	req, _ := http.NewRequest("GET", g.URL+"/api/v1/me", nil)
	req.AddCookie(&http.Cookie{Name: "gantry_session", Value: ses.Value})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("a signed-out cookie still works: %v %v", resp.StatusCode, err)
	}

	// A callback this browser did not start: 400, no session.
	other, orec := newBrowser()
	code, body = call(t, other, "GET", g.URL+"/auth/callback?state=forged&code=forged", nil, "")
	if code != 400 || !strings.Contains(body, "Sign-in failed") || orec.named("gantry_session") != nil {
		t.Errorf("forged callback: %d, session cookie %+v", code, orec.named("gantry_session"))
	}
	// Sign-ins, the refused sign-in and the sign-outs are in the audit log.
	admin, _ := newBrowser()
	if _, _, err := devidp.SignIn(ctx, admin, g.URL+"/auth/login", "ada", "ada"); err != nil {
		t.Fatal(err)
	}
	code, body = call(t, admin, "GET", g.URL+"/api/v1/audit", nil, "")
	var log struct {
		Items []struct{ Actor, Action, Decision, Reason string }
	}
	json.Unmarshal([]byte(body), &log)
	seen := map[string]bool{}
	for _, r := range log.Items {
		who := "alice"
		if !strings.Contains(r.Actor, "#dev-alice") {
			who = r.Actor
		}
		seen[who+" "+r.Action+" "+r.Decision] = true
	}
	for _, want := range []string{"alice GET /auth/callback allow", "alice POST /api/v1/tokens deny", "alice POST /auth/logout deny", "alice POST /auth/logout allow", "anonymous GET /auth/callback deny"} {
		if !seen[want] {
			t.Errorf("audit log lacks %q: %d %s", want, code, body)
		}
	}

	// An open redirect through ?return= is refused.
	b2, _ := newBrowser()
	resp, _, err = devidp.SignIn(ctx, b2, g.URL+"/auth/login?return=//evil.example/x", "alice", "alice")
	if err != nil || resp.Request.URL.Host != strings.TrimPrefix(g.URL, "http://") {
		t.Errorf("return=//evil.example led to %v (%v)", resp.Request.URL, err)
	}
}

// TestCLILogin runs `gantry login` (device grant), approves it as a person
// would in a browser, then `gantry whoami`, then whoami again after the ID
// token has expired: it refreshes and saves the new token, mode 0600.
func TestCLILogin(t *testing.T) {
	g := startGantry(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("GANTRY_SERVER", "")
	ctx := context.Background()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	var stderr strings.Builder
	go func() {
		done <- run(ctx, []string{"login", "--server", g.URL}, outW, &stderr)
		outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	promptRE := regexp.MustCompile(`open (http\S+) and enter the code (\S+)`)
	var uri, code string
	for sc.Scan() {
		if m := promptRE.FindStringSubmatch(sc.Text()); m != nil {
			uri, code = m[1], m[2]
			break
		}
	}
	if uri == "" {
		t.Fatalf("gantry login printed no code; stderr: %s", stderr.String())
	}
	b, _ := newBrowser()
	if err := devidp.ApproveDevice(ctx, b, uri, code, "lee", "lee", true); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	go io.Copy(&rest, outR)
	select {
	case c := <-done:
		if c != 0 {
			t.Fatalf("gantry login exited %d: %s", c, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gantry login did not finish")
	}
	path, _ := clilogin.Path()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}

	codeN, out, errs := cli(t, "whoami")
	if codeN != 0 || !strings.Contains(out, "Lee Park") || !strings.Contains(out, "ml-vision-leads") || !strings.Contains(out, "launch:  vision") {
		t.Fatalf("whoami: exit %d\n%s%s", codeN, out, errs)
	}

	// Expire the ID token: whoami refreshes it with the refresh token.
	f, _ := clilogin.Load(path)
	c := f.Servers[g.URL]
	old := c.IDToken
	c.Expiry = time.Now().Add(-time.Minute)
	f.Servers[g.URL] = c
	f.Save(path)
	if codeN, out, errs := cli(t, "whoami", "--json"); codeN != 0 || !strings.Contains(out, `"via":"bearer"`) {
		t.Fatalf("whoami after expiry: exit %d\n%s%s", codeN, out, errs)
	}
	f, _ = clilogin.Load(path)
	if f.Servers[g.URL].IDToken == old || f.Servers[g.URL].RefreshToken == c.RefreshToken {
		t.Error("the refreshed ID token or the rotated refresh token was not saved")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after refresh: %v", fi.Mode().Perm())
	}
	var saved map[string]any
	raw, _ := os.ReadFile(path)
	if err := json.Unmarshal(raw, &saved); err != nil || saved["current"] != g.URL {
		t.Fatalf("credentials file: current %v (%v), want %s", saved["current"], err, g.URL)
	}

	// A refresh token the provider no longer knows: whoami says to sign in.
	c = f.Servers[g.URL]
	c.Expiry, c.RefreshToken = time.Now().Add(-time.Minute), "revoked"
	f.Servers[g.URL] = c
	f.Save(path)
	if codeN, _, errs := cli(t, "whoami"); codeN != 1 || !strings.Contains(errs, "gantry login") {
		t.Errorf("whoami with a dead refresh token: exit %d: %s", codeN, errs)
	}
}

// TestSecureCookiesBehindTLS: with an https public URL, the sign-in redirects
// back to it and every cookie is Secure.
func TestSecureCookiesBehindTLS(t *testing.T) {
	g := startGantry(t, func(c *config.Config) { c.PublicURL = "https://gantry.example.com" })
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(g.URL + "/auth/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	q := loc.Query()
	if resp.StatusCode != 302 || q.Get("redirect_uri") != "https://gantry.example.com/auth/callback" ||
		q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" {
		t.Fatalf("login redirect %d to %s", resp.StatusCode, loc)
	}
	var state *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "gantry_login" {
			state = ck
		}
	}
	if state == nil || !state.Secure || !state.HttpOnly || state.SameSite != http.SameSiteLaxMode || state.Value != q.Get("state") {
		t.Errorf("state cookie %+v", state)
	}
}

// TestSignInRateLimited: one address may start 60 sign-ins at once, then one a
// second; the rest get 429 and store nothing.
func TestSignInRateLimited(t *testing.T) {
	g := startGantry(t)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	codes := map[int]int{}
	for range 65 {
		resp, err := c.Get(g.URL + "/auth/login")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[302] < 60 || codes[302] > 62 || codes[429] < 3 {
		t.Errorf("statuses %v, want 60 redirects (61-62 if a second passed) and the rest refused", codes)
	}
}
