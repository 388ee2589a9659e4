// Package user owns the people who use Gantry as the identity provider last
// described them: each user's groups, refreshed at every sign-in and every
// use of a provider token, and whether a platform admin deactivated them.
// Personal access tokens and browser sessions act with the user's current
// groups, looked up at use time, not the ones they were made with; groups
// older than the configured maximum age force a fresh sign-in, and a
// deactivated user's sessions and tokens stop working at once.
package user

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
)

// User is one person as the identity provider last described them.
type User struct {
	ID            string // short, URL-safe, stable: see IDOf
	Key           string // issuer#subject (identity.Identity.String)
	Issuer        string
	Subject       string
	Email         string
	Name          string
	Groups        []string
	GroupsAt      time.Time // when the provider last told Gantry the groups
	DeactivatedAt time.Time // zero while active
	CreatedAt     time.Time
	LastSeenAt    time.Time
}

// Active reports whether the user may act.
func (u User) Active() bool { return u.DeactivatedAt.IsZero() }

// IDOf is the user id of an identity: the first 16 hex digits of the
// SHA-256 of issuer#subject (paths cannot carry an issuer URL).
func IDOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// Store keeps users.
type Store interface {
	// UpsertUser records what the provider said about a user (email,
	// name, groups, GroupsAt, LastSeenAt), creating them if new; it never
	// changes DeactivatedAt, and leaves a record whose GroupsAt is later
	// than u's as it is (an older token's groups lose to a newer sign-in's).
	UpsertUser(ctx context.Context, u User) error
	// User returns a user by id; *fault.NotFound if none.
	User(ctx context.Context, id string) (User, error)
	// Users lists every user, by key.
	Users(ctx context.Context) ([]User, error)
	// UsersByKey returns the users with these keys (issuer#subject) that
	// are known; unknown keys are left out.
	UsersByKey(ctx context.Context, keys []string) ([]User, error)
	// SetUserDeactivated deactivates (at non-zero) or reactivates (zero) a
	// user; *fault.NotFound if none.
	SetUserDeactivated(ctx context.Context, id string, at time.Time) error
}

// Errors callers branch on; each answers 401 with the reason.
var (
	ErrDeactivated = errors.New("this account is deactivated")
	ErrStale       = errors.New("sign in again: your groups must be confirmed by the identity provider")
)

// Service is the user domain logic.
type Service struct {
	store  Store
	maxAge time.Duration
	now    func() time.Time

	// names caches display names by key for refreshEvery: every workload
	// answer names its owner, and a name changes only at a sign-in (which
	// forgets this replica's entry; another replica's lasts its minute).
	namesMu sync.Mutex
	names   map[string]cachedName
}

type cachedName struct {
	name string // "": known to have none (no such user, or unnamed)
	at   time.Time
}

// maxCachedNames bounds the names cache; past it, it starts again empty.
const maxCachedNames = 10_000

// refreshEvery is how stale a user's record may be before a provider token
// that says the same again is written (a bearer JWT on every request would
// otherwise be a write each).
const refreshEvery = time.Minute

// Options are what a Service is made of; all are required.
type Options struct {
	Store Store
	// MaxGroupAge bounds how old the groups a token or session acts with
	// may be (they are refreshed at every sign-in).
	MaxGroupAge time.Duration
	Now         func() time.Time
}

// New returns a user service.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.MaxGroupAge <= 0 || o.Now == nil {
		return nil, errors.New("user: Store, a positive MaxGroupAge and Now are required")
	}
	return &Service{store: o.Store, maxAge: o.MaxGroupAge, now: o.Now}, nil
}

// Observe records what the identity provider just said about id (a sign-in,
// or a verified provider token) and returns id, unless the user is
// deactivated.
func (s *Service) Observe(ctx context.Context, id identity.Identity) (identity.Identity, error) {
	key := id.String()
	uid := IDOf(key)
	now := s.now().UTC().Truncate(time.Microsecond)
	// When the provider said it: a token's issue time, by the provider's
	// clock (now when it says none), so that a token issued before the
	// user's last sign-in cannot bring back a group the provider has since
	// taken away.
	at := now
	if !id.IssuedAt.IsZero() {
		at = id.IssuedAt.UTC().Truncate(time.Microsecond)
	}
	u, err := s.store.User(ctx, uid)
	var nf *fault.NotFound
	switch {
	case errors.As(err, &nf):
	case err != nil:
		return identity.Identity{}, fmt.Errorf("look up user %s: %w", key, err)
	case !u.Active():
		return identity.Identity{}, ErrDeactivated
	case at.Before(u.GroupsAt):
		return id, nil // what was recorded is newer
	case id.GroupsAbsent && len(u.Groups) > 0:
		// A token without the groups claim (one the CLI holds, where the
		// provider sends groups at sign-in only) says nothing of them: the
		// groups the last sign-in recorded stay, for the user's sessions
		// and tokens; this request acts with the token's own (none).
		return id, nil
	case u.Email == id.Email && u.Name == id.Name && slices.Equal(u.Groups, id.Groups) && now.Sub(u.LastSeenAt) < refreshEvery:
		return id, nil // nothing new to record
	}
	groups := id.Groups
	if groups == nil {
		groups = []string{}
	}
	if err := s.store.UpsertUser(ctx, User{ID: uid, Key: key, Issuer: id.Issuer, Subject: id.Subject, Email: id.Email, Name: id.Name,
		Groups: groups, GroupsAt: at, CreatedAt: now, LastSeenAt: now}); err != nil {
		return identity.Identity{}, fmt.Errorf("record user %s: %w", key, err)
	}
	s.namesMu.Lock()
	delete(s.names, key) // the name may have changed
	s.namesMu.Unlock()
	return id, nil
}

// CurrentFrom returns id (the owner of a token or session) as the user is
// now, from their record u (nil when there is none), which the store reads
// together with what refers to it (a token and its owner, a session and
// its user, in one statement): their current groups, email and name, as
// long as they are active and the provider confirmed the groups within the
// maximum age. id's narrowing (a token's team, read-only) is kept.
func (s *Service) CurrentFrom(id identity.Identity, u *User) (identity.Identity, error) {
	switch {
	case u == nil:
		return identity.Identity{}, ErrStale // never signed in since users were kept
	case !u.Active():
		return identity.Identity{}, ErrDeactivated
	case s.now().Sub(u.GroupsAt) > s.maxAge:
		return identity.Identity{}, fmt.Errorf("%w (last confirmed %s, at most %s ago)", ErrStale, u.GroupsAt.Format(time.RFC3339), s.maxAge)
	}
	id.Groups, id.Email, id.Name = slices.Clone(u.Groups), u.Email, u.Name
	return id, nil
}

// Active says whether id may still act, without recording anything: a
// deactivated user is ErrDeactivated; one never seen is active (a provider
// token is checked when it is first used). Live connections are checked
// again with it.
func (s *Service) Active(ctx context.Context, id identity.Identity) error {
	u, err := s.store.User(ctx, IDOf(id.String()))
	var nf *fault.NotFound
	switch {
	case errors.As(err, &nf):
		return nil
	case err != nil:
		return fmt.Errorf("look up user %s: %w", id, err)
	case !u.Active():
		return ErrDeactivated
	}
	return nil
}

// DisplayName is how people read a user: the name and e-mail the provider
// gave ("Alice Moreau <alice@example.com>"), either alone, or "" when it
// gave neither.
func (u User) DisplayName() string {
	switch {
	case u.Name != "" && u.Email != "":
		return u.Name + " <" + u.Email + ">"
	case u.Name != "":
		return u.Name
	}
	return u.Email
}

// Names maps users' keys (issuer#subject; an audit actor's " (token …)"
// suffix is ignored) to their display names, for the keys whose users are
// known and named; one read for all of them.
func (s *Service) Names(ctx context.Context, keys ...string) (map[string]string, error) {
	seen := map[string]bool{}
	var want []string
	for _, k := range keys {
		k, _, _ = strings.Cut(k, " (")
		if k != "" && !seen[k] {
			seen[k] = true
			want = append(want, k)
		}
	}
	out := map[string]string{}
	now := s.now()
	s.namesMu.Lock()
	missing := want[:0:0]
	for _, k := range want {
		if c, ok := s.names[k]; ok && now.Sub(c.at) < refreshEvery {
			if c.name != "" {
				out[k] = c.name
			}
			continue
		}
		missing = append(missing, k)
	}
	s.namesMu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	users, err := s.store.UsersByKey(ctx, missing)
	if err != nil {
		return nil, err
	}
	found := map[string]string{}
	for _, u := range users {
		found[u.Key] = u.DisplayName()
	}
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	if s.names == nil || len(s.names)+len(missing) > maxCachedNames {
		s.names = make(map[string]cachedName, len(missing))
	}
	for _, k := range missing {
		s.names[k] = cachedName{name: found[k], at: now}
		if found[k] != "" {
			out[k] = found[k]
		}
	}
	return out, nil
}

// List returns every user.
func (s *Service) List(ctx context.Context) ([]User, error) { return s.store.Users(ctx) }

// Get returns one user.
func (s *Service) Get(ctx context.Context, id string) (User, error) { return s.store.User(ctx, id) }

// Deactivate stops a user at once: every session and token of theirs is
// refused from the next request, and so are their provider tokens. A
// platform admin cannot deactivate themselves (someone must be left to undo it).
func (s *Service) Deactivate(ctx context.Context, id string) (User, error) {
	if caller, ok := identity.From(ctx); ok && IDOf(caller.String()) == id {
		return User{}, &fault.Conflict{Kind: "user", Name: id, Reason: "you cannot deactivate yourself"}
	}
	if err := s.store.SetUserDeactivated(ctx, id, s.now().UTC().Truncate(time.Microsecond)); err != nil {
		return User{}, err
	}
	return s.store.User(ctx, id)
}

// Reactivate lets a deactivated user in again (at their next sign-in, their
// groups are confirmed afresh).
func (s *Service) Reactivate(ctx context.Context, id string) (User, error) {
	if err := s.store.SetUserDeactivated(ctx, id, time.Time{}); err != nil {
		return User{}, err
	}
	return s.store.User(ctx, id)
}
