// Package devidp owns the development OpenID provider: a real OpenID Connect
// provider (the op package of github.com/zitadel/oidc/v3) that runs inside
// `gantry serve` and `gantry dev` when no external provider is configured, and
// in tests. Its users come from configuration; it signs them in with a password
// form, supports the authorization code flow with PKCE, refresh tokens and the
// device authorization grant, and puts the user's groups in the ID token.
// Gantry talks to it only through standard OIDC, exactly as it talks to
// Keycloak, Dex, Entra ID or Okta. Its keys and state live in memory: a restart
// signs everyone out.
package devidp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// ScopeGroups asks for the user's groups in the "groups" claim.
const ScopeGroups = "groups"

// User is a development user.
type User struct {
	Username string   `json:"username"`
	Password string   `json:"password"`
	Name     string   `json:"name"`
	Email    string   `json:"email"`
	Groups   []string `json:"groups"`
	// SecondFactor: signing in as this user counts as signing in with a
	// second factor (amr "pwd" and "otp"); without it, amr is "pwd" alone.
	SecondFactor bool `json:"secondFactor"`
}

// AMR is what the user's sign-in says of how they authenticated.
func (u User) AMR() []string {
	if u.SecondFactor {
		return []string{"pwd", "otp"}
	}
	return []string{"pwd"}
}

// Subject is the user's stable subject claim.
func (u User) Subject() string { return "dev-" + u.Username }

// Client is a registered OAuth client.
type Client struct {
	ID string
	// Secret makes a confidential client (the portal); empty means a public
	// client that must use PKCE or the device grant (the CLI).
	Secret       string
	RedirectURIs []string
	// Device allows the device authorization grant.
	Device bool
}

// Options configure the provider.
type Options struct {
	Issuer  string // e.g. http://127.0.0.1:8081
	Users   []User
	Clients []Client
	// TokenLifetime is how long ID and access tokens live (default 15m).
	TokenLifetime time.Duration
	Logger        *slog.Logger
	// SigningKey signs its tokens; a new RSA key when nil. (Tests that
	// start many providers in one process share one: generating an RSA
	// key is most of a provider's start.)
	SigningKey *rsa.PrivateKey
}

// Provider is the running provider's HTTP handler.
type Provider struct {
	http.Handler
	store  *storage
	issuer string
}

// New builds a provider.
func New(o Options) (*Provider, error) {
	if o.Issuer == "" {
		return nil, errors.New("devidp: issuer is required")
	}
	if o.TokenLifetime == 0 {
		o.TokenLifetime = 15 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var clients []*client
	for _, c := range o.Clients {
		clients = append(clients, newClient(c, o.TokenLifetime))
	}
	st, err := newStorage(o.Users, clients, o.TokenLifetime, o.SigningKey)
	if err != nil {
		return nil, err
	}
	var cryptoKey [32]byte
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		return nil, err
	}
	cfg := &op.Config{
		CryptoKey:                cryptoKey,
		CryptoKeyId:              randomID(),
		DefaultLogoutRedirectURI: "/signed-out",
		CodeMethodS256:           true,
		AuthMethodPost:           true,
		GrantTypeRefreshToken:    true,
		SupportedUILocales:       []language.Tag{language.English},
		SupportedClaims:          append(op.DefaultSupportedClaims, "groups"),
		SupportedScopes:          []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess, ScopeGroups},
		DeviceAuthorization: op.DeviceAuthorizationConfig{
			Lifetime: 10 * time.Minute, PollInterval: time.Second, UserFormPath: "/device", UserCode: op.UserCodeBase20,
		},
	}
	var opts []op.Option
	if strings.HasPrefix(o.Issuer, "http://") {
		opts = append(opts, op.WithAllowInsecure())
	}
	provider, err := op.NewProvider(cfg, st, op.StaticIssuer(o.Issuer), opts...)
	if err != nil {
		return nil, fmt.Errorf("devidp: %w", err)
	}
	p := &Provider{store: st, issuer: o.Issuer}
	interceptor := op.NewIssuerInterceptor(provider.IssuerFromRequest)
	callback := op.AuthCallbackURL(provider)
	mux := http.NewServeMux()
	mux.Handle("/login", interceptor.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.login(w, r, callback) }))
	mux.HandleFunc("/device", p.device)
	mux.HandleFunc("/signed-out", func(w http.ResponseWriter, r *http.Request) {
		render(w, http.StatusOK, page{Title: "Signed out", Message: "You are signed out of the development provider."})
	})
	mux.Handle("/", provider)
	p.Handler = headers(mux)
	return p, nil
}

// Issuer is the provider's issuer URL.
func (p *Provider) Issuer() string { return p.issuer }

// Start serves a provider on addr (e.g. 127.0.0.1:0) until ctx ends. The
// issuer is http://<the address it listens on>.
func Start(ctx context.Context, addr string, o Options) (*Provider, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("development OpenID provider: listen: %w", err)
	}
	o.Issuer = "http://" + ln.Addr().String()
	p, err := New(o)
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return p, nil
}

// client implements op.Client.
type client struct {
	id, secret   string
	redirectURIs []string
	device       bool
	ttl          time.Duration
}

func newClient(c Client, ttl time.Duration) *client {
	return &client{id: c.ID, secret: c.Secret, redirectURIs: c.RedirectURIs, device: c.Device, ttl: ttl}
}

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return c.redirectURIs }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) LoginURL(id string) string           { return "/login?id=" + id }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration      { return c.ttl }
func (c *client) DevMode() bool                       { return false }
func (c *client) ClockSkew() time.Duration            { return 0 }
func (c *client) IsScopeAllowed(scope string) bool    { return scope == ScopeGroups }

// IDTokenUserinfoClaimsAssertion puts profile, email and groups in the ID
// token itself, which is what Gantry reads.
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) ApplicationType() op.ApplicationType {
	if c.secret == "" {
		return op.ApplicationTypeNative
	}
	return op.ApplicationTypeWeb
}
func (c *client) AuthMethod() oidc.AuthMethod {
	if c.secret == "" {
		return oidc.AuthMethodNone
	}
	return oidc.AuthMethodBasic
}
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType {
	g := []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
	if c.device {
		g = append(g, oidc.GrantTypeDeviceCode)
	}
	return g
}

// login shows the password form for an authorization request and, on a
// right password, hands the request back to the provider.
func (p *Provider) login(w http.ResponseWriter, r *http.Request, callback func(context.Context, string) string) {
	if err := r.ParseForm(); err != nil {
		render(w, http.StatusBadRequest, page{Title: "Sign in", Error: "The form could not be read."})
		return
	}
	id := r.Form.Get("id")
	if _, err := p.store.AuthRequestByID(r.Context(), id); err != nil {
		render(w, http.StatusBadRequest, page{Title: "Sign in", Error: "This sign-in request is unknown or has expired. Start again from Gantry."})
		return
	}
	if r.Method != http.MethodPost {
		render(w, http.StatusOK, page{Title: "Sign in", Login: true, ID: id})
		return
	}
	u, ok := p.store.userByPassword(r.PostForm.Get("username"), r.PostForm.Get("password"))
	if !ok {
		render(w, http.StatusUnauthorized, page{Title: "Sign in", Login: true, ID: id, Error: "Wrong username or password."})
		return
	}
	if err := p.store.signIn(id, u); err != nil {
		render(w, http.StatusBadRequest, page{Title: "Sign in", Error: "This sign-in request is unknown or has expired."})
		return
	}
	http.Redirect(w, r, callback(r.Context(), id), http.StatusFound)
}

// device is the verification page of the device grant: the user enters the
// code the CLI printed, signs in, and allows or denies.
func (p *Provider) device(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		render(w, http.StatusBadRequest, page{Title: "Device sign-in", Error: "The form could not be read."})
		return
	}
	code := strings.ToUpper(strings.TrimSpace(r.Form.Get("user_code")))
	pg := page{Title: "Device sign-in", Device: true, UserCode: code}
	if r.Method != http.MethodPost {
		render(w, http.StatusOK, pg)
		return
	}
	u, ok := p.store.userByPassword(r.PostForm.Get("username"), r.PostForm.Get("password"))
	if !ok {
		pg.Error = "Wrong username or password."
		render(w, http.StatusUnauthorized, pg)
		return
	}
	allow := r.PostForm.Get("action") == "allow"
	if err := p.store.decideDevice(code, u, allow); err != nil {
		pg.Error = err.Error()
		render(w, http.StatusBadRequest, pg)
		return
	}
	msg := "Access denied. You can close this page."
	if allow {
		msg = "Signed in as " + u.Name + ". Return to your terminal."
	}
	render(w, http.StatusOK, page{Title: "Device sign-in", Message: msg})
}

type page struct {
	Title, Error, Message, ID, UserCode string
	Login, Device                       bool
}

var pages = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} · Gantry development provider</title>
<style>body{font-family:system-ui,sans-serif;max-width:26rem;margin:3rem auto;padding:0 1rem}label{display:block;margin:.6rem 0}input{width:100%;padding:.4rem}.error{color:#b00020}button{margin:.8rem .4rem 0 0;padding:.4rem 1rem}</style>
</head><body>
<h1>{{.Title}}</h1>
<p><small>Gantry development OpenID provider: for local use only.</small></p>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
{{if .Message}}<p id="message">{{.Message}}</p>{{end}}
{{if .Login}}<form method="post" action="/login">
<input type="hidden" name="id" value="{{.ID}}">
<label>Username <input id="username" name="username" autocomplete="username" autofocus required></label>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password" required></label>
<button id="submit" type="submit">Sign in</button>
</form>{{end}}
{{if .Device}}<form method="post" action="/device">
<label>Code shown by the CLI <input id="user_code" name="user_code" value="{{.UserCode}}" required></label>
<label>Username <input id="username" name="username" autocomplete="username" required></label>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password" required></label>
<button id="allow" name="action" value="allow" type="submit">Allow</button>
<button id="deny" name="action" value="deny" type="submit">Deny</button>
</form>{{end}}
</body></html>`))

func render(w http.ResponseWriter, status int, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	pages.Execute(w, p)
}

func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
