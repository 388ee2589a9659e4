package devidp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is the provider's state, all in memory: pending logins, codes,
// tokens and device authorizations. It implements op.Storage and
// op.DeviceAuthorizationStorage.
type storage struct {
	users   map[string]User // by subject
	clients map[string]*client
	key     signingKey
	now     func() time.Time
	ttl     time.Duration // ID and access token lifetime

	mu      sync.Mutex
	authReq map[string]*authRequest
	codes   map[string]string // code → auth request id
	access  map[string]accessToken
	refresh map[string]*refreshToken
	devices map[string]*device // by device code
	byCode  map[string]string  // user code → device code
}

var (
	_ op.Storage                    = (*storage)(nil)
	_ op.DeviceAuthorizationStorage = (*storage)(nil)
)

// notFound is what op expects for unknown objects.
type notFound struct{ what string }

func (e notFound) Error() string { return e.what + " not found" }
func (notFound) IsNotFound()     {}

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newStorage(users []User, clients []*client, ttl time.Duration, key *rsa.PrivateKey) (*storage, error) {
	if key == nil {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return nil, err
		}
	}
	s := &storage{
		users: map[string]User{}, clients: map[string]*client{},
		key: signingKey{id: randomID(), key: key}, now: time.Now, ttl: ttl, //clock:allow the development provider is another party, on its own clock
		authReq: map[string]*authRequest{}, codes: map[string]string{}, access: map[string]accessToken{},
		refresh: map[string]*refreshToken{}, devices: map[string]*device{}, byCode: map[string]string{},
	}
	for _, u := range users {
		s.users[u.Subject()] = u
	}
	for _, c := range clients {
		s.clients[c.id] = c
	}
	return s, nil
}

// userByPassword returns the user with that username and password.
func (s *storage) userByPassword(username, password string) (User, bool) {
	for _, u := range s.users {
		if u.Username == username && u.Password == password {
			return u, true
		}
	}
	return User{}, false
}

// signIn marks a pending authorization request as done by the user.
func (s *storage) signIn(id string, u User) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.authReq[id]
	if !ok {
		return notFound{"login request"}
	}
	r.subject, r.authTime, r.done, r.amr = u.Subject(), s.now(), true, u.AMR()
	return nil
}

// authRequest implements op.AuthRequest.
type authRequest struct {
	id        string
	req       oidc.AuthRequest
	subject   string
	authTime  time.Time
	amr       []string
	done      bool
	createdAt time.Time
}

func (a *authRequest) GetID() string                      { return a.id }
func (a *authRequest) GetACR() string                     { return "" }
func (a *authRequest) GetAMR() []string                   { return a.amr }
func (a *authRequest) GetAudience() []string              { return []string{a.req.ClientID} }
func (a *authRequest) GetAuthTime() time.Time             { return a.authTime }
func (a *authRequest) GetClientID() string                { return a.req.ClientID }
func (a *authRequest) GetNonce() string                   { return a.req.Nonce }
func (a *authRequest) GetRedirectURI() string             { return a.req.RedirectURI }
func (a *authRequest) GetScopes() []string                { return a.req.Scopes }
func (a *authRequest) GetState() string                   { return a.req.State }
func (a *authRequest) GetSubject() string                 { return a.subject }
func (a *authRequest) Done() bool                         { return a.done }
func (a *authRequest) GetResponseType() oidc.ResponseType { return a.req.ResponseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode { return a.req.ResponseMode }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if a.req.CodeChallenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: a.req.CodeChallenge, Method: a.req.CodeChallengeMethod}
}

func (s *storage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	if slices.Contains(req.Prompt, oidc.PromptNone) {
		return nil, oidc.ErrLoginRequired()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &authRequest{id: randomID(), req: *req, createdAt: s.now()}
	s.authReq[r.id] = r
	return r, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.authReq[id]
	if !ok || s.now().Sub(r.createdAt) > 10*time.Minute {
		return nil, notFound{"login request"}
	}
	return r, nil
}

func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, notFound{"code"}
	}
	return s.AuthRequestByID(ctx, id)
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest makes the request and its code single-use.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.authReq, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

type accessToken struct {
	clientID, subject string
	expires           time.Time
}

type refreshToken struct {
	token, clientID, subject string
	scopes, amr, audience    []string
	authTime                 time.Time
	expires                  time.Time
}

// refreshTokenRequest implements op.RefreshTokenRequest.
type refreshTokenRequest struct{ *refreshToken }

func (r refreshTokenRequest) GetAMR() []string             { return r.amr }
func (r refreshTokenRequest) GetAudience() []string        { return r.audience }
func (r refreshTokenRequest) GetAuthTime() time.Time       { return r.authTime }
func (r refreshTokenRequest) GetClientID() string          { return r.clientID }
func (r refreshTokenRequest) GetScopes() []string          { return r.scopes }
func (r refreshTokenRequest) GetSubject() string           { return r.subject }
func (r refreshTokenRequest) SetCurrentScopes(sc []string) { r.scopes = sc }

func (s *storage) newAccess(clientID, subject string) (string, time.Time) {
	id, exp := randomID(), s.now().Add(s.ttl)
	s.access[id] = accessToken{clientID: clientID, subject: subject, expires: exp}
	return id, exp
}

func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, exp := s.newAccess(clientOf(req), req.GetSubject())
	return id, exp, nil
}

func clientOf(req op.TokenRequest) string {
	if c, ok := req.(interface{ GetClientID() string }); ok {
		return c.GetClientID()
	}
	return ""
}

// CreateAccessAndRefreshTokens issues an access token and a refresh token,
// rotating the presented refresh token when there is one.
func (s *storage) CreateAccessAndRefreshTokens(_ context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt := &refreshToken{token: randomID(), clientID: clientOf(req), subject: req.GetSubject(), scopes: req.GetScopes(),
		audience: req.GetAudience(), expires: s.now().Add(24 * time.Hour)}
	if r, ok := req.(interface {
		GetAMR() []string
		GetAuthTime() time.Time
	}); ok {
		rt.amr, rt.authTime = r.GetAMR(), r.GetAuthTime()
	}
	if current != "" {
		old, ok := s.refresh[current]
		if !ok || s.now().After(old.expires) {
			return "", "", time.Time{}, op.ErrInvalidRefreshToken
		}
		delete(s.refresh, current)
	}
	s.refresh[rt.token] = rt
	id, exp := s.newAccess(rt.clientID, rt.subject)
	return id, rt.token, exp, nil
}

func (s *storage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.refresh[token]
	if !ok || s.now().After(rt.expires) {
		return nil, op.ErrInvalidRefreshToken
	}
	return refreshTokenRequest{rt}, nil
}

func (s *storage) TerminateSession(_ context.Context, subject, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.refresh {
		if t.subject == subject && t.clientID == clientID {
			delete(s.refresh, k)
		}
	}
	for k, t := range s.access {
		if t.subject == subject && t.clientID == clientID {
			delete(s.access, k)
		}
	}
	return nil
}

func (s *storage) RevokeToken(_ context.Context, token, _, clientID string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.access[token]; ok && t.clientID == clientID {
		delete(s.access, token)
	}
	if t, ok := s.refresh[token]; ok && t.clientID == clientID {
		delete(s.refresh, token)
	}
	return nil
}

func (s *storage) GetRefreshTokenInfo(_ context.Context, clientID, token string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.refresh[token]
	if !ok || t.clientID != clientID {
		return "", "", op.ErrInvalidRefreshToken
	}
	return t.subject, t.token, nil
}

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.key, nil }
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}
func (s *storage) KeySet(context.Context) ([]op.Key, error) { return []op.Key{publicKey{s.key}}, nil }

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, notFound{"client"}
	}
	return c, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, ok := s.clients[id]
	if !ok || c.secret == "" || c.secret != secret {
		return errors.New("invalid client credentials")
	}
	return nil
}

// SetUserinfoFromScopes fills the ID token's claims: profile, email and the
// groups the user belongs to.
func (s *storage) SetUserinfoFromScopes(_ context.Context, info *oidc.UserInfo, subject, _ string, scopes []string) error {
	u, ok := s.users[subject]
	if !ok {
		return notFound{"user"}
	}
	info.Subject = subject
	for _, sc := range scopes {
		switch sc {
		case oidc.ScopeEmail:
			info.Email, info.EmailVerified = u.Email, true
		case oidc.ScopeProfile:
			info.Name, info.PreferredUsername = u.Name, u.Username
		case ScopeGroups:
			info.AppendClaims("groups", u.Groups)
		}
	}
	return nil
}

func (s *storage) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, _ string) error {
	s.mu.Lock()
	t, ok := s.access[tokenID]
	s.mu.Unlock()
	if !ok || s.now().After(t.expires) {
		return errors.New("token is invalid or has expired")
	}
	return s.SetUserinfoFromScopes(ctx, info, t.subject, t.clientID, []string{oidc.ScopeOpenID, oidc.ScopeEmail, oidc.ScopeProfile, ScopeGroups})
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("introspection is not supported")
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("JWT profile grants are not supported")
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("JWT profile grants are not supported")
}

func (s *storage) Health(context.Context) error { return nil }

// device is one device authorization (RFC 8628) in progress.
type device struct {
	userCode string
	state    op.DeviceAuthorizationState
}

func (s *storage) StoreDeviceAuthorization(_ context.Context, clientID, deviceCode, userCode string, expires time.Time, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.clients[clientID]; !ok {
		return notFound{"client"}
	}
	if _, ok := s.byCode[userCode]; ok {
		return op.ErrDuplicateUserCode
	}
	s.devices[deviceCode] = &device{userCode: userCode, state: op.DeviceAuthorizationState{ClientID: clientID, Scopes: scopes, Expires: expires}}
	s.byCode[userCode] = deviceCode
	return nil
}

func (s *storage) GetDeviceAuthorizatonState(ctx context.Context, clientID, deviceCode string) (*op.DeviceAuthorizationState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[deviceCode]
	if !ok || d.state.ClientID != clientID {
		return nil, notFound{"device code"}
	}
	st := d.state
	if st.Done || st.Denied {
		// A device code is good for one token response.
		delete(s.devices, deviceCode)
		delete(s.byCode, d.userCode)
	}
	return &st, nil
}

// decideDevice completes or denies the device authorization with that user
// code.
func (s *storage) decideDevice(userCode string, u User, allow bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[s.byCode[userCode]]
	if !ok || s.now().After(d.state.Expires) {
		return fmt.Errorf("code %q is unknown or has expired", userCode)
	}
	if d.state.Done || d.state.Denied {
		return fmt.Errorf("code %q was already used", userCode)
	}
	if allow {
		d.state.Subject, d.state.Done = u.Subject(), true
		d.state.AuthTime = s.now()
		d.state.AMR = u.AMR()
	} else {
		d.state.Denied = true
	}
	return nil
}
