package authn_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/gantryhq/gantry/internal/authn"
)

// issuer is a minimal OpenID provider for verification: discovery and a JWKS
// whose keys the test rotates. (The full in-process provider for logins is the
// dev identity's job.)
type issuer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys []jose.JSONWebKey
	sign map[string]*rsa.PrivateKey
	// scopes is its discovery's scopes_supported (none listed when nil).
	scopes []string
}

func newIssuer(t testing.TB) *issuer {
	is := &issuer{sign: map[string]*rsa.PrivateKey{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		d := map[string]any{
			"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/keys",
			"authorization_endpoint": is.srv.URL + "/authorize", "token_endpoint": is.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		}
		if is.scopes != nil {
			d["scopes_supported"] = is.scopes
		}
		json.NewEncoder(w).Encode(d)
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		is.mu.Lock()
		defer is.mu.Unlock()
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: is.keys})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	is.addKey(t, "k1", true)
	return is
}

// addKey makes a signing key; published keys appear in the JWKS.
func (is *issuer) addKey(t testing.TB, kid string, publish bool) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	is.sign[kid] = k
	if publish {
		is.keys = append(is.keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"})
	}
}

func (is *issuer) token(t testing.TB, kid string, claims map[string]any) string {
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: is.sign[kid]}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (is *issuer) claims(mod func(map[string]any)) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": is.srv.URL, "sub": "user-123", "aud": "gantry-portal", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
		"email": "ann@example.com", "name": "Ann", "groups": []string{"ml-vision"}, "roles": []string{"ml-nlp"},
	}
	if mod != nil {
		mod(c)
	}
	return c
}

func auth(t testing.TB, is *issuer, claims authn.Claims) *authn.Authenticator {
	a, err := authn.New(context.Background(), authn.Config{Issuer: is.srv.URL, Audiences: []string{"gantry-portal", "gantry-cli"}, ClockSkew: 30 * time.Second, Claims: claims, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestVerify(t *testing.T) {
	is := newIssuer(t)
	other := newIssuer(t)
	a := auth(t, is, authn.Claims{})
	now := time.Now()
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString(mustJSON(is.claims(nil))) + "."
	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{"valid", is.token(t, "k1", is.claims(nil)), true},
		{"second audience", is.token(t, "k1", is.claims(func(c map[string]any) { c["aud"] = "gantry-cli" })), true},
		{"several audiences, issued to one of Gantry's clients", is.token(t, "k1", is.claims(func(c map[string]any) {
			c["aud"], c["azp"] = []string{"other", "gantry-cli"}, "gantry-cli"
		})), true},
		{"several audiences, no authorized party", is.token(t, "k1", is.claims(func(c map[string]any) { c["aud"] = []string{"other", "gantry-cli"} })), false},
		// Keycloak lists the clients whose roles a user holds among the
		// audiences of a token it issued to another application.
		{"issued to another client that lists Gantry's", is.token(t, "k1", is.claims(func(c map[string]any) {
			c["aud"], c["azp"] = []string{"gantry-portal", "account"}, "other-app"
		})), false},
		{"one audience, issued to another client", is.token(t, "k1", is.claims(func(c map[string]any) { c["azp"] = "other-app" })), false},
		{"expired within the skew", is.token(t, "k1", is.claims(func(c map[string]any) { c["exp"] = now.Add(-10 * time.Second).Unix() })), true},
		{"expired", is.token(t, "k1", is.claims(func(c map[string]any) { c["exp"] = now.Add(-2 * time.Minute).Unix() })), false},
		{"not yet valid", is.token(t, "k1", is.claims(func(c map[string]any) { c["nbf"] = now.Add(2 * time.Minute).Unix() })), false},
		{"nbf within the skew", is.token(t, "k1", is.claims(func(c map[string]any) { c["nbf"] = now.Add(10 * time.Second).Unix() })), true},
		{"wrong issuer", other.token(t, "k1", other.claims(nil)), false},
		{"issuer claim of another", is.token(t, "k1", is.claims(func(c map[string]any) { c["iss"] = other.srv.URL })), false},
		{"wrong audience", is.token(t, "k1", is.claims(func(c map[string]any) { c["aud"] = "someone-else" })), false},
		{"forged: signed by a key the issuer never published", func() string { is.addKey(t, "evil", false); return is.token(t, "evil", is.claims(nil)) }(), false},
		{"alg none", none, false},
		{"garbage", "not.a.jwt", false},
		{"no subject", is.token(t, "k1", is.claims(func(c map[string]any) { delete(c, "sub") })), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := a.Verify(context.Background(), tc.token)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if id.Issuer != is.srv.URL || id.Subject != "user-123" || id.Email != "ann@example.com" || len(id.Groups) != 1 || id.Groups[0] != "ml-vision" {
					t.Fatalf("identity %+v", id)
				}
				return
			}
			if !errors.Is(err, authn.ErrInvalidToken) {
				t.Fatalf("err = %v, want ErrInvalidToken", err)
			}
		})
	}
}

// A token signed with a key published after the JWKS was first read is
// accepted: an unknown key id makes go-oidc fetch the JWKS again.
func TestKeyRotation(t *testing.T) {
	is := newIssuer(t)
	a := auth(t, is, authn.Claims{})
	if _, err := a.Verify(context.Background(), is.token(t, "k1", is.claims(nil))); err != nil {
		t.Fatal(err)
	}
	is.addKey(t, "k2", true)
	if _, err := a.Verify(context.Background(), is.token(t, "k2", is.claims(nil))); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
}

func TestClaimMapping(t *testing.T) {
	is := newIssuer(t)
	a := auth(t, is, authn.Claims{Groups: "roles", Subject: "oid"})
	id, err := a.Verify(context.Background(), is.token(t, "k1", is.claims(func(c map[string]any) { c["oid"] = "object-9" })))
	if err != nil {
		t.Fatal(err)
	}
	if id.Subject != "object-9" || len(id.Groups) != 1 || id.Groups[0] != "ml-nlp" || id.String() != is.srv.URL+"#object-9" {
		t.Fatalf("%+v", id)
	}
}

// TestClaimShapes: groups as one bare string stay one group; a dotted
// claim name reads nested objects unless a claim has that exact name; a
// subject taken from the e-mail address needs the provider's word that it
// is verified (a boolean or the string "true").
func TestClaimShapes(t *testing.T) {
	is := newIssuer(t)
	tests := []struct {
		name   string
		claims authn.Claims
		mod    func(map[string]any)
		want   []string // groups; nil with ok false: refused
		ok     bool
	}{
		{"one group as a string", authn.Claims{}, func(c map[string]any) { c["groups"] = "GPU Admins" }, []string{"GPU Admins"}, true},
		{"groups absent", authn.Claims{}, func(c map[string]any) { delete(c, "groups") }, nil, true},
		// Entra ID past 200 groups: a pointer to Microsoft Graph instead.
		{"groups elsewhere (overage)", authn.Claims{}, func(c map[string]any) {
			delete(c, "groups")
			c["_claim_names"] = map[string]any{"groups": "src1"}
			c["_claim_sources"] = map[string]any{"src1": map[string]any{"endpoint": "https://graph.microsoft.com/v1.0/users/x/getMemberObjects"}}
		}, nil, false},
		{"nested (Keycloak's realm roles)", authn.Claims{Groups: "realm_access.roles"}, func(c map[string]any) {
			c["realm_access"] = map[string]any{"roles": []string{"ml-vision", "offline_access"}}
		}, []string{"ml-vision", "offline_access"}, true},
		{"a name with dots (Auth0's namespaced claims)", authn.Claims{Groups: "https://gantry.example/groups"}, func(c map[string]any) {
			c["https://gantry.example/groups"] = []string{"ml-nlp"}
		}, []string{"ml-nlp"}, true},
		{"e-mail subject, verified", authn.Claims{Subject: "email"}, func(c map[string]any) { c["email_verified"] = true }, []string{"ml-vision"}, true},
		{"e-mail subject, verified as a string", authn.Claims{Subject: "email"}, func(c map[string]any) { c["email_verified"] = "true" }, []string{"ml-vision"}, true},
		{"e-mail subject, not verified", authn.Claims{Subject: "email"}, func(c map[string]any) { c["email_verified"] = false }, nil, false},
		{"e-mail subject, verification unsaid", authn.Claims{Subject: "email"}, nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := auth(t, is, tc.claims).Verify(context.Background(), is.token(t, "k1", is.claims(tc.mod)))
			if !tc.ok {
				if !errors.Is(err, authn.ErrInvalidToken) {
					t.Fatalf("err = %v, want ErrInvalidToken", err)
				}
				return
			}
			if err != nil || !slices.Equal(id.Groups, tc.want) {
				t.Fatalf("groups %q (%v), want %q", id.Groups, err, tc.want)
			}
		})
	}
}

// TestIssuerSlash: an issuer configured with a trailing slash the provider
// does not spell (or without one it does) is found, and its tokens verify
// under the provider's spelling, which keys the users.
func TestIssuerSlash(t *testing.T) {
	is := newIssuer(t)
	a, err := authn.New(context.Background(), authn.Config{Issuer: is.srv.URL + "/", Audiences: []string{"gantry-portal"}, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Verify(context.Background(), is.token(t, "k1", is.claims(nil)))
	if err != nil || id.Issuer != is.srv.URL {
		t.Fatalf("%+v %v", id, err)
	}
	if _, err := authn.New(context.Background(), authn.Config{Issuer: is.srv.URL + "/elsewhere", Audiences: []string{"gantry-portal"}, Now: time.Now}); err == nil {
		t.Fatal("an issuer of another path was accepted")
	}
}

// TestGroupsAbsent: a token without the groups claim says so (it says
// nothing of the user's groups); one with an empty claim says there are
// none.
func TestGroupsAbsent(t *testing.T) {
	is := newIssuer(t)
	a := auth(t, is, authn.Claims{})
	for _, tc := range []struct {
		name   string
		mod    func(map[string]any)
		absent bool
	}{
		{"absent", func(c map[string]any) { delete(c, "groups") }, true},
		{"empty", func(c map[string]any) { c["groups"] = []string{} }, false},
		{"some", nil, false},
	} {
		id, err := a.Verify(context.Background(), is.token(t, "k1", is.claims(tc.mod)))
		if err != nil || id.GroupsAbsent != tc.absent {
			t.Errorf("%s: GroupsAbsent %v (%v), want %v", tc.name, id.GroupsAbsent, err, tc.absent)
		}
	}
}

// TestScopes: with none configured, a sign-in asks for what every
// provider knows, and for groups and offline_access (the CLI's only) where
// the provider lists them.
func TestScopes(t *testing.T) {
	tests := []struct {
		name        string
		supported   []string
		portal, cli []string
	}{
		{"none listed", nil, []string{"openid", "profile", "email"}, []string{"openid", "profile", "email"}},
		{"Google's", []string{"openid", "email", "profile"}, []string{"openid", "profile", "email"}, []string{"openid", "profile", "email"}},
		{"Dex's", []string{"openid", "email", "groups", "profile", "offline_access"},
			[]string{"openid", "profile", "email", "groups"}, []string{"openid", "profile", "email", "groups", "offline_access"}},
		{"Keycloak's, no groups scope", []string{"openid", "offline_access", "profile", "email", "roles"},
			[]string{"openid", "profile", "email"}, []string{"openid", "profile", "email", "offline_access"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := newIssuer(t)
			is.scopes = tc.supported
			a := auth(t, is, authn.Claims{})
			if got := a.Scopes(false); !slices.Equal(got, tc.portal) {
				t.Errorf("portal %v, want %v", got, tc.portal)
			}
			if got := a.Scopes(true); !slices.Equal(got, tc.cli) {
				t.Errorf("CLI %v, want %v", got, tc.cli)
			}
		})
	}
}

func TestIdentifyHeader(t *testing.T) {
	is := newIssuer(t)
	a := auth(t, is, authn.Claims{})
	r := httptest.NewRequest("GET", "/api/v1/templates", nil)
	if _, err := a.Identify(r); !errors.Is(err, authn.ErrNoCredentials) {
		t.Fatalf("no header: %v", err)
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} { // case-insensitive (RFC 9110 11.1)
		r.Header.Set("Authorization", scheme+" "+is.token(t, "k1", is.claims(nil)))
		if id, err := a.Identify(r); err != nil || id.Subject != "user-123" || id.IssuedAt.IsZero() {
			t.Fatalf("%s: %+v %v", scheme, id, err)
		}
	}
	r.Header.Set("Authorization", "Basic "+is.token(t, "k1", is.claims(nil)))
	if _, err := a.Identify(r); !errors.Is(err, authn.ErrNoCredentials) {
		t.Fatalf("another scheme: %v", err)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// BenchmarkVerify: a token's first verification (RS256 signature with the JWKS
// already fetched) against later ones (the verified-token cache).
func BenchmarkVerify(b *testing.B) {
	is := newIssuer(b)
	a := auth(b, is, authn.Claims{})
	ctx := context.Background()
	tokens := make([]string, 2000)
	for i := range tokens {
		tokens[i] = is.token(b, "k1", is.claims(func(c map[string]any) { c["jti"] = i }))
	}
	b.Run("first", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if i == len(tokens) {
				b.StopTimer()
				a = auth(b, is, authn.Claims{}) // an empty cache again
				i = 0
				b.StartTimer()
			}
			if _, err := a.Verify(ctx, tokens[i]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("warm", func(b *testing.B) {
		a.Verify(ctx, tokens[0])
		for b.Loop() {
			if _, err := a.Verify(ctx, tokens[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A cached token stops working when it expires: the cache never outlives it.
func TestCacheHonoursExpiry(t *testing.T) {
	is := newIssuer(t)
	a := auth(t, is, authn.Claims{})
	now := time.Now()
	a.SetClock(func() time.Time { return now })
	raw := is.token(t, "k1", is.claims(func(c map[string]any) { c["exp"] = now.Add(time.Minute).Unix() }))
	if _, err := a.Verify(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute) // past exp plus the 30 s skew
	if _, err := a.Verify(context.Background(), raw); !errors.Is(err, authn.ErrInvalidToken) {
		t.Fatalf("expired cached token: %v, want ErrInvalidToken", err)
	}
}

// tokenAs signs claims with the key made as signer but names kid in the
// header: a forgery that points at a key the provider really publishes.
func (is *issuer) tokenAs(t testing.TB, signer, kid string, claims map[string]any) string {
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: is.sign[signer]}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Forged tokens that name a published key id do not each make Gantry fetch
// the JWKS: at most one refetch per interval, and a key rotated in after the
// interval is still picked up on first sight.
func TestForgedTokensRefetchOncePerInterval(t *testing.T) {
	is := newIssuer(t)
	a := auth(t, is, authn.Claims{})
	now := time.Now()
	a.SetClock(func() time.Time { return now })
	is.addKey(t, "evil", false)
	base := a.KeyFetches()
	for i := range 50 {
		forged := is.tokenAs(t, "evil", "k1", is.claims(func(c map[string]any) { c["jti"] = i }))
		if _, err := a.Verify(context.Background(), forged); !errors.Is(err, authn.ErrInvalidToken) {
			t.Fatalf("forged token %d: %v, want ErrInvalidToken", i, err)
		}
	}
	if got := a.KeyFetches() - base; got != 1 {
		t.Fatalf("50 forged tokens fetched the JWKS %d times, want 1", got)
	}
	// A legitimate token still verifies from the cache meanwhile.
	if _, err := a.Verify(context.Background(), is.token(t, "k1", is.claims(nil))); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	is.addKey(t, "k2", true)
	if _, err := a.Verify(context.Background(), is.token(t, "k2", is.claims(nil))); err != nil {
		t.Fatalf("key rotated in after the interval: %v", err)
	}
	if got := a.KeyFetches() - base; got != 2 {
		t.Fatalf("fetches = %d, want 2", got)
	}
}
