package telemetry

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/projected"
)

// TokenReviewer asks the cluster who a ServiceAccount token belongs to (a
// TokenReview with the given audience).
type TokenReviewer interface {
	ReviewToken(ctx context.Context, token, audience string) (Review, error)
}

// Review is what the cluster said of a token.
type Review struct {
	Authenticated bool
	Username      string   // system:serviceaccount:<namespace>:<name>
	Audiences     []string // the audiences the token is valid for
	Node          string   // the node of the pod the token is bound to ("" if none)
	Error         string
}

// AgentAuth authenticates node agents by their projected ServiceAccount
// tokens: the cluster must accept the token for Audience, it must belong to
// ServiceAccount, and be bound to a pod on a node. Accepted tokens are
// remembered (by hash) for a minute, so a fleet pushing every 10 s does not
// cost the API server a review per push.
type AgentAuth struct {
	Reviewer       TokenReviewer
	Audience       string // e.g. "gantry"
	ServiceAccount string // e.g. system:serviceaccount:gantry-system:gantry-agent
	Now            func() time.Time
	// Reviews bounds the reviews asked for (shared with the runs' tokens).
	Reviews *projected.Budget

	mu       sync.Mutex
	cache    map[[32]byte]cachedAgent
	rejected map[[32]byte]time.Time // refused tokens, not reviewed again until then
}

type cachedAgent struct {
	node        string
	expires     time.Time
	tokenExpiry time.Time // the token's own exp: a cached token does not outlive it
}

// rejectFor is how long a refused token is refused without a review.
const rejectFor = 10 * time.Second

func (a *AgentAuth) reject(key [32]byte, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rejected == nil || len(a.rejected) >= agentCacheMax {
		a.rejected = map[[32]byte]time.Time{}
	}
	a.rejected[key] = now.Add(rejectFor)
}

// shapeOf checks, without verifying it (the TokenReview does), that a token
// is a JWT meant for audience that has not expired, and returns its expiry.
func shapeOf(token, audience string, now time.Time) (time.Time, error) {
	c, err := projected.Peek(token)
	switch {
	case err != nil:
		return time.Time{}, err
	case !c.For(audience):
		return time.Time{}, fmt.Errorf("token not meant for audience %q", audience)
	case !c.Live(now):
		return time.Time{}, errors.New("token expired")
	}
	return c.Expiry, nil
}

// agentCacheTTL is how long an accepted token is trusted without a review;
// agentCacheMax bounds the remembered tokens.
const (
	agentCacheTTL = time.Minute
	agentCacheMax = 10000
)

// ErrNotAgent means a token the cluster accepted is not the agent's.
var ErrNotAgent = errors.New("not the node agent's ServiceAccount")

// AuthenticateAgent implements the API's agent authenticator: the
// identity of the agent on its node, or an error (fault.Forbidden for a
// valid token of another ServiceAccount or one not bound to a node).
func (a *AgentAuth) AuthenticateAgent(ctx context.Context, token string) (identity.Identity, error) {
	now := a.Now
	if now == nil || a.Reviews == nil {
		return identity.Identity{}, errors.New("telemetry: AgentAuth needs a clock (Now) and a review budget (Reviews)")
	}
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	c, ok := a.cache[key]
	until, refused := a.rejected[key]
	a.mu.Unlock()
	if ok && now().Before(c.expires) && now().Before(c.tokenExpiry) {
		return a.identity(c.node), nil
	}
	if refused && now().Before(until) {
		return identity.Identity{}, errors.New("token refused recently")
	}
	// Only what looks like a projected token for this audience costs the
	// API server a review: anyone can send a bearer token here.
	exp, err := shapeOf(token, a.Audience, now())
	if err != nil {
		a.reject(key, now())
		return identity.Identity{}, err
	}
	if err := a.Reviews.Spend(ctx); err != nil {
		return identity.Identity{}, &fault.Unavailable{What: "token review", Err: err}
	}
	r, err := a.Reviewer.ReviewToken(ctx, token, a.Audience)
	if err != nil {
		return identity.Identity{}, &fault.Unavailable{What: "token review", Err: err}
	}
	if !r.Authenticated || r.Username != a.ServiceAccount {
		a.reject(key, now())
	}
	switch {
	case !r.Authenticated:
		return identity.Identity{}, fmt.Errorf("token not accepted by the cluster: %s", r.Error)
	case !slices.Contains(r.Audiences, a.Audience):
		return identity.Identity{}, fmt.Errorf("token not meant for audience %q", a.Audience)
	case r.Username != a.ServiceAccount:
		return identity.Identity{}, &fault.Forbidden{Reason: fmt.Sprintf("%s: %s may not push telemetry", ErrNotAgent, r.Username)}
	case r.Node == "":
		return identity.Identity{}, &fault.Forbidden{Reason: "the token is not bound to a pod on a node: use the agent pod's projected token"}
	}
	a.mu.Lock()
	if a.cache == nil || len(a.cache) >= agentCacheMax {
		a.cache = map[[32]byte]cachedAgent{}
	}
	a.cache[key] = cachedAgent{node: r.Node, expires: now().Add(agentCacheTTL), tokenExpiry: exp}
	a.mu.Unlock()
	return a.identity(r.Node), nil
}

func (a *AgentAuth) identity(node string) identity.Identity {
	return identity.Identity{Issuer: "kubernetes", Subject: a.ServiceAccount, Name: "gantry-agent on " + node, Node: node, Via: identity.ViaAgent}
}
