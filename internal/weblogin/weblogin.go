// Package weblogin owns signing people in with a browser: the OpenID Connect
// authorization code flow with PKCE (S256), a state bound to the browser that
// started the login and usable once, a nonce checked in the ID token, and the
// session that follows — a random cookie of which only the SHA-256 is stored,
// a CSRF token for every form post, an expiry, and sign-out. It speaks
// standard OIDC only, so any compliant provider works.
package weblogin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode"

	"golang.org/x/oauth2"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
)

// Login is a sign-in in progress, stored under the hash of its state.
type Login struct {
	StateHash string
	Nonce     string
	Verifier  string // PKCE code verifier
	ReturnTo  string // local path to land on
	ExpiresAt time.Time
}

// Session is a signed-in browser.
type Session struct {
	IDHash    string // SHA-256 of the cookie value
	Identity  identity.Identity
	CSRF      string // must accompany every form post and unsafe API call
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Store keeps logins and sessions.
type Store interface {
	CreateLogin(ctx context.Context, l Login) error
	// TakeLogin returns and deletes a login; *fault.NotFound if there is none.
	TakeLogin(ctx context.Context, stateHash string) (Login, error)
	CreateSession(ctx context.Context, s Session) error
	// SessionAndUser returns a session and its user's record (nil when
	// there is none), read together; *fault.NotFound if there is no such
	// session.
	SessionAndUser(ctx context.Context, idHash string) (Session, *user.User, error)
	DeleteSession(ctx context.Context, idHash string) error
}

// IDTokenVerifier checks an ID token from the provider: signature, issuer,
// audience (the client id), expiry and nonce; groups it lacks come from the
// provider's userinfo, read with the access token userinfo gives.
type IDTokenVerifier interface {
	VerifyIDToken(ctx context.Context, raw, clientID, nonce string, userinfo oauth2.TokenSource) (identity.Identity, error)
}

// Config configures the relying party.
type Config struct {
	ClientID     string
	ClientSecret string
	RedirectURL  string // this server's /auth/callback
	Scopes       []string
	// Endpoint is the provider's authorization and token endpoints.
	Endpoint oauth2.Endpoint
	// Lifetime is how long a session lasts (default 8h).
	Lifetime time.Duration
	// ACRValues is what a sign-in that must bring a second factor asks the
	// provider for (acr_values), besides prompt=login; empty: prompt alone.
	ACRValues string
}

// Errors callers branch on.
var (
	// ErrFailed means a callback was refused: unknown, reused or expired state,
	// a state from another browser, a provider error, a failed code exchange or
	// a bad ID token. The reason is in the wrapped message, for logs only.
	ErrFailed = errors.New("sign-in failed")
	// ErrNoSession means the cookie is missing, unknown or expired.
	ErrNoSession = errors.New("not signed in")
)

// loginTTL bounds how long a sign-in may take at the provider.
const loginTTL = 10 * time.Minute

// Users records who signed in (their groups, fresh from the provider) and
// says who a session's user is now (user.Service).
type Users interface {
	Observe(ctx context.Context, id identity.Identity) (identity.Identity, error)
	CurrentFrom(id identity.Identity, u *user.User) (identity.Identity, error)
}

// Service is the browser sign-in logic.
type Service struct {
	cfg      Config
	oauth    oauth2.Config
	verifier IDTokenVerifier
	store    Store
	users    Users
	now      func() time.Time
}

// Options are what a Service is made of; all are required.
type Options struct {
	Config   Config
	Verifier IDTokenVerifier
	Store    Store
	Users    Users
	Now      func() time.Time
}

// New returns the service.
func New(o Options) (*Service, error) {
	if o.Verifier == nil || o.Store == nil || o.Users == nil || o.Now == nil {
		return nil, errors.New("weblogin: Verifier, Store, Users and Now are required")
	}
	cfg := o.Config
	if cfg.Lifetime == 0 {
		cfg.Lifetime = 8 * time.Hour
	}
	return &Service{
		cfg: cfg, verifier: o.Verifier, store: o.Store, users: o.Users, now: o.Now,
		oauth: oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, RedirectURL: cfg.RedirectURL, Endpoint: cfg.Endpoint, Scopes: cfg.Scopes},
	}, nil
}

// Begin starts a sign-in. It returns the provider URL to send the browser to
// and the state, which the caller sets as a cookie on that browser: the
// callback must present both. With secondFactor the provider is asked for a
// fresh sign-in (prompt=login, max_age=0) at the configured acr_values: the
// person was refused something only a second factor allows.
func (s *Service) Begin(ctx context.Context, returnTo string, secondFactor bool) (redirect, state string, err error) {
	state, nonce, verifier := random(32), random(32), oauth2.GenerateVerifier()
	l := Login{StateHash: token.Hash(state), Nonce: nonce, Verifier: verifier, ReturnTo: LocalPath(returnTo), ExpiresAt: s.now().Add(loginTTL)}
	if err := s.store.CreateLogin(ctx, l); err != nil {
		return "", "", fmt.Errorf("record login: %w", err)
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce)}
	if secondFactor {
		opts = append(opts, oauth2.SetAuthURLParam("prompt", "login"), oauth2.SetAuthURLParam("max_age", "0"))
		if s.cfg.ACRValues != "" {
			opts = append(opts, oauth2.SetAuthURLParam("acr_values", s.cfg.ACRValues))
		}
	}
	return s.oauth.AuthCodeURL(state, opts...), state, nil
}

// Callback is what the provider sent back, with the state cookie.
type Callback struct {
	State       string // the state query parameter
	Code        string
	Error       string // the provider's error parameter, if any
	CookieState string // the state cookie set by Begin on this browser
}

// Finish completes a sign-in: the state must match this browser's cookie and
// a login not yet used or expired; the code is exchanged with the PKCE
// verifier; the ID token must carry the login's nonce. It returns the session
// cookie value (shown only here) and the session.
func (s *Service) Finish(ctx context.Context, cb Callback) (cookie string, ses Session, returnTo string, err error) {
	if cb.State == "" || cb.CookieState == "" || subtle.ConstantTimeCompare([]byte(cb.State), []byte(cb.CookieState)) != 1 {
		return "", ses, "", fmt.Errorf("%w: the state does not match this browser's sign-in", ErrFailed)
	}
	l, err := s.store.TakeLogin(ctx, token.Hash(cb.State))
	var nf *fault.NotFound
	if errors.As(err, &nf) {
		return "", ses, "", fmt.Errorf("%w: unknown or already used state", ErrFailed)
	}
	if err != nil {
		return "", ses, "", err
	}
	if s.now().After(l.ExpiresAt) {
		return "", ses, "", fmt.Errorf("%w: the sign-in expired", ErrFailed)
	}
	if cb.Error != "" {
		return "", ses, "", fmt.Errorf("%w: the provider answered %q", ErrFailed, cb.Error)
	}
	if cb.Code == "" {
		return "", ses, "", fmt.Errorf("%w: no code", ErrFailed)
	}
	tok, err := s.oauth.Exchange(ctx, cb.Code, oauth2.VerifierOption(l.Verifier))
	if err != nil {
		return "", ses, "", fmt.Errorf("%w: code exchange: %v", ErrFailed, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", ses, "", fmt.Errorf("%w: the token response has no ID token", ErrFailed)
	}
	id, err := s.verifier.VerifyIDToken(ctx, raw, s.cfg.ClientID, l.Nonce, oauth2.StaticTokenSource(tok))
	if err != nil {
		return "", ses, "", fmt.Errorf("%w: %v", ErrFailed, err)
	}
	switch id, err = s.users.Observe(ctx, id); {
	case errors.Is(err, user.ErrDeactivated):
		return "", ses, "", fmt.Errorf("%w: %w", ErrFailed, err)
	case err != nil:
		// The sign-in was good; recording its user failed (the database
		// away): Gantry's fault, not a bad link.
		return "", ses, "", fmt.Errorf("record the user: %w", err)
	}
	cookie = random(32)
	now := s.now()
	ses = Session{IDHash: token.Hash(cookie), Identity: id, CSRF: random(32), CreatedAt: now, ExpiresAt: now.Add(s.cfg.Lifetime)}
	if err := s.store.CreateSession(ctx, ses); err != nil {
		return "", Session{}, "", fmt.Errorf("record session: %w", err)
	}
	return cookie, ses, l.ReturnTo, nil
}

// Authenticate returns the live session a cookie value names.
func (s *Service) Authenticate(ctx context.Context, cookie string) (Session, error) {
	if cookie == "" {
		return Session{}, ErrNoSession
	}
	ses, u, err := s.store.SessionAndUser(ctx, token.Hash(cookie))
	var nf *fault.NotFound
	if errors.As(err, &nf) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, err
	}
	if !s.now().Before(ses.ExpiresAt) {
		return Session{}, ErrNoSession
	}
	// The session acts as its user is now: current groups; none once the
	// user is deactivated or their groups are too old (sign in again).
	cur, err := s.users.CurrentFrom(ses.Identity, u)
	if errors.Is(err, user.ErrStale) || errors.Is(err, user.ErrDeactivated) {
		return Session{}, fmt.Errorf("%w: %w", ErrNoSession, err)
	}
	if err != nil {
		return Session{}, err
	}
	ses.Identity = cur
	return ses, nil
}

// CheckCSRF reports whether a presented CSRF token is the session's.
func (ses Session) CheckCSRF(presented string) bool {
	return presented != "" && subtle.ConstantTimeCompare([]byte(presented), []byte(ses.CSRF)) == 1
}

// End signs a session out; the cookie stops working at once.
func (s *Service) End(ctx context.Context, cookie string) error {
	if cookie == "" {
		return nil
	}
	return s.store.DeleteSession(ctx, token.Hash(cookie))
}

// LocalPath keeps a return address on this site: an absolute path, cleaned
// as http.Redirect would clean it (so what is checked is what is sent), with
// its query, in printable ASCII (a client percent-encodes anything else, and
// escapes stay escaped), never a host, a scheme, a backslash or a control
// character anywhere: browsers read a backslash as "/" and drop tabs and
// newlines (the WHATWG URL parser's rules), so "/\\evil.example" would leave
// the site. Anything else, or anything longer than MaxReturnPath, becomes
// "/".
func LocalPath(p string) string {
	if p == "" || len(p) > MaxReturnPath || !strings.HasPrefix(p, "/") || strings.ContainsFunc(p, func(r rune) bool {
		return r == '\\' || r < 0x20 || r >= 0x7f || unicode.IsSpace(r)
	}) {
		return "/"
	}
	u, err := url.Parse(p)
	if err != nil || u.Host != "" || u.Scheme != "" || u.Opaque != "" || u.User != nil {
		return "/"
	}
	// Browsers (the WHATWG URL parser) read %2e in a path segment as a dot,
	// so "/w/%2e%2e/x" means "/x": clean what the browser will resolve.
	cleaned := path.Clean(dotEncoded.Replace(u.EscapedPath()))
	if !strings.HasPrefix(cleaned, "/") || strings.HasPrefix(cleaned, "//") {
		return "/"
	}
	if u.RawQuery != "" {
		cleaned += "?" + u.RawQuery
	}
	if r, err := url.Parse(cleaned); err != nil || r.Host != "" || r.Scheme != "" {
		return "/"
	}
	return cleaned
}

var dotEncoded = strings.NewReplacer("%2e", ".", "%2E", ".")

// MaxReturnPath bounds a return address (a portal page and its query):
// each sign-in begun stores one until it ends or expires, so a longer one
// becomes "/".
const MaxReturnPath = 2048

func random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Cookie names: the session, and the state of a sign-in in progress (sent
// only to the callback).
const (
	SessionCookie = "gantry_session"
	StateCookie   = "gantry_login"
)
