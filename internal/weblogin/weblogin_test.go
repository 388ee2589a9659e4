package weblogin_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"golang.org/x/oauth2"

	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/accounts"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
)

var alice = devidp.User{Username: "alice", Password: "pw", Name: "Alice", Email: "alice@example.dev", Groups: []string{"ml-vision"}}

// tamper lets a test change a login on its way out of the real store, to
// stand for a callback whose nonce or verifier do not match.
type tamper struct {
	*accounts.Store
	login func(*weblogin.Login)
}

func (t tamper) TakeLogin(ctx context.Context, h string) (weblogin.Login, error) {
	l, err := t.Store.TakeLogin(ctx, h)
	if err == nil && t.login != nil {
		t.login(&l)
	}
	return l, err
}

type rig struct {
	svc   *weblogin.Service
	codes chan callback
	st    *tamper
	db    *sql.DB      // the service's SQLite database, for a test to break
	ahead atomic.Int64 // how far ahead of time.Now the service's clock runs
}

type callback struct{ state, code, err string }

func setup(t *testing.T) *rig {
	t.Helper()
	return setupWith(t, []string{"openid", "profile", "email", "groups"}, nil)
}

// setupWith is setup asking for scopes, with the ID token verifier wrapped
// by wrap (nil: as it is).
func setupWith(t *testing.T, scopes []string, wrap func(weblogin.IDTokenVerifier) weblogin.IDTokenVerifier) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	codes := make(chan callback, 4)
	rp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		codes <- callback{q.Get("state"), q.Get("code"), q.Get("error")}
	}))
	t.Cleanup(rp.Close)
	idp, err := devidp.Start(ctx, "127.0.0.1:0", devidp.Options{Users: []devidp.User{alice},
		Clients: []devidp.Client{{ID: "portal", Secret: "s", RedirectURIs: []string{rp.URL + "/auth/callback"}}}})
	if err != nil {
		t.Fatal(err)
	}
	an, err := authn.New(ctx, authn.Config{Issuer: idp.Issuer(), Audiences: []string{"portal"}, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "g.db")
	db, err := store.Open(ctx, store.SQLite, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := accounts.New(db)
	tp := &tamper{Store: st}
	users, err := user.New(user.Options{Store: st, MaxGroupAge: 24 * time.Hour, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	r := &rig{codes: codes, st: tp, db: raw}
	var verifier weblogin.IDTokenVerifier = an
	if wrap != nil {
		verifier = wrap(an)
	}
	r.svc, err = weblogin.New(weblogin.Options{Config: weblogin.Config{ClientID: "portal", ClientSecret: "s", RedirectURL: rp.URL + "/auth/callback",
		Scopes: scopes, Endpoint: an.Endpoint(), Lifetime: time.Hour}, Verifier: verifier, Store: tp, Users: users,
		Now: func() time.Time { return time.Now().Add(time.Duration(r.ahead.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// signIn begins a login and signs in at the provider; it returns the state
// cookie Begin asked for and what the provider sent to the callback.
func (r *rig) signIn(t *testing.T, returnTo string) (string, callback) {
	t.Helper()
	ctx := context.Background()
	redirect, state, err := r.svc.Begin(ctx, returnTo, false)
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	if _, _, err := devidp.SignIn(ctx, &http.Client{Jar: jar}, redirect, alice.Username, alice.Password); err != nil {
		t.Fatal(err)
	}
	return state, <-r.codes
}

// TestSignInRecordingFails: a sign-in the provider vouched for whose user
// cannot be recorded (the users table away) is Gantry's failure, not
// ErrFailed (the portal's "the link is invalid"); a deactivated user's is
// refused as ErrFailed.
func TestSignInRecordingFails(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	finish := func() error {
		state, cb := r.signIn(t, "/")
		_, _, _, err := r.svc.Finish(ctx, weblogin.Callback{State: cb.state, Code: cb.code, CookieState: state})
		return err
	}
	if err := finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.db.Exec(`ALTER TABLE users RENAME TO users_away`); err != nil {
		t.Fatal(err)
	}
	if err := finish(); err == nil || errors.Is(err, weblogin.ErrFailed) {
		t.Fatalf("users table away: %v, want an error other than ErrFailed", err)
	}
	if _, err := r.db.Exec(`ALTER TABLE users_away RENAME TO users`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.db.Exec(`UPDATE users SET deactivated_at = 1`); err != nil {
		t.Fatal(err)
	}
	if err := finish(); !errors.Is(err, weblogin.ErrFailed) || !errors.Is(err, user.ErrDeactivated) {
		t.Fatalf("a deactivated user's sign-in: %v, want ErrFailed and user.ErrDeactivated", err)
	}
}

func TestSignInAndOut(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	state, cb := r.signIn(t, "/workloads?team=vision")
	cookie, ses, back, err := r.svc.Finish(ctx, weblogin.Callback{State: cb.state, Code: cb.code, CookieState: state})
	if err != nil {
		t.Fatal(err)
	}
	if back != "/workloads?team=vision" || ses.Identity.Subject != alice.Subject() || ses.Identity.Email != alice.Email || !slices.Equal(ses.Identity.Groups, alice.Groups) {
		t.Errorf("session %+v, return to %q", ses, back)
	}
	got, err := r.svc.Authenticate(ctx, cookie)
	if err != nil || got.Identity.Subject != alice.Subject() {
		t.Fatalf("authenticate: %+v %v", got, err)
	}
	if !got.CheckCSRF(ses.CSRF) || got.CheckCSRF("") || got.CheckCSRF(ses.CSRF+"x") {
		t.Error("CSRF check accepts the wrong token or refuses the right one")
	}
	// The same callback again: the state was used.
	if _, _, _, err := r.svc.Finish(ctx, weblogin.Callback{State: cb.state, Code: cb.code, CookieState: state}); !errors.Is(err, weblogin.ErrFailed) {
		t.Errorf("replayed callback: %v", err)
	}
	if err := r.svc.End(ctx, cookie); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Authenticate(ctx, cookie); !errors.Is(err, weblogin.ErrNoSession) {
		t.Errorf("after sign-out: %v", err)
	}
}

// idTokenClaims records the claims of the ID tokens it verifies.
type idTokenClaims struct {
	weblogin.IDTokenVerifier
	seen []map[string]any
}

func (v *idTokenClaims) VerifyIDToken(ctx context.Context, raw, clientID, nonce string, userinfo oauth2.TokenSource) (identity.Identity, error) {
	parts := strings.Split(raw, ".")
	var claims map[string]any
	if len(parts) == 3 {
		if b, err := base64.RawURLEncoding.DecodeString(parts[1]); err == nil {
			json.Unmarshal(b, &claims)
		}
	}
	v.seen = append(v.seen, claims)
	return v.IDTokenVerifier.VerifyIDToken(ctx, raw, clientID, nonce, userinfo)
}

// TestGroupsFromUserInfo: a provider that puts the groups in its userinfo
// only (here: the portal does not ask for the groups scope, so the ID
// token has none) still gives the session its user's groups.
func TestGroupsFromUserInfo(t *testing.T) {
	rec := &idTokenClaims{}
	r := setupWith(t, []string{"openid", "profile", "email"}, func(v weblogin.IDTokenVerifier) weblogin.IDTokenVerifier {
		rec.IDTokenVerifier = v
		return rec
	})
	state, cb := r.signIn(t, "/")
	_, ses, _, err := r.svc.Finish(context.Background(), weblogin.Callback{State: cb.state, Code: cb.code, CookieState: state})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.seen) != 1 || rec.seen[0]["sub"] != alice.Subject() {
		t.Fatalf("ID tokens seen: %v", rec.seen)
	}
	if _, ok := rec.seen[0]["groups"]; ok {
		t.Fatalf("the ID token has groups, so userinfo was not needed: %v", rec.seen[0])
	}
	if !slices.Equal(ses.Identity.Groups, alice.Groups) {
		t.Fatalf("the session's groups %v, want %v from userinfo", ses.Identity.Groups, alice.Groups)
	}
}

func TestSessionExpires(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	state, cb := r.signIn(t, "/")
	cookie, _, _, err := r.svc.Finish(ctx, weblogin.Callback{State: cb.state, Code: cb.code, CookieState: state})
	if err != nil {
		t.Fatal(err)
	}
	r.ahead.Store(int64(time.Hour + time.Second))
	if _, err := r.svc.Authenticate(ctx, cookie); !errors.Is(err, weblogin.ErrNoSession) {
		t.Errorf("an expired session still works: %v", err)
	}
	if _, err := r.svc.Authenticate(ctx, "made-up"); !errors.Is(err, weblogin.ErrNoSession) {
		t.Errorf("an unknown cookie: %v", err)
	}
}

// TestCallbacksFailSafely: a wrong state, a state from another browser, a
// wrong nonce, a wrong PKCE verifier and a provider error all fail, and none
// leaves a session behind or the login usable.
func TestCallbacksFailSafely(t *testing.T) {
	cases := []struct {
		name   string
		alter  func(cb *weblogin.Callback)
		tamper func(*weblogin.Login)
	}{
		{"wrong state", func(cb *weblogin.Callback) { cb.State, cb.CookieState = "forged", "forged" }, nil},
		{"state from another browser", func(cb *weblogin.Callback) { cb.CookieState = "other" }, nil},
		{"no state cookie", func(cb *weblogin.Callback) { cb.CookieState = "" }, nil},
		{"wrong nonce", nil, func(l *weblogin.Login) { l.Nonce = "not-the-nonce" }},
		{"wrong PKCE verifier", nil, func(l *weblogin.Login) { l.Verifier = oauth2.GenerateVerifier() }},
		{"provider error", func(cb *weblogin.Callback) { cb.Code, cb.Error = "", "access_denied" }, nil},
		{"forged code", func(cb *weblogin.Callback) { cb.Code = "forged" }, nil},
		{"expired", nil, func(l *weblogin.Login) { l.ExpiresAt = time.Now().Add(-time.Second) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := setup(t)
			state, got := r.signIn(t, "/")
			cb := weblogin.Callback{State: got.state, Code: got.code, CookieState: state}
			if c.alter != nil {
				c.alter(&cb)
			}
			r.st.login = c.tamper
			cookie, _, _, err := r.svc.Finish(context.Background(), cb)
			if !errors.Is(err, weblogin.ErrFailed) || cookie != "" {
				t.Fatalf("Finish: cookie %q, err %v; want ErrFailed", cookie, err)
			}
		})
	}
}

// BenchmarkAuthenticate: a browser request's session lookup (SHA-256 of the
// cookie, one indexed read on SQLite among 1,000 live sessions) against the
// same read done with database/sql directly.
func BenchmarkAuthenticate(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "g.db")
	database, err := store.Open(ctx, store.SQLite, path)
	if err != nil {
		b.Fatal(err)
	}
	defer database.Close()
	st := accounts.New(database)
	users, err := user.New(user.Options{Store: st, MaxGroupAge: 24 * time.Hour, Now: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := weblogin.New(weblogin.Options{Config: weblogin.Config{ClientID: "portal"}, Verifier: noVerifier{}, Store: st, Users: users, Now: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	var cookie, idHash string
	for i := range 1000 {
		c := fmt.Sprintf("cookie-%04d", i)
		cookie, idHash = c, token.Hash(c)
		who := identity.Identity{Issuer: "https://idp", Subject: c, Groups: []string{"ml-vision", "staff"}}
		if _, err := users.Observe(ctx, who); err != nil {
			b.Fatal(err)
		}
		err := st.CreateSession(ctx, weblogin.Session{IDHash: idHash, Identity: who,
			CSRF: "x", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("gantry", func(b *testing.B) {
		for b.Loop() {
			if _, err := svc.Authenticate(ctx, cookie); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A replica keeps the session and its user for up to 5 s (the server's
	// CacheCredentials): the cost of a request within them.
	b.Run("kept", func(b *testing.B) {
		kept := accounts.New(database)
		kept.CacheCredentials(5 * time.Second)
		keptUsers, err := user.New(user.Options{Store: kept, MaxGroupAge: 24 * time.Hour, Now: time.Now})
		if err != nil {
			b.Fatal(err)
		}
		svc, err := weblogin.New(weblogin.Options{Config: weblogin.Config{ClientID: "portal"}, Verifier: noVerifier{}, Store: kept, Users: keptUsers, Now: time.Now})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := svc.Authenticate(ctx, cookie); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("database-sql", func(b *testing.B) {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		for b.Loop() {
			var s, groups, csrf string
			var created, expires int64
			var iss, sub, email, name string
			if err := db.QueryRowContext(ctx, `SELECT id_hash, issuer, subject, email, name, groups, csrf, created_at, expires_at FROM sessions WHERE id_hash = ?`, idHash).
				Scan(&s, &iss, &sub, &email, &name, &groups, &csrf, &created, &expires); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzLocalPath: whatever comes in ?return=, the answer stays on this site
// as a browser reads it (the WHATWG URL parser turns "\\" into "/" and drops
// tabs and newlines), and http.Redirect sends it unchanged (the path checked
// is the path sent).
func FuzzLocalPath(f *testing.F) {
	for _, s := range []string{"/", "/workloads?team=a", "//evil.example", "/\\evil", "https://x", "/%2F%2Fevil", "/a/../b", " /x", "\t//x", "/\x00",
		"/a/../\\evil.example", "/\t/evil.example", "/./\\evil", "/..//evil.example", "/a/..//evil.example", "/\n/evil", "/w/%2e%2e/api", "/%2E./x", "/a/.%2e/b"} {
		f.Add(s)
	}
	base, _ := url.Parse("https://gantry.example/auth/callback")
	f.Fuzz(func(t *testing.T, in string) {
		got := weblogin.LocalPath(in)
		if strings.ContainsFunc(got, func(r rune) bool { return r == '\\' || r < 0x20 || r == 0x7f || unicode.IsSpace(r) }) {
			t.Fatalf("LocalPath(%q) = %q keeps a character browsers rewrite", in, got)
		}
		u, err := url.Parse(got)
		if err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(got, "/") || strings.HasPrefix(got, "//") {
			t.Fatalf("LocalPath(%q) = %q leaves the site", in, got)
		}
		if r := base.ResolveReference(u); r.Host != base.Host {
			t.Fatalf("LocalPath(%q) = %q resolves to host %q", in, got, r.Host)
		}
		// A browser reads %2e in a segment as a dot: no dot segment may be
		// left for it to resolve (the page allowlist checks the path as is).
		path, _, _ := strings.Cut(got, "?")
		for _, seg := range strings.Split(path, "/") {
			if d := strings.ReplaceAll(strings.ToLower(seg), "%2e", "."); d == "." || d == ".." {
				t.Fatalf("LocalPath(%q) = %q keeps the dot segment %q", in, got, seg)
			}
		}
		rec := httptest.NewRecorder()
		http.Redirect(rec, httptest.NewRequest(http.MethodGet, "https://gantry.example/auth/callback", nil), got, http.StatusFound)
		if loc := rec.Header().Get("Location"); loc != got {
			t.Fatalf("LocalPath(%q) = %q, but http.Redirect sends %q", in, got, loc)
		}
	})
}

// TestLocalPath: the return addresses an outside probe used to leave the site
// (http.Redirect cleaned "/a/../\evil.example" into "/\evil.example", which
// Chromium resolves to another origin) come back as "/"; local ones are kept,
// cleaned.
func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"/a/../\\evil.example":  "/",
		"/\\evil.example":       "/",
		"/\t/evil.example":      "/",
		"/a/..//evil.example":   "/evil.example", // a path on this site
		"//evil.example":        "/",
		"https://evil.example/": "/",
		"/%5Cevil.example":      "/%5Cevil.example", // an escaped backslash stays a literal in a path
		"/workloads?team=a":     "/workloads?team=a",
		"/workloads?x=" + strings.Repeat("a", weblogin.MaxReturnPath): "/", // each begun sign-in stores it
		"/a/../b":             "/b",
		"/caf\u00e9":          "/",
		"":                    "/",
		"/":                   "/",
		"javascript:alert(1)": "/",
		"relative":            "/",
	} {
		if got := weblogin.LocalPath(in); got != want {
			t.Errorf("LocalPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// noVerifier verifies no ID token: Authenticate never asks.
type noVerifier struct{}

func (noVerifier) VerifyIDToken(context.Context, string, string, string, oauth2.TokenSource) (identity.Identity, error) {
	return identity.Identity{}, errors.New("no provider")
}
