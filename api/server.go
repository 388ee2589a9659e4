// Package api owns Gantry's HTTP surface: the handlers of the strict server
// generated from openapi.yaml into api/gen (one file per resource here), and
// the glue around them — validation of every request against the spec, the
// identity hook, body limits, logging, auditing, and the one mapping from
// errors to RFC 9457 problem responses. Handlers stay thin: they translate
// between the wire types and the domain services.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/advice"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/capacity"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/estimate"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/interactive"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/logctx"
	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/overrides"
	"github.com/gantryhq/gantry/internal/ownmetrics"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/trial"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/portal"
)

// Options configure the HTTP server.
type Options struct {
	// Transient types a dependency's refusal that is no fault of the
	// request — the database's disk full, its connection lost — as
	// *fault.Unavailable (503, try again), wherever it surfaces; nil:
	// errors are as returned.
	Transient func(error) error
	Catalog   *catalog.Service
	Workloads *workload.Service
	// Estimates prices launches before they are made.
	Estimates *estimate.Service
	// Budgets say where the teams' budgets stand.
	Budgets *budget.Service
	// Capacity is the node groups and what their machines are doing.
	Capacity *capacity.Service
	// Fleet is the worker clusters (empty: one cluster), and Workers what
	// they are doing now.
	Fleet   *fleet.Fleet
	Workers fleet.Watch
	// Quotas are the teams' quotas in force, shown beside their use on
	// each worker cluster.
	Quotas Quotas
	// Own is Gantry's own metrics (GET /metrics); nil: a registry of the
	// handler's own.
	Own *ownmetrics.Metrics
	// Settings are the teams' own lifecycle choices.
	Settings *overrides.Service
	// Edits are the platform team's changes of prices, quotas and budgets
	// over the files.
	Edits *overlay.Service
	// Prices is a GPU class's price history.
	Prices       func(ctx context.Context, class string) ([]gpu.PriceRecord, error)
	Checks       []Check // what /readyz asks, in order
	Spec         []byte  // openapi.yaml
	MaxBodyBytes int64
	// MaxConcurrentReads is how many of the reads the database alone
	// answers run at a time, the rest waiting their turn (readGate); 0:
	// DefaultConcurrentReads per CPU.
	MaxConcurrentReads int
	Logger             *slog.Logger
	// Portal serves the web UI at /, when set.
	Portal http.Handler
	// Identify verifies a bearer JWT (not a personal access token); with it
	// nil, only tokens and sessions authenticate. Its error is the
	// caller's (401). The user it names is then recorded with Users.Observe
	// (a deactivated user refused, 401; recording failing is Gantry's
	// fault, 503 or 500).
	Identify func(*http.Request) (identity.Identity, error)
	// RecheckBearer verifies a bearer JWT again for an open stream and
	// checks that its user is still active, without recording anything;
	// nil: Identify, and the user recorded as on a request.
	RecheckBearer func(*http.Request) (identity.Identity, error)
	// Sessions authenticates signed-in browsers by their session cookie.
	Sessions SessionAuthenticator
	// SignIn is what GET /auth/config tells clients.
	SignIn model.AuthConfig
	// Images is the image catalog and its verifier.
	Images *imageverify.Images
	// Teams lists the teams where an identity holds a permission (for /me).
	Teams func(id identity.Identity, permission access.Permission) (all bool, teams []string)
	// Audit, when set, records every mutating request and every denial
	// (through an audit.Aggregator, repeated denials are counted).
	Audit audit.Store
	// Anonymous limits requests without valid credentials per source.
	Anonymous AnonymousLimit
	// Tokens manages personal access tokens and authenticates bearer tokens
	// with their prefix (gnt_) before Identify is asked.
	Tokens *token.Service
	// Users lists and deactivates users (platform admins).
	Users *user.Service
	// Authorize decides whether an identity holds a route's declared permission
	// in some team; nil denies every non-public route.
	Authorize func(id identity.Identity, permission access.Permission) bool
	// RolesWith names the roles that grant a permission, for the message
	// of a refusal (who could be asked); none: the message names only the
	// permission.
	RolesWith func(permission access.Permission) []string
	// NeedsSecondFactor says whether a refused identity would hold a
	// permission after a sign-in with a second factor (nil: never).
	NeedsSecondFactor func(id identity.Identity, permission access.Permission) bool
	// LogDrain is how long a followed log keeps reading after its workload
	// has ended (default DefaultLogDrain).
	LogDrain time.Duration
	// AppTransport reaches interactive workloads' apps behind /w/{id}/
	// (default: a plain HTTP transport to their in-cluster addresses).
	AppTransport http.RoundTripper
	// AppWorkers reach the apps of interactive workloads that run on a
	// worker cluster (nil: none can be reached).
	AppWorkers interactive.Workers
	// Agents authenticates node agents pushing telemetry (nil: refused).
	Agents AgentAuthenticator
	// Runs takes training runs' progress reports and answers progress;
	// RunTokens authenticates the runs (nil: progress is unavailable).
	Runs      *runs.Service
	Trials    *trial.Service
	RunTokens RunAuthenticator
	// Moves lists where a workload was moved off quarantined nodes
	// (required: the store's record of package quarantine's moves).
	Moves Moves
	// Telemetry ingests agents' batches and lists GPU nodes; Metrics
	// answers workloads' series (from the same service, or Prometheus).
	Telemetry *telemetry.Service
	Metrics   *telemetry.Reader
	// Advice judges workloads' series.
	Advice *advice.Service
	// Live registers long-lived responses (watch streams, followed logs,
	// proxied sockets), caps them and closes them when what allowed them
	// changes; required.
	Live *live.Registry
	// Now is the server's clock: what the API reports and decides by
	// (costs so far, periods, audit times, the watch stream); required.
	Now func() time.Time
}

// DefaultLogDrain is Options.LogDrain's default: Kubernetes' default grace
// period, and a little.
const DefaultLogDrain = 35 * time.Second

// New builds the HTTP handler.
func New(o Options) (*echo.Echo, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Logger = slog.New(logctx.Handler(o.Logger.Handler())) // request and workload ids from the context
	validate, err := validator(o.Spec, o.Authorize, o.RolesWith, o.NeedsSecondFactor)
	if err != nil {
		return nil, err
	}
	if o.Moves == nil {
		return nil, errors.New("api: the quarantine moves are required")
	}
	if o.Live == nil {
		return nil, errors.New("api: a live connection registry is required")
	}
	if o.Edits == nil {
		return nil, errors.New("api: the platform edits service is required")
	}
	if o.Capacity == nil {
		return nil, errors.New("api: the capacity service is required")
	}
	if o.Fleet == nil || o.Workers == nil || o.Quotas == nil {
		return nil, errors.New("api: the fleet, its watch and the teams' quotas are required")
	}
	if o.Now == nil {
		return nil, errors.New("api: the server's clock is required")
	}
	if o.Identify != nil && o.Users == nil {
		return nil, errors.New("api: a provider's tokens (Identify) need the users service, which records their users and refuses the deactivated")
	}
	if o.LogDrain == 0 {
		o.LogDrain = DefaultLogDrain
	}
	if o.Anonymous.Now == nil {
		o.Anonymous.Now = o.Now
	}
	if o.Transient == nil {
		o.Transient = func(err error) error { return err }
	}
	cr := credentials{bearer: o.Identify, tokens: o.Tokens, sessions: o.Sessions}
	if o.Users != nil {
		cr.observe = o.Users.Observe
	}
	recheck := cr
	if o.RecheckBearer != nil {
		recheck.bearer, recheck.observe = o.RecheckBearer, nil
	}
	if o.Own == nil {
		o.Own = ownmetrics.New()
	}
	gate := newReadGate(o.MaxConcurrentReads)
	o.Own.ReadGate(gate.Running, gate.Waiting)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(o.Logger, o.Transient)
	e.Pre(knownMethods)
	e.Use(
		middleware.RequestID(),
		logIDs,
		measure(o.Own),
		accessLog(o.Logger),
		auditLog(o.Audit, o.Logger, o.Now),
		middleware.Recover(),
		middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: fmt.Sprint(o.MaxBodyBytes) + "B",
			Skipper: func(c echo.Context) bool { return isInteractive(c.Request().URL.Path) }}), // an app's uploads are its business
		secureHeaders,
		limitAnonymous(o.Anonymous),
		liveSince(o.Live),
		gate.middleware,
		identify(cr, o.Agents, o.RunTokens),
		validate,
		liveConns(o.Live, recheck, o.Workloads),
	)
	s := &server{o: o}
	gen.RegisterHandlers(e, gen.NewStrictHandler(s, nil))
	if o.Workloads != nil {
		proxy := &interactive.Proxy{Opener: o.Workloads, Transport: o.AppTransport, Workers: o.AppWorkers, Log: o.Logger,
			Strip: []string{weblogin.SessionCookie, weblogin.StateCookie}}
		e.Any(interactive.Prefix+"*", func(c echo.Context) error { return proxy.Serve(c.Response(), c.Request()) })
	}
	if o.Portal != nil {
		for _, p := range portal.Paths {
			e.Add(p.Method, p.Path, echo.WrapHandler(o.Portal))
		}
	}
	return e, nil
}

// CSRFHeader carries a browser session's CSRF token on API calls.
const CSRFHeader = "X-CSRF-Token"

// server implements StrictServerInterface.
// Moves lists a workload's moves off quarantined nodes, newest first.
type Moves interface {
	Moves(ctx context.Context, workloadID string) ([]quarantine.Move, error)
}

type server struct {
	o Options
}

var _ gen.StrictServerInterface = (*server)(nil)

func caller(ctx context.Context) string {
	id, _ := identity.From(ctx)
	return id.String()
}

// noTokens answers token requests on a server built without a token service.
var noTokens = &fault.Unavailable{What: "personal access tokens", Err: errors.New("not configured on this server")}

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
