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
		return nil, fmt.Errorf("oidc: discover %s: %w", cfg.Issuer, err)
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
		SupportedSigningAlgs: []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.EdDSA},
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
	h := r.Header.Get("Authorization")
	raw, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(raw) == "" {
		return identity.Identity{}, ErrNoCredentials
	}
	return a.Verify(r.Context(), strings.TrimSpace(raw))
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
	id, tok, err := a.check(ctx, raw)
	if err != nil {
		return id, time.Time{}, err
	}
	return id, tok.Expiry, nil
}

func (a *Authenticator) check(ctx context.Context, raw string) (identity.Identity, *oidc.IDToken, error) {
	tok, err := a.verifier.Verify(ctx, raw)
	if err != nil {
		return identity.Identity{}, nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if !slices.ContainsFunc(tok.Audience, func(aud string) bool { return slices.Contains(a.cfg.Audiences, aud) }) {
		return identity.Identity{}, nil, fmt.Errorf("%w: audience %v is not one of %v", ErrInvalidToken, tok.Audience, a.cfg.Audiences)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return identity.Identity{}, nil, fmt.Errorf("%w: claims: %v", ErrInvalidToken, err)
	}
	if nbf, ok := claims["nbf"].(float64); ok {
		if a.now().Add(a.cfg.ClockSkew).Before(time.Unix(int64(nbf), 0)) {
			return identity.Identity{}, nil, fmt.Errorf("%w: not valid before %v", ErrInvalidToken, time.Unix(int64(nbf), 0))
		}
	}
	id := identity.Identity{Issuer: tok.Issuer}
	id.Subject, _ = claims[a.cfg.Claims.Subject].(string)
	id.Email, _ = claims[a.cfg.Claims.Email].(string)
	id.Name, _ = claims[a.cfg.Claims.Name].(string)
	switch g := claims[a.cfg.Claims.Groups].(type) {
	case []any:
		for _, x := range g {
			if s, ok := x.(string); ok {
				id.Groups = append(id.Groups, s)
			}
		}
	case string:
		id.Groups = strings.Fields(g)
	}
	if id.Subject == "" {
		return identity.Identity{}, nil, fmt.Errorf("%w: no %q claim", ErrInvalidToken, a.cfg.Claims.Subject)
	}
	id.SecondFactor = a.secondFactor(claims)
	return id, tok, nil
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
func (a *Authenticator) VerifyIDToken(ctx context.Context, raw, clientID, nonce string) (identity.Identity, error) {
	id, tok, err := a.check(ctx, raw)
	if err != nil {
		return id, err
	}
	if !slices.Contains(tok.Audience, clientID) {
		return identity.Identity{}, fmt.Errorf("%w: issued to %v, not %s", ErrInvalidToken, tok.Audience, clientID)
	}
	if nonce == "" || subtle.ConstantTimeCompare([]byte(tok.Nonce), []byte(nonce)) != 1 {
		return identity.Identity{}, fmt.Errorf("%w: the nonce does not match this sign-in", ErrInvalidToken)
	}
	return id, nil
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
