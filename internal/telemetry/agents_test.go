package telemetry_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clientaddr"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/projected"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// reviewer answers as the API server would, and counts the reviews.
type reviewer struct {
	n      atomic.Int32
	review telemetry.Review
}

func (r *reviewer) ReviewToken(context.Context, string, string) (telemetry.Review, error) {
	r.n.Add(1)
	return r.review, nil
}

func jwt(t *testing.T, aud any, exp time.Time) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{"aud": aud, "exp": exp.Unix()})
	return "e30." + base64.RawURLEncoding.EncodeToString(payload) + ".c2ln"
}

// TestAgentAuthSparesTheAPIServer: tokens that cannot be the agent's cost no
// review; a refused one is not reviewed again for a while; an accepted one
// is remembered, but not past its own expiry.
func TestAgentAuthSparesTheAPIServer(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rv := &reviewer{review: telemetry.Review{Authenticated: true, Username: "system:serviceaccount:gantry-system:gantry-agent", Audiences: []string{"gantry"}, Node: "n1"}}
	a := &telemetry.AgentAuth{Reviewer: rv, Audience: "gantry", ServiceAccount: "system:serviceaccount:gantry-system:gantry-agent", Now: clock, Reviews: projected.NewBudget(projected.BudgetOptions{Rate: 1000, Burst: 1000, SourceRate: 1000, SourceBurst: 1000, Now: time.Now})}
	ctx := context.Background()
	for _, bad := range []string{"garbage", "a.b.c", jwt(t, "kubernetes", now.Add(time.Hour)), jwt(t, []string{"gantry"}, now.Add(-time.Minute))} {
		if _, err := a.AuthenticateAgent(ctx, bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if n := rv.n.Load(); n != 0 {
		t.Fatalf("%d reviews for tokens that cannot be the agent's", n)
	}
	good := jwt(t, []string{"gantry", "other"}, now.Add(2*time.Minute))
	for i := 0; i < 3; i++ {
		id, err := a.AuthenticateAgent(ctx, good)
		if err != nil || id.Node != "n1" {
			t.Fatalf("the agent's token: %+v %v", id, err)
		}
	}
	if n := rv.n.Load(); n != 1 {
		t.Fatalf("%d reviews for one token used three times", n)
	}
	// Past the token's own expiry the cache does not vouch for it.
	now = now.Add(3 * time.Minute)
	if _, err := a.AuthenticateAgent(ctx, good); err == nil {
		t.Fatal("an expired token accepted from the cache")
	}
	other := jwt(t, "gantry", now.Add(time.Hour))
	rv.review.Username = "system:serviceaccount:default:default"
	for i := 0; i < 3; i++ {
		_, err := a.AuthenticateAgent(ctx, other)
		if err == nil {
			t.Fatal("another account's token accepted")
		}
		if i == 0 && !errors.As(err, new(*fault.Forbidden)) {
			t.Fatalf("another account: %v, want forbidden", err)
		}
	}
	if n := rv.n.Load(); n != 2 {
		t.Fatalf("%d reviews: a refused token must not be reviewed again at once", n)
	}
}

// TestAgentAuthReviewBudget: made-up tokens that look right (a new one each
// request, so none is cached) cost reviews only within the budget; past it
// they are answered "unavailable" without a review, and a token already
// accepted is still answered from the cache.
func TestAgentAuthReviewBudget(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	a, rv := budgeted(now, projected.BudgetOptions{Rate: 0.001, Burst: 3, SourceRate: 1000, SourceBurst: 1000})
	ctx := context.Background()
	good := jwt(t, []string{"gantry"}, now.Add(time.Hour))
	if _, err := a.AuthenticateAgent(ctx, good); err != nil {
		t.Fatal(err)
	}
	var un *fault.Unavailable
	refused := 0
	for i := range 20 {
		if _, err := a.AuthenticateAgent(ctx, jwt(t, []string{"gantry"}, now.Add(time.Hour+time.Duration(i+1)*time.Second))); errors.As(err, &un) {
			refused++
		}
	}
	if n := rv.n.Load(); n != 3 || refused != 18 {
		t.Fatalf("%d reviews and %d refused unreviewed for 21 new tokens with a budget of 3, want 3 and 18", n, refused)
	}
	if id, err := a.AuthenticateAgent(ctx, good); err != nil || id.Node != "n1" {
		t.Fatalf("the accepted token with the budget spent: %+v %v", id, err)
	}
}

// TestAgentAuthReviewBudgetPerSource: one source's made-up tokens spend its
// own bucket, not everyone's: another source's new token is still reviewed.
func TestAgentAuthReviewBudgetPerSource(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	a, _ := budgeted(now, projected.BudgetOptions{Rate: 1000, Burst: 1000, SourceRate: 0.001, SourceBurst: 2})
	attacker := clientaddr.WithSource(context.Background(), "203.0.113.9")
	var un *fault.Unavailable
	for i := range 5 {
		_, err := a.AuthenticateAgent(attacker, jwt(t, []string{"gantry"}, now.Add(time.Hour+time.Duration(i)*time.Second)))
		if refused := errors.As(err, &un); refused != (i >= 2) {
			t.Fatalf("the attacker's token %d: %v", i+1, err)
		}
	}
	node := clientaddr.WithSource(context.Background(), "10.0.0.7")
	if id, err := a.AuthenticateAgent(node, jwt(t, []string{"gantry"}, now.Add(2*time.Hour))); err != nil || id.Node != "n1" {
		t.Fatalf("an agent's new token from another source: %+v %v", id, err)
	}
}

// budgeted is an AgentAuth at the fixed time now whose reviewer accepts
// every token as the agent's on node n1, spending from a budget of o.
func budgeted(now time.Time, o projected.BudgetOptions) (*telemetry.AgentAuth, *reviewer) {
	o.Now = func() time.Time { return now }
	rv := &reviewer{review: telemetry.Review{Authenticated: true, Username: "system:serviceaccount:gantry-system:gantry-agent", Audiences: []string{"gantry"}, Node: "n1"}}
	return &telemetry.AgentAuth{Reviewer: rv, Audience: "gantry", ServiceAccount: "system:serviceaccount:gantry-system:gantry-agent", Now: o.Now,
		Reviews: projected.NewBudget(o)}, rv
}
