// Package token owns personal access tokens for notebooks and scripts: creating
// one (its secret shown once, only its SHA-256 kept), listing and revoking them,
// and authenticating a request that carries one. A token acts as its owner is
// now (their current groups, looked up at use; refused once they are
// deactivated), optionally narrowed to one team and to reading; it expires,
// and a revoked token fails on its very next use.
package token

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/user"
)

// Prefix marks Gantry tokens, so that secret scanners and people recognise them.
const Prefix = "gnt_"

// MaxLifetime bounds how long a token may live.
const MaxLifetime = 366 * 24 * time.Hour

// Token is a stored token, without its secret.
type Token struct {
	ID         string
	Owner      identity.Identity
	Name       string
	SecretHash string
	Team       string // "" for every team the owner may act in
	ReadOnly   bool
	CreatedAt  time.Time
	ExpiresAt  time.Time
	RevokedAt  time.Time // zero while valid
}

// Store keeps tokens.
type Store interface {
	// CreateToken records t, unless its owner holds MaxLive tokens that
	// are neither revoked nor expired at t.CreatedAt (ErrTooMany), counted
	// in the same transaction: a bound on the live credentials one person
	// holds (on PostgreSQL, creates at the very same moment may each pass
	// it, by their number: it bounds growth, it grants nothing). It keeps the owner's newest revoked and expired tokens listed
	// and removes the older ones.
	CreateToken(ctx context.Context, t Token) error
	// TokenAndOwner returns one token and its owner's user record, read
	// together (one round trip, not two; the store may keep them a few
	// seconds, never past a change to either that it has been told of); the
	// record is nil when the owner has none. *fault.NotFound if there is no
	// such token.
	TokenAndOwner(ctx context.Context, id string) (Token, *user.User, error)
	Tokens(ctx context.Context, owner string) ([]Token, error)
	// RevokeToken marks the owner's token revoked; *fault.NotFound if they have none of that id.
	RevokeToken(ctx context.Context, owner, id string, at time.Time) error
}

// Owners says who a token's owner is now (user.Service.CurrentFrom): their
// current groups, or why they may no longer act (deactivated, groups not
// confirmed by the provider for too long).
type Owners interface {
	CurrentFrom(id identity.Identity, u *user.User) (identity.Identity, error)
}

// Service is the token domain logic.
type Service struct {
	store  Store
	owners Owners
	teams  Teams
	now    func() time.Time
}

// Teams is the policy as far as narrowing a token asks it: whether a team
// exists and whether the owner reads in it.
type Teams interface {
	Known(t team.Name) bool
	Allowed(id identity.Identity, t team.Name, permission access.Permission) bool
}

// Options are what a Service is made of; all are required.
type Options struct {
	Store  Store
	Owners Owners
	Teams  Teams
	Now    func() time.Time
}

// New returns a token service; every token acts as its owner is now, never
// with the groups it was made with, and may be narrowed only to a team of
// the policy in which its owner reads workloads.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Owners == nil || o.Teams == nil || o.Now == nil {
		return nil, errors.New("token: Store, Owners, Teams and Now are required")
	}
	return &Service{store: o.Store, owners: o.Owners, teams: o.Teams, now: o.Now}, nil
}

// Request describes a new token.
type Request struct {
	Name     string
	Lifetime time.Duration
	Team     string
	ReadOnly bool
}

// MaxLive is how many tokens one person may hold that are neither revoked
// nor expired.
const MaxLive = 200

// ErrTooMany is the store's answer to a create past MaxLive.
var ErrTooMany = errors.New("the owner holds the most live tokens one person may")

// ErrInvalid means a presented token is unknown, malformed, expired or revoked;
// callers answer 401 without saying which.
var ErrInvalid = errors.New("invalid token")

// Create makes a token for the caller and returns it with its secret, which is
// never shown again. A request authenticated by a token cannot make tokens.
func (s *Service) Create(ctx context.Context, req Request) (Token, string, error) {
	owner, ok := identity.From(ctx)
	if !ok {
		return Token{}, "", &fault.Forbidden{Reason: "no identity"}
	}
	if owner.TokenID != "" {
		return Token{}, "", &fault.Forbidden{Reason: "a token cannot make tokens: sign in to make one"}
	}
	var errs fault.List
	if n := strings.TrimSpace(req.Name); n == "" || len(n) > 100 {
		errs.Addf("name", "is required, at most 100 characters")
	}
	if req.Team != "" {
		owner := owner
		owner.TokenID, owner.TokenTeam, owner.ReadOnly = "", "", false
		if t, err := team.Parse(req.Team); err != nil {
			errs.AddErr("", err)
		} else if !s.teams.Known(t) {
			errs.Addf("team", "%q is not a team of the policy: a token narrowed to it would grant nothing", req.Team)
		} else if !s.teams.Allowed(owner, t, access.WorkloadsRead) {
			errs.Addf("team", "you hold no role in team %q: a token narrowed to it would grant nothing", req.Team)
		}
	}
	if req.Lifetime < time.Hour || req.Lifetime > MaxLifetime {
		errs.Addf("expiresInDays", "must be between 1 hour and %d days", int(MaxLifetime.Hours()/24))
	}
	if err := errs.Err(); err != nil {
		return Token{}, "", err
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	id, secret := random(9), random(24)
	owner.TokenID, owner.TokenTeam, owner.ReadOnly = "", "", false
	t := Token{ID: id, Owner: owner, Name: strings.TrimSpace(req.Name), SecretHash: Hash(secret), Team: req.Team, ReadOnly: req.ReadOnly,
		CreatedAt: now, ExpiresAt: now.Add(req.Lifetime)}
	switch err := s.store.CreateToken(ctx, t); {
	case errors.Is(err, ErrTooMany):
		return Token{}, "", &fault.Conflict{Kind: "token", Name: t.Name,
			Reason: fmt.Sprintf("you hold %d live tokens, the most one person may: revoke one you no longer use", MaxLive)}
	case err != nil:
		return Token{}, "", fmt.Errorf("store token: %w", err)
	}
	return t, Prefix + id + "_" + secret, nil
}

// List returns the caller's tokens, newest last.
func (s *Service) List(ctx context.Context) ([]Token, error) {
	owner, _ := identity.From(ctx)
	if err := manage(owner); err != nil {
		return nil, err
	}
	return s.store.Tokens(ctx, owner.String())
}

// Revoke revokes one of the caller's tokens.
func (s *Service) Revoke(ctx context.Context, id string) error {
	owner, _ := identity.From(ctx)
	if err := manage(owner); err != nil {
		return err
	}
	return s.store.RevokeToken(ctx, owner.String(), id, s.now().UTC())
}

// manage refuses token management to a read-only token (read-only means no
// writes of any kind) and to a team-narrowed one (tokens belong to no team):
// its owner's other tokens are not its business.
func manage(caller identity.Identity) error {
	switch {
	case caller.ReadOnly:
		return &fault.Forbidden{Reason: "a read-only token cannot list or revoke tokens: sign in, or use a token that is not read-only"}
	case caller.TokenTeam != "":
		return &fault.Forbidden{Reason: fmt.Sprintf("a token narrowed to team %q cannot list or revoke tokens: sign in, or use a token that is not narrowed", caller.TokenTeam)}
	}
	return nil
}

// Authenticate returns the identity a presented token acts as.
func (s *Service) Authenticate(ctx context.Context, presented string) (identity.Identity, error) {
	rest, ok := strings.CutPrefix(presented, Prefix)
	id, secret, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || id == "" || secret == "" {
		return identity.Identity{}, ErrInvalid
	}
	t, owner, err := s.store.TokenAndOwner(ctx, id)
	if err != nil {
		var nf *fault.NotFound
		if errors.As(err, &nf) {
			return identity.Identity{}, ErrInvalid
		}
		return identity.Identity{}, err
	}
	if subtle.ConstantTimeCompare([]byte(Hash(secret)), []byte(t.SecretHash)) != 1 {
		return identity.Identity{}, ErrInvalid
	}
	now := s.now()
	if !t.RevokedAt.IsZero() || !now.Before(t.ExpiresAt) {
		return identity.Identity{}, ErrInvalid
	}
	who := t.Owner
	who.TokenID, who.TokenTeam, who.ReadOnly = t.ID, t.Team, t.ReadOnly
	return s.owners.CurrentFrom(who, owner)
}

// ListFor returns every token of one user (a platform admin's view).
func (s *Service) ListFor(ctx context.Context, owner string) ([]Token, error) {
	return s.store.Tokens(ctx, owner)
}

// RevokeFor revokes one user's token (a platform admin's action).
func (s *Service) RevokeFor(ctx context.Context, owner, id string) error {
	return s.store.RevokeToken(ctx, owner, id, s.now().UTC())
}

// Is reports whether a bearer credential is a Gantry token.
func Is(bearer string) bool { return strings.HasPrefix(bearer, Prefix) }

// Hash is how Gantry keeps a secret it must recognise but never show again
// (a token, a session cookie): the hex SHA-256.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// random returns n characters from a 62-letter alphabet (~5.95 bits each).
func random(n int) string {
	b := make([]byte, n)
	out := make([]byte, n)
	for i := 0; i < n; {
		if _, err := rand.Read(b); err != nil {
			panic(err) // crypto/rand does not fail on supported platforms
		}
		for _, c := range b {
			if i < n && c < 248 { // 248 = 4*62: no modulo bias
				out[i] = alphabet[int(c)%62]
				i++
			}
		}
	}
	return string(out)
}
