// Package authn owns authenticating API requests: bearer JWTs from the
// configured OpenID provider, verified with go-oidc — issuer, signature against
// the provider's JWKS (fetched again when no cached key verifies a token, at
// most once a minute, so forged tokens cannot make Gantry hammer the provider),
// audience among those allowed, expiry and not-before within a small clock skew
// — and mapped to an identity through configurable claims. Users are keyed on
// (issuer, subject), never on email. Production speaks only standard OIDC, so
// any compliant provider works by configuration.
package authn

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/gantryhq/gantry/internal/identity"
)

// Claims names the token claims that make an identity.
type Claims struct {
	Subject string `json:"subject"` // default "sub"
	Email   string `json:"email"`   // default "email"
	Name    string `json:"name"`    // default "name"
	Groups  string `json:"groups"`  // default "groups"
}

// Config configures token verification.
type Config struct {
	Issuer    string        `json:"issuer"`
	Audiences []string      `json:"audiences"` // e.g. the portal's and the CLI's client ids
	ClockSkew time.Duration `json:"-"`
	Claims    Claims        `json:"claims"`
	// SecondFactor says which claims show that a second factor was used.
	SecondFactor SecondFactor `json:"secondFactor"`
	// Now is the server's clock tokens expire by (required).
	Now func() time.Time `json:"-"`
}

// SecondFactor names what a token's amr (RFC 8176 authentication methods)
// or acr (authentication context class) must hold for its identity to count
// as signed in with a second factor.
type SecondFactor struct {
	AMR []string // any of these methods (default: mfa, otp, hwk)
	ACR []string // or this context class (none by default)
}

// DefaultAMR are the RFC 8176 methods that are a second factor, or say one
// was used.
var DefaultAMR = []string{"mfa", "otp", "hwk"}

// Errors callers branch on; both answer 401.
var (
	ErrNoCredentials = errors.New("no bearer token")
	ErrInvalidToken  = errors.New("invalid token")
)

// Authenticator verifies bearer tokens.
type Authenticator struct {
	cfg      Config
	verifier *oidc.IDTokenVerifier
	provider *oidc.Provider
	keys     *keySet
	now      func() time.Time

	// verified caches identities of tokens already verified, by the token's
	// SHA-256, until the token expires: a JWT cannot be revoked before its
	// expiry anyway, so the cache changes no answer, only the cost.
	mu       sync.Mutex
	verified map[[32]byte]cached
}

type cached struct {
	id      identity.Identity
	expires time.Time
}

// maxVerified bounds the cache; when full, it is emptied.
const maxVerified = 10_000

// New discovers the provider (its /.well-known/openid-configuration) and
// returns an Authenticator for it.
func New(ctx context.Context, cfg Config) (*Authenticator, error) {
	if cfg.Issuer == "" || len(cfg.Audiences) == 0 || cfg.Now == nil {
		return nil, errors.New("oidc: an issuer, at least one audience and a clock (Now) are required")
	}
	if cfg.ClockSkew == 0 {
		cfg.ClockSkew = 30 * time.Second
	}
	defaults(&cfg.Claims)
	p, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		// The issuer must match the provider's own spelling exactly, and
		// providers differ on a trailing slash (Auth0's has one, Keycloak's
		// none): the other spelling is tried once.
		other := cfg.Issuer + "/"
		if strings.HasSuffix(cfg.Issuer, "/") {
			other = strings.TrimSuffix(cfg.Issuer, "/")
		}
		op, oerr := oidc.NewProvider(ctx, other)
		if oerr != nil {
			return nil, fmt.Errorf("oidc: discover %s: %w", cfg.Issuer, err)
		}
		p, cfg.Issuer = op, other
	}
	var meta struct {
		JWKS string `json:"jwks_uri"`
	}
	if err := p.Claims(&meta); err != nil || meta.JWKS == "" {
		return nil, fmt.Errorf("oidc: %s publishes no jwks_uri", cfg.Issuer)
	}
	a := &Authenticator{cfg: cfg, now: cfg.Now, verified: map[[32]byte]cached{}, provider: p}
	keys, err := newKeySet(ctx, meta.JWKS, func() time.Time { return a.now() })
	if err != nil {
		return nil, fmt.Errorf("oidc: %w", err)
	}
	a.keys = keys
	a.verifier = oidc.NewVerifier(cfg.Issuer, keys, &oidc.Config{
		SkipClientIDCheck: true, // several audiences: checked below
		// Expiry is checked against a clock set back by the skew; go-oidc's own
		// not-before leeway is wider than ours, so not-before is checked below.
		Now:                  func() time.Time { return a.now().Add(-cfg.ClockSkew) },
		SupportedSigningAlgs: []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA},
	})
	return a, nil
}

func defaults(c *Claims) {
	if c.Subject == "" {
		c.Subject = "sub"
	}
	if c.Email == "" {
		c.Email = "email"
	}
	if c.Name == "" {
		c.Name = "name"
	}
	if c.Groups == "" {
		c.Groups = "groups"
	}
}

// Identify authenticates a request by its bearer token. Errors wrap
// ErrNoCredentials or ErrInvalidToken; their detail is for logs, not callers.
func (a *Authenticator) Identify(r *http.Request) (identity.Identity, error) {
	raw, ok := BearerToken(r.Header.Get("Authorization"))
	if !ok {
		return identity.Identity{}, ErrNoCredentials
	}
	return a.Verify(r.Context(), raw)
}

// BearerToken is the token of an Authorization header of the Bearer scheme,
// whose name is case-insensitive (RFC 9110 11.1, RFC 6750).
func BearerToken(h string) (string, bool) {
	scheme, raw, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(raw) == "" {
		return "", false
	}
	return strings.TrimSpace(raw), true
}

// Verify checks a raw JWT and maps it to an identity.
func (a *Authenticator) Verify(ctx context.Context, raw string) (identity.Identity, error) {
	key := sha256.Sum256([]byte(raw))
	a.mu.Lock()
	c, ok := a.verified[key]
	a.mu.Unlock()
	if ok && a.now().Add(-a.cfg.ClockSkew).Before(c.expires) {
		return c.id, nil
	}
	id, expires, err := a.verify(ctx, raw)
	if err != nil {
		return id, err
	}
	a.mu.Lock()
	if len(a.verified) >= maxVerified {
		clear(a.verified)
	}
	a.verified[key] = cached{id: id, expires: expires}
	a.mu.Unlock()
	return id, nil
}

func (a *Authenticator) verify(ctx context.Context, raw string) (identity.Identity, time.Time, error) {
	id, tok, _, err := a.check(ctx, raw)
	if err != nil {
		return id, time.Time{}, err
	}
	return id, tok.Expiry, nil
}

// check verifies raw and maps it to an identity; the token and its claims
// come with it, for the checks a sign-in adds.
func (a *Authenticator) check(ctx context.Context, raw string) (identity.Identity, *oidc.IDToken, map[string]any, error) {
	tok, err := a.verifier.Verify(ctx, raw)
	if err != nil {
		return identity.Identity{}, nil, nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if !slices.ContainsFunc(tok.Audience, func(aud string) bool { return slices.Contains(a.cfg.Audiences, aud) }) {
		return identity.Identity{}, nil, nil, fmt.Errorf("%w: audience %v is not one of %v", ErrInvalidToken, tok.Audience, a.cfg.Audiences)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return identity.Identity{}, nil, nil, fmt.Errorf("%w: claims: %v", ErrInvalidToken, err)
	}
	// The party the token was issued to (OIDC Core 2, azp) must be one of
	// Gantry's clients too: a provider may list Gantry among the audiences
	// of a token it issued to another application (Keycloak does, for the
	// clients whose roles a user holds), and that application must not
	// present its tokens here as the user. A token of several audiences must
	// say which it was issued to (OIDC Core 3.1.3.7).
	azp, _ := claims["azp"].(string)
	switch {
	case azp != "" && !slices.Contains(a.cfg.Audiences, azp):
		return identity.Identity{}, nil, nil, fmt.Errorf("%w: issued to client %q, not one of %v", ErrInvalidToken, azp, a.cfg.Audiences)
	case azp == "" && len(tok.Audience) > 1:
		return identity.Identity{}, nil, nil, fmt.Errorf("%w: a token of several audiences %v names no authorized party (azp)", ErrInvalidToken, tok.Audience)
	}
	if nbf, ok := claims["nbf"].(float64); ok {
		if a.now().Add(a.cfg.ClockSkew).Before(time.Unix(int64(nbf), 0)) {
			return identity.Identity{}, nil, nil, fmt.Errorf("%w: not valid before %v", ErrInvalidToken, time.Unix(int64(nbf), 0))
		}
	}
	// The configured issuer, not the token's spelling of it: go-oidc
	// accepts Google's "accounts.google.com" for "https://accounts.google.com",
	// and one person must be one user.
	id := identity.Identity{Issuer: a.cfg.Issuer, IssuedAt: tok.IssuedAt}
	id.Subject, _ = Claim(claims, a.cfg.Claims.Subject).(string)
	id.Email, _ = Claim(claims, a.cfg.Claims.Email).(string)
	id.Name, _ = Claim(claims, a.cfg.Claims.Name).(string)
	groups := Claim(claims, a.cfg.Claims.Groups)
	id.Groups, id.GroupsAbsent = Groups(groups), groups == nil
	if groups == nil {
		// Entra ID's group overage: past 200 groups the token carries a
		// pointer to Microsoft Graph instead (_claim_names). Acting with
		// no groups would look like a user who belongs nowhere.
		if names, ok := claims["_claim_names"].(map[string]any); ok && names[a.cfg.Claims.Groups] != nil {
			return identity.Identity{}, nil, nil, fmt.Errorf("%w: the token names the %q claim's source instead of the groups (_claim_names: the provider's group overage, as Entra ID sends past 200 groups); have the provider send only the groups assigned to Gantry's application", ErrInvalidToken, a.cfg.Claims.Groups)
		}
	}
	if id.Subject == "" {
		return identity.Identity{}, nil, nil, fmt.Errorf("%w: no %q claim", ErrInvalidToken, a.cfg.Claims.Subject)
	}
	// A subject from a claim the person may change (an e-mail address)
	// names them only where the provider verified it: otherwise anyone could
	// take another's name there, and with it their user.
	if mutable[a.cfg.Claims.Subject] && !verified(claims["email_verified"]) {
		return identity.Identity{}, nil, nil, fmt.Errorf("%w: the subject claim %q is not verified by the provider (email_verified)", ErrInvalidToken, a.cfg.Claims.Subject)
	}
	id.SecondFactor = a.secondFactor(claims)
	return id, tok, claims, nil
}

// mutable are claims that may name a user's subject only when the
// provider says it verified them (email_verified).
var mutable = map[string]bool{"email": true}

// verified reads email_verified, which some providers send as a string.
func verified(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return strings.EqualFold(v, "true")
	}
	return false
}

// Claim is the value of a claim: the top-level claim of that exact name
// (names may hold dots: Auth0's "https://example.com/groups"), else the
// path of a dotted name through nested objects (Keycloak's
// "realm_access.roles"); nil when there is neither.
func Claim(claims map[string]any, name string) any {
	if v, ok := claims[name]; ok {
		return v
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// Groups reads a groups claim: an array of names, or one name as a string
// (a provider with one group to send may send it bare) — never split on
// spaces, since a group's name may hold them ("GPU Admins" is not "GPU"
// and "Admins").
func Groups(v any) []string {
	var out []string
	switch g := v.(type) {
	case []any:
		for _, x := range g {
			if s, ok := x.(string); ok && s != "" {
				out = append(out, s)
			}
		}
	case string:
		if g != "" {
			out = []string{g}
		}
	}
	return out
}

// secondFactor reads amr and acr.
func (a *Authenticator) secondFactor(claims map[string]any) bool {
	amr := a.cfg.SecondFactor.AMR
	if len(amr) == 0 {
		amr = DefaultAMR
	}
	if methods, ok := claims["amr"].([]any); ok {
		for _, m := range methods {
			if s, ok := m.(string); ok && slices.Contains(amr, s) {
				return true
			}
		}
	}
	acr, _ := claims["acr"].(string)
	return acr != "" && slices.Contains(a.cfg.SecondFactor.ACR, acr)
}

// VerifyIDToken checks an ID token received at sign-in: everything Verify
// checks, and that it was issued to clientID with the nonce of this sign-in.
// An ID token without the groups claim takes it from the provider's
// userinfo endpoint, read with the sign-in's access token (userinfo; nil:
// not read): Okta, Ping and others may be set to send groups only there.
func (a *Authenticator) VerifyIDToken(ctx context.Context, raw, clientID, nonce string, userinfo oauth2.TokenSource) (identity.Identity, error) {
	id, tok, claims, err := a.check(ctx, raw)
	if err != nil {
		return id, err
	}
	if !slices.Contains(tok.Audience, clientID) {
		return identity.Identity{}, fmt.Errorf("%w: issued to %v, not %s", ErrInvalidToken, tok.Audience, clientID)
	}
	if azp, _ := claims["azp"].(string); azp != "" && azp != clientID {
		return identity.Identity{}, fmt.Errorf("%w: issued to client %q, not %s", ErrInvalidToken, azp, clientID)
	}
	if nonce == "" || subtle.ConstantTimeCompare([]byte(tok.Nonce), []byte(nonce)) != 1 {
		return identity.Identity{}, fmt.Errorf("%w: the nonce does not match this sign-in", ErrInvalidToken)
	}
	if userinfo != nil && id.GroupsAbsent {
		if id.Groups, err = a.userInfoGroups(ctx, userinfo, tok.Subject); err != nil {
			return identity.Identity{}, err
		}
	}
	// A sign-in says what the user's groups are now, from the ID token or
	// userinfo; none from either is none.
	id.GroupsAbsent = false
	return id, nil
}

// userInfoGroups reads the groups claim from the provider's userinfo
// endpoint, whose sub must be the ID token's sub (OIDC Core 5.3.2). A
// provider without the endpoint has no groups to give.
func (a *Authenticator) userInfoGroups(ctx context.Context, ts oauth2.TokenSource, sub string) ([]string, error) {
	if a.provider.UserInfoEndpoint() == "" {
		return nil, nil
	}
	info, err := a.provider.UserInfo(ctx, ts)
	if err != nil {
		return nil, fmt.Errorf("%w: the provider's userinfo, for the groups the ID token lacks: %v", ErrInvalidToken, err)
	}
	var claims map[string]any
	if err := info.Claims(&claims); err != nil {
		return nil, fmt.Errorf("%w: the provider's userinfo: %v", ErrInvalidToken, err)
	}
	// The sub claims, whatever claim names Gantry's users (Entra ID's
	// userinfo has no oid): userinfo's answer is about the ID token's
	// subject, or it is not about this sign-in.
	if got, _ := claims["sub"].(string); got != sub {
		return nil, fmt.Errorf("%w: the provider's userinfo is about %q, the ID token about %q", ErrInvalidToken, got, sub)
	}
	return Groups(Claim(claims, a.cfg.Claims.Groups)), nil
}

// Issuer is the provider's issuer, as the provider spells it.
func (a *Authenticator) Issuer() string { return a.cfg.Issuer }

// Scopes are what a sign-in asks for when none are configured: openid,
// profile and email, which every provider knows; groups where the
// provider's discovery lists it (Dex and Okta send the groups claim only
// when asked; Google refuses a scope it does not know, so it is never
// asked blindly); and, for a client that keeps a refresh token (the CLI),
// offline_access where listed. The portal keeps none, so it asks for no
// offline session.
func (a *Authenticator) Scopes(refresh bool) []string {
	var d struct {
		Supported []string `json:"scopes_supported"`
	}
	a.provider.Claims(&d)
	out := []string{oidc.ScopeOpenID, "profile", "email"}
	if slices.Contains(d.Supported, "groups") {
		out = append(out, "groups")
	}
	if refresh && slices.Contains(d.Supported, oidc.ScopeOfflineAccess) {
		out = append(out, oidc.ScopeOfflineAccess)
	}
	return out
}

// Endpoint is the provider's authorization and token endpoints.
func (a *Authenticator) Endpoint() oauth2.Endpoint { return a.provider.Endpoint() }

// DeviceAuthorizationEndpoint is the provider's device authorization
// endpoint (RFC 8628), "" when it has none.
func (a *Authenticator) DeviceAuthorizationEndpoint() string {
	var d struct {
		Device string `json:"device_authorization_endpoint"`
	}
	a.provider.Claims(&d)
	return d.Device
}
