// Package projected owns reading a projected ServiceAccount token's claims
// without verifying it: its audiences, its expiry and the pod it is bound
// to. The cluster verifies a token (a TokenReview); this only decides
// whether one is worth asking about, so that anyone who can send a bearer
// token cannot make Gantry ask the API server about anything — and, with a
// Budget, how many such questions Gantry asks a second at most.
package projected

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/gantryhq/gantry/internal/clientaddr"
)

// Budget bounds the TokenReviews one Gantry asks its API server for, all
// authenticators together and per source: a token that looks right costs a
// review the first time it is seen, and anyone can make up tokens that look
// right (a new one each request, never cached). Known tokens are answered
// from the authenticators' caches and spend none of it. The per-source
// bucket keeps one client from spending everyone's budget (the agents'
// tokens rotate hourly and each new one needs a review).
type Budget struct {
	all       *rate.Limiter
	perSource *clientaddr.Limiter
	now       func() time.Time
}

// BudgetOptions size a Budget: Rate reviews a second, Burst at once, in
// all; SourceRate and SourceBurst for one source (clientaddr.SourceFrom
// the request's context; a request without one spends only from the whole).
type BudgetOptions struct {
	Rate, SourceRate   float64
	Burst, SourceBurst int
	Now                func() time.Time
}

// NewBudget makes a Budget.
func NewBudget(o BudgetOptions) *Budget {
	return &Budget{all: rate.NewLimiter(rate.Limit(o.Rate), o.Burst), perSource: clientaddr.NewLimiter(o.SourceRate, o.SourceBurst, 0, o.Now), now: o.Now}
}

// ErrBudget means a review was not asked for: too many at once.
var ErrBudget = errors.New("too many new tokens to review at once; try again shortly")

// Spend takes one review from the request's source's bucket and from the
// whole, or says there is none left.
func (b *Budget) Spend(ctx context.Context) error {
	if src := clientaddr.SourceFrom(ctx); src != "" {
		if ok, _ := b.perSource.Take(src); !ok {
			return ErrBudget
		}
	}
	if !b.all.AllowN(b.now(), 1) {
		return ErrBudget
	}
	return nil
}

// Claims are what a token says of itself.
type Claims struct {
	Audiences []string
	Expiry    time.Time // zero: none said
	Pod       string    // the pod it is bound to ("" when none)
	Namespace string    // the namespace of its ServiceAccount ("" when not said)
}

// ErrNotJWT means the token is not a JWT whose claims can be read.
var ErrNotJWT = errors.New("not a JWT")

// Peek reads a token's claims, unverified.
func Peek(token string) (Claims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Claims{}, ErrNotJWT
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return Claims{}, ErrNotJWT
	}
	var raw struct {
		Aud        any   `json:"aud"`
		Exp        int64 `json:"exp"`
		Kubernetes struct {
			Namespace string `json:"namespace"`
			Pod       struct {
				Name string `json:"name"`
			} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &raw) != nil {
		return Claims{}, ErrNotJWT
	}
	c := Claims{Pod: raw.Kubernetes.Pod.Name, Namespace: raw.Kubernetes.Namespace}
	switch v := raw.Aud.(type) {
	case string:
		c.Audiences = []string{v}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				c.Audiences = append(c.Audiences, s)
			}
		}
	}
	if raw.Exp != 0 {
		c.Expiry = time.Unix(raw.Exp, 0)
	}
	return c, nil
}

// For says whether the claims name audience.
func (c Claims) For(audience string) bool { return slices.Contains(c.Audiences, audience) }

// Live says whether the token has an expiry and it is after now.
func (c Claims) Live(now time.Time) bool { return !c.Expiry.IsZero() && c.Expiry.After(now) }
