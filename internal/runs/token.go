package runs

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

// Audience is the audience of a run's token: a projected ServiceAccount
// token Gantry mounts in a training workload's pods (the kubelet renews it
// before it expires, and it dies with its pod). The API server accepts no
// token of this audience, so it is good for one thing only: reporting the
// progress of the workload its pod belongs to.
const Audience = "gantry-run"

// TokenLifetime is how long a run token lives before the kubelet renews
// it (Kubernetes' minimum is ten minutes).
const TokenLifetime = time.Hour

// Review is what the cluster said of a run's token.
type Review struct {
	Authenticated bool
	Audiences     []string
	Username      string // system:serviceaccount:<namespace>:<name>
	// Workload is the Gantry workload of the pod the token is bound to
	// ("" when the token is bound to no pod, or to one Gantry did not
	// make, or the pod is gone or not the one the token was made for).
	Workload string
	Pod      string // namespace/name
	// Cluster is the worker cluster that reviewed it ("" for Gantry's own).
	Cluster string
	Error   string
}

// Reviewer asks the cluster the workload runs on about a token (a
// TokenReview, then the pod it is bound to): for a workload dispatched to a
// worker cluster, that worker's API server, which made the token.
type Reviewer interface {
	ReviewRunToken(ctx context.Context, token, audience, workload string) (Review, error)
}

// TokenAuth authenticates runs by their tokens. Accepted tokens are
// remembered (by hash) for a minute and refused ones for ten seconds, so a
// run reporting every few seconds does not cost the API server a review
// each time.
type TokenAuth struct {
	Reviewer Reviewer
	Now      func() time.Time
	// Reviews bounds the reviews asked for (shared with the agents').
	Reviews *projected.Budget

	mu       sync.Mutex
	cache    map[[32]byte]cachedRun
	rejected map[[32]byte]time.Time
}

type cachedRun struct {
	workload, pod, user  string
	cluster              string
	expires, tokenExpiry time.Time
}

const (
	cacheTTL  = time.Minute
	cacheMax  = 10000
	rejectFor = 10 * time.Second
)

// IsRunToken says whether a bearer token is shaped as a run's token (a JWT
// for Audience): the API sends those, and only those, here.
func IsRunToken(token string) bool {
	_, err := shapeOf(token, time.Time{})
	return err == nil
}

var errNotRunToken = errors.New("not a run token")

// shapeOf checks, without verifying it (the review does), that token is a
// JWT for Audience bound to a pod, and returns its expiry; with a zero now
// the expiry is not checked. Only tokens of that shape cost the API server
// a review.
func shapeOf(token string, now time.Time) (time.Time, error) {
	c, err := projected.Peek(token)
	if err != nil || !c.For(Audience) || c.Pod == "" {
		return time.Time{}, errNotRunToken
	}
	if !now.IsZero() && !c.Live(now) {
		return time.Time{}, errors.New("token expired")
	}
	return c.Expiry, nil
}

// Authenticate returns the identity of the run a token belongs to: the
// workload its pod is part of. workload is the one the run says it reports
// for (its route's): the cluster it runs on reviews the token. A token the
// cluster refuses is an error; a valid one that is bound to no Gantry pod
// is a *fault.Forbidden. What was said is kept per token and workload, so
// that a token sent for another workload cannot have its own refused.
func (a *TokenAuth) Authenticate(ctx context.Context, token, workload string) (identity.Identity, error) {
	if a.Now == nil || a.Reviewer == nil || a.Reviews == nil {
		return identity.Identity{}, errors.New("runs: TokenAuth needs a Reviewer, a clock (Now) and a review budget (Reviews)")
	}
	now := a.Now()
	key := sha256.Sum256([]byte(workload + "\x00" + token))
	a.mu.Lock()
	c, ok := a.cache[key]
	until, refused := a.rejected[key]
	a.mu.Unlock()
	if ok && now.Before(c.expires) && now.Before(c.tokenExpiry) {
		return runIdentity(c), nil
	}
	if refused && now.Before(until) {
		return identity.Identity{}, errors.New("token refused recently")
	}
	exp, err := shapeOf(token, now)
	if err != nil {
		a.reject(key, now)
		return identity.Identity{}, err
	}
	if err := a.Reviews.Spend(ctx); err != nil {
		return identity.Identity{}, &fault.Unavailable{What: "token review", Err: err}
	}
	r, err := a.Reviewer.ReviewRunToken(ctx, token, Audience, workload)
	if err != nil {
		return identity.Identity{}, &fault.Unavailable{What: "token review", Err: err}
	}
	switch {
	case !r.Authenticated:
		a.reject(key, now)
		return identity.Identity{}, fmt.Errorf("token not accepted by the cluster: %s", r.Error)
	case !slices.Contains(r.Audiences, Audience):
		a.reject(key, now)
		return identity.Identity{}, fmt.Errorf("token not meant for audience %q", Audience)
	case r.Workload == "":
		a.reject(key, now)
		return identity.Identity{}, &fault.Forbidden{Reason: "the token is not bound to a running pod of a Gantry workload: a run reports with the token mounted in its pod"}
	case r.Workload != workload:
		// Refused here, and kept so, rather than kept as accepted under
		// every id it is sent with (the report would be refused anyway).
		a.reject(key, now)
		return identity.Identity{}, &fault.Forbidden{Reason: fmt.Sprintf("the token is of a pod of workload %s: a run reports for its own workload only", r.Workload)}
	}
	c = cachedRun{workload: r.Workload, pod: r.Pod, user: r.Username, cluster: r.Cluster, expires: now.Add(cacheTTL), tokenExpiry: exp}
	a.mu.Lock()
	if a.cache == nil || len(a.cache) >= cacheMax {
		a.cache = map[[32]byte]cachedRun{}
	}
	a.cache[key] = c
	a.mu.Unlock()
	return runIdentity(c), nil
}

func (a *TokenAuth) reject(key [32]byte, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rejected == nil || len(a.rejected) >= cacheMax {
		a.rejected = map[[32]byte]time.Time{}
	}
	a.rejected[key] = now.Add(rejectFor)
}

func runIdentity(c cachedRun) identity.Identity {
	where := ""
	if c.cluster != "" {
		where = " on " + c.cluster
	}
	return identity.Identity{Issuer: "kubernetes", Subject: c.user, Name: "the run of workload " + c.workload + " (pod " + c.pod + where + ")",
		Via: identity.ViaRun, Workload: c.workload, Pod: c.pod}
}
