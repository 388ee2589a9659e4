// Package identity owns who is making a request: the Identity type and carrying
// it in a context. Authentication (OIDC, tokens) decides the identity; this is the
// one place where it plugs into the rest of Gantry.
package identity

import (
	"context"
	"time"
)

// Identity is an authenticated user.
type Identity struct {
	Issuer  string
	Subject string
	Email   string
	Name    string
	Groups  []string
	// IssuedAt is when the provider asserted Groups (a token's iat); zero
	// when the assertion is Gantry's own (a session, a token) or its time
	// unknown. An older assertion never overwrites a newer one.
	IssuedAt time.Time
	// GroupsAbsent: the provider's token carried no groups claim at all
	// (not an empty one). Some providers send groups only at sign-in (in
	// userinfo), or only when there are some: such a token says nothing
	// of the groups recorded at the last sign-in, and leaves them be.
	GroupsAbsent bool

	// Set when the request authenticated with a personal access token: its id,
	// and how it narrows what the owner may do (one team; reading only).
	TokenID   string
	TokenTeam string
	ReadOnly  bool

	// SecondFactor says the provider said a second factor was used when
	// this identity signed in (its amr or acr claim); a session and a token
	// keep what their sign-in said. Roles the policy marks need it.
	SecondFactor bool
	// Via is how the request authenticated: ViaBearer, ViaToken, ViaSession
	// or ViaAgent.
	Via string
	// Node is set for a node's gantry-agent: the node its ServiceAccount
	// token is bound to.
	Node string
	// Workload is set for a run's token: the workload whose pod it is bound
	// to, the only one it reports progress for; Pod is that pod
	// (namespace/name).
	Workload string
	Pod      string
}

// How a request authenticated.
const (
	ViaBearer  = "bearer"  // a JWT from the OpenID provider (the CLI, scripts)
	ViaToken   = "token"   // a personal access token
	ViaSession = "session" // a signed-in browser's cookie
	ViaAgent   = "agent"   // a node's gantry-agent, by its ServiceAccount token (telemetry only)
	ViaRun     = "run"     // a training run, by its pod's projected token (its own progress only)
)

// String is the identity's stable name: its subject, qualified by issuer when
// there is one.
func (i Identity) String() string {
	if i.Issuer == "" {
		return i.Subject
	}
	return i.Issuer + "#" + i.Subject
}

type key struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id Identity) context.Context { return context.WithValue(ctx, key{}, id) }

// From returns the identity in ctx and whether there is one.
func From(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(key{}).(Identity)
	return id, ok
}
