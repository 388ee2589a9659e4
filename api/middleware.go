package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/clientaddr"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/interactive"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/logctx"
	"github.com/gantryhq/gantry/internal/ownmetrics"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
	"github.com/gantryhq/gantry/internal/workload"
)

// SessionAuthenticator finds the signed-in browser session a cookie names.
type SessionAuthenticator interface {
	Authenticate(ctx context.Context, cookie string) (weblogin.Session, error)
}

// credentials authenticates what a request presents: a bearer token (a
// personal access token by its prefix, else a JWT for bearer), or the
// session cookie of a signed-in browser (returned too, for its CSRF check).
// An error wrapping a store failure is not the caller's fault; the others
// (authn.ErrNoCredentials, token.ErrInvalid, weblogin.ErrNoSession,
// user.ErrStale, user.ErrDeactivated, a bad JWT) are answered 401.
type credentials struct {
	bearer func(*http.Request) (identity.Identity, error)
	// observe records a bearer JWT's user as the provider describes them
	// now (user.Service.Observe); nil records nothing.
	observe  func(context.Context, identity.Identity) (identity.Identity, error)
	tokens   *token.Service
	sessions SessionAuthenticator
}

// errStore marks an authentication that failed on Gantry's side.
var errStore = errors.New("authentication could not be completed")

func (cr credentials) authenticate(r *http.Request) (identity.Identity, *weblogin.Session, error) {
	if raw, ok := authn.BearerToken(r.Header.Get("Authorization")); ok {
		switch {
		case cr.tokens != nil && token.Is(raw):
			id, err := cr.tokens.Authenticate(r.Context(), raw)
			id.Via = identity.ViaToken
			if err != nil && !errors.Is(err, token.ErrInvalid) && !errors.Is(err, user.ErrStale) && !errors.Is(err, user.ErrDeactivated) {
				return id, nil, fmt.Errorf("%w: the token: %w", errStore, err) // the store failed: not the caller's fault
			}
			return id, nil, err
		case cr.bearer != nil:
			id, err := cr.bearer(r)
			id.Via = identity.ViaBearer
			if err != nil || cr.observe == nil {
				return id, nil, err // the token was refused: the caller's
			}
			// A provider token says who the user is now: their groups are
			// recorded (for their tokens and sessions), and a deactivated
			// user is refused. Recording failing otherwise (the database
			// away, two first requests racing) is not the caller's fault,
			// and not a 401.
			seen, err := cr.observe(r.Context(), id)
			switch {
			case errors.Is(err, user.ErrDeactivated):
				return id, nil, err
			case err != nil:
				return id, nil, fmt.Errorf("%w: record the user: %w", errStore, err)
			}
			seen.Via = identity.ViaBearer
			return seen, nil, nil
		}
		return identity.Identity{}, nil, authn.ErrNoCredentials
	}
	if ck, cerr := r.Cookie(weblogin.SessionCookie); cerr == nil && cr.sessions != nil {
		ses, err := cr.sessions.Authenticate(r.Context(), ck.Value)
		if err != nil && !errors.Is(err, weblogin.ErrNoSession) {
			return identity.Identity{}, nil, fmt.Errorf("%w: look up the session: %w", errStore, err) // the store failed: not the caller's fault
		}
		if err != nil {
			return identity.Identity{}, nil, err
		}
		id := ses.Identity
		id.Via = identity.ViaSession
		return id, &ses, nil
	}
	return identity.Identity{}, nil, authn.ErrNoCredentials
}

// identify attaches the caller's identity to API requests (credentials);
// a signed-in browser must also send the session's CSRF token in
// X-CSRF-Token on anything but a read, and its changes to an interactive
// workload must come from Gantry's origin.
//
// On AgentPath only a node agent's ServiceAccount token counts (checked by
// agents), and it counts nowhere else; a run's token (checked by runTokens)
// counts only where a run reports its progress.
func identify(cr credentials, agents AgentAuthenticator, runTokens RunAuthenticator) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			// A node's or a run's token costs a TokenReview the first time:
			// who sends it is charged for it (projected.Budget), so only
			// these requests carry their source.
			sourced := func() {
				c.SetRequest(r.WithContext(clientaddr.WithSource(r.Context(), clientaddr.Source(r.RemoteAddr))))
			}
			if r.URL.Path == AgentPath {
				sourced()
				return identifyAgent(c, next, agents)
			}
			if raw, ok := authn.BearerToken(r.Header.Get("Authorization")); ok && r.Method == http.MethodPost && progressOf(r.URL.Path) != "" && runs.IsRunToken(raw) {
				sourced()
				return identifyRun(c, next, runTokens, raw, progressOf(r.URL.Path))
			}
			app := isInteractive(r.URL.Path)
			if !isAPI(r.URL.Path) && !app {
				return next(c)
			}
			id, ses, err := cr.authenticate(r)
			if errors.Is(err, errStore) {
				return err
			}
			if err == nil && ses != nil {
				refuse := ""
				switch {
				case !app && !safeMethod(r.Method) && !ses.CheckCSRF(r.Header.Get(CSRFHeader)):
					refuse = "missing or wrong " + CSRFHeader + " header: a signed-in browser sends its session's CSRF token with every change"
				case app && !interactive.SameOrigin(r):
					refuse = "a change to an interactive workload must come from a page of this origin (Origin header)"
				}
				if refuse != "" {
					// The session is known: the refusal is audited under its user.
					c.SetRequest(r.WithContext(identity.With(r.Context(), id)))
					return &fault.Forbidden{Reason: refuse}
				}
			}
			if err != nil && app && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
				// A browser opening a notebook link signs in first, then comes back.
				return c.Redirect(http.StatusFound, "/auth/login?return="+url.QueryEscape(r.URL.RequestURI()))
			}
			if err != nil {
				// RFC 6750: say that the token is bad, never why — except
				// what its owner can act on (sign in again, ask an admin).
				challenge := `Bearer realm="gantry"`
				if !errors.Is(err, authn.ErrNoCredentials) && !errors.Is(err, weblogin.ErrNoSession) {
					challenge += `, error="invalid_token"`
				}
				c.Response().Header().Set("WWW-Authenticate", challenge)
				msg := "not authenticated"
				switch {
				case errors.Is(err, user.ErrDeactivated):
					msg = "not authenticated: " + user.ErrDeactivated.Error()
				case errors.Is(err, user.ErrStale):
					msg = "not authenticated: " + user.ErrStale.Error()
				}
				return echo.NewHTTPError(http.StatusUnauthorized, msg)
			}
			c.SetRequest(r.WithContext(identity.With(r.Context(), id)))
			return next(c)
		}
	}
}

// liveSinceKey holds, in the echo context, the change feed's position when
// the request arrived (before it was authenticated).
const liveSinceKey = "gantry.live.since"

// liveSince notes the change feed's position as the request arrives: a
// revocation published after it, before liveConns registers the request,
// is checked against it at once.
func liveSince(reg *live.Registry) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Set(liveSinceKey, reg.Seq())
			return next(c)
		}
	}
}

// liveConns registers every long-lived response — a workload's watch
// stream, its followed log, a request to its app (every websocket among
// them) — with the registry, under the credential, the user and the
// workload that allowed it: the registry caps streams and closes any of them
// once a recheck (the same credential authenticated again, the same
// workload read or opened again) fails.
func liveConns(reg *live.Registry, cr credentials, workloads *workload.Service) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			var wid string
			var watch, stream, app bool
			switch {
			case c.Path() == "/api/v1/workloads/:id/watch":
				wid, watch, stream = c.Param("id"), true, true
			case c.Path() == "/api/v1/workloads/:id/logs":
				// follow is read as the handler reads it (1, t, TRUE…);
				// every log request is registered, a followed one counted.
				follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
				wid, stream, watch = c.Param("id"), follow, follow // a followed log ends with its workload
			case isInteractive(r.URL.Path):
				var ok bool
				if wid, _, ok = interactive.Split(r.URL.Path); !ok {
					return next(c)
				}
				app, stream = true, interactive.IsUpgrade(r)
			default:
				return next(c)
			}
			id, ok := identity.From(r.Context())
			if !ok || workloads == nil {
				return next(c)
			}
			probe := r.Clone(context.Background()) // its credential, for the rechecks
			probe.Body = nil
			// A recheck's refusal closes the connection (live.Refused);
			// anything else (the store or the provider not answering) is
			// passing, and the connection stays.
			recheck := func(ctx context.Context) error {
				fresh, _, err := cr.authenticate(probe.WithContext(ctx))
				switch {
				case errors.Is(err, errStore):
					return err
				case err != nil && refusedCredential(err):
					return &live.Refused{Err: err}
				case err != nil:
					return err
				case fresh.String() != id.String():
					return &live.Refused{Err: errors.New("the credential now names someone else")}
				}
				fctx := identity.With(ctx, fresh)
				if app {
					_, err = workloads.Target(fctx, wid)
				} else {
					_, err = workloads.Get(fctx, wid)
				}
				var nf *fault.NotFound
				var fb *fault.Forbidden
				var conf *fault.Conflict
				if errors.As(err, &nf) || errors.As(err, &fb) || errors.As(err, &conf) {
					return &live.Refused{Err: err}
				}
				return err
			}
			since, _ := c.Get(liveSinceKey).(int64)
			ctx, h, err := reg.Open(r.Context(), live.Conn{Workload: wid, User: id.String(), Token: id.TokenID, Stream: stream, Watch: watch, Recheck: recheck})
			if err != nil {
				return err
			}
			if reg.Seq() > since {
				// A change came between the authentication and the
				// registration, when no registration could be closed by
				// it: the credential is checked again now. (The handler
				// checks the workload itself, after this.)
				if _, _, err := cr.authenticate(probe.WithContext(r.Context())); err != nil {
					h.Close()
					if refusedCredential(err) {
						return echo.NewHTTPError(http.StatusUnauthorized, "not authenticated")
					}
					return err // the check could not be made: not the caller's fault
				}
			}
			defer h.Close()
			// What runs after the response (its audit record) runs on the
			// request's own context, not the connection's, which ends now.
			defer func() { c.SetRequest(c.Request().WithContext(r.Context())) }()
			c.SetRequest(r.WithContext(ctx))
			err = next(c)
			return closedBy(ctx, r.Context(), c.Response().Committed, err)
		}
	}
}

// closedBy is a handler's error err as its caller should hear it: a request
// the registry closed (its context, ctx, cancelled with live.ErrClosed while
// the client's, client, goes on) and not yet answered (committed false)
// answers with the refusal that closed it, mapped as ever — the workload's
// (a notebook asked for while it starts is 409 "opens once it is Running",
// not 499 as if the client had gone), else 401 for the credential (not an
// anonymous failure the rate limiter charges: it authenticated when it
// came).
func closedBy(ctx, client context.Context, committed bool, err error) error {
	if err == nil || committed || !errors.Is(err, context.Canceled) || client.Err() != nil {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, live.ErrClosed) {
		return cause
	}
	return err
}

// refusedCredential says whether an authentication error is the credential's
// own (revoked, expired, signed out, deactivated, stale, forged), not a
// failure to check it.
func refusedCredential(err error) bool {
	return errors.Is(err, token.ErrInvalid) || errors.Is(err, weblogin.ErrNoSession) || errors.Is(err, user.ErrDeactivated) ||
		errors.Is(err, user.ErrStale) || errors.Is(err, authn.ErrInvalidToken) || errors.Is(err, authn.ErrNoCredentials)
}

// AgentPath is where node agents push telemetry.
const AgentPath = "/api/v1/telemetry"

// AgentAuthenticator checks a node agent's ServiceAccount token and says
// which node it speaks for.
type AgentAuthenticator interface {
	AuthenticateAgent(ctx context.Context, token string) (identity.Identity, error)
}

// identifyAgent authenticates a node agent on AgentPath.
func identifyAgent(c echo.Context, next echo.HandlerFunc, agents AgentAuthenticator) error {
	r := c.Request()
	raw, ok := authn.BearerToken(r.Header.Get("Authorization"))
	if !ok || agents == nil {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="gantry-agent"`)
		return echo.NewHTTPError(http.StatusUnauthorized, "not authenticated: a node agent's ServiceAccount token is required")
	}
	id, err := agents.AuthenticateAgent(r.Context(), raw)
	var un *fault.Unavailable
	var fb *fault.Forbidden
	switch {
	case errors.As(err, &un):
		return err // the cluster did not answer: not the agent's fault
	case errors.As(err, &fb):
		return err
	case err != nil:
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="gantry-agent", error="invalid_token"`)
		return echo.NewHTTPError(http.StatusUnauthorized, "not authenticated")
	}
	id.Via = identity.ViaAgent
	c.SetRequest(r.WithContext(identity.With(r.Context(), id)))
	return next(c)
}

// RunAuthenticator checks a training run's token, sent to report for
// workload, and says which workload it reports for (runs.TokenAuth).
type RunAuthenticator interface {
	Authenticate(ctx context.Context, token, workload string) (identity.Identity, error)
}

// progressOf is the workload id of a progress route
// (/api/v1/workloads/{id}/progress); "" for any other path, or an id that
// cannot be a workload's (which then goes no further than a person's
// credentials would: no review is asked for it).
func progressOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/api/v1/workloads/")
	if !ok {
		return ""
	}
	id, ok := strings.CutSuffix(rest, "/progress")
	if !ok || !workload.ValidID(id) {
		return ""
	}
	return id
}

// identifyRun authenticates a run's token on workload's progress route.
func identifyRun(c echo.Context, next echo.HandlerFunc, runTokens RunAuthenticator, raw, workload string) error {
	r := c.Request()
	if runTokens == nil {
		return noRuns
	}
	id, err := runTokens.Authenticate(r.Context(), raw, workload)
	var un *fault.Unavailable
	var fb *fault.Forbidden
	switch {
	case errors.As(err, &un), errors.As(err, &fb):
		return err
	case err != nil:
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="gantry-run", error="invalid_token"`)
		return echo.NewHTTPError(http.StatusUnauthorized, "not authenticated: the run's token was refused")
	}
	id.Via = identity.ViaRun
	c.SetRequest(r.WithContext(identity.With(r.Context(), id)))
	return next(c)
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

func isAPI(path string) bool { return len(path) >= 8 && path[:8] == "/api/v1/" || path == "/api/v1" }

// isInteractive reports whether path is under /w/, where Gantry proxies
// interactive workloads.
func isInteractive(path string) bool { return strings.HasPrefix(path, interactive.Prefix) }

func secureHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		if !isInteractive(c.Request().URL.Path) { // an app says how its files are cached
			h.Set("Cache-Control", "no-store")
		}
		return next(c)
	}
}

func accessLog(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now() //clock:allow measures a duration
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			log.LogAttrs(c.Request().Context(), slog.LevelInfo, "request",
				slog.String("method", c.Request().Method),
				slog.String("route", c.Path()),
				slog.Int("status", c.Response().Status),
				slog.Duration("duration", time.Since(start))) // request_id and workload_id come from the context (logIDs)
			return nil
		}
	}
}

// auditLog records every mutating API request and every denial (401, 403,
// 429 from the anonymous limit, a 404 hiding a denial), once the response is
// decided, with the caller, the route, the outcome and why. Given an
// audit.Aggregator, repeated denials are counted, not written one by one.
func auditLog(store audit.Store, log *slog.Logger, now func() time.Time) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := next(c); err != nil {
				c.Error(err)
				if store == nil {
					return nil
				}
				return record(c, store, log, now, err)
			}
			if store == nil {
				return nil
			}
			return record(c, store, log, now, nil)
		}
	}
}

// knownMethods answers 501 to a request whose method is none of HTTP's
// own before anything else sees it: Go's server accepts any token as a
// method, and what a method names would otherwise reach the metrics'
// labels and the audit log. An interactive workload's requests pass to its
// route, which answers the methods echo routes with Any (HTTP's own,
// PROPFIND and REPORT) and 405 to the rest.
func knownMethods(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if ownmetrics.StandardMethod(c.Request().Method) || isInteractive(c.Request().URL.Path) {
			return next(c)
		}
		return echo.NewHTTPError(http.StatusNotImplemented, "method not implemented")
	}
}

// clip cuts s to at most n bytes (at a rune boundary), marking the cut:
// what a request names is recorded, not kept whole.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Audit records keep at most these many bytes of what a request named and
// of the reason it was refused: a path of a megabyte must not become an
// append-only row of one.
const (
	auditObjectBytes = 512
	auditReasonBytes = 2048
)

func record(c echo.Context, store audit.Store, log *slog.Logger, now func() time.Time, err error) error {
	req := c.Request()
	status := c.Response().Status
	denied := status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusTooManyRequests
	var nf *fault.NotFound
	hidden := errors.As(err, &nf) && nf.Denied != "" // a denial answered as 404
	mutating := req.Method != http.MethodGet && req.Method != http.MethodHead && req.Method != http.MethodOptions
	if isInteractive(req.URL.Path) {
		// An app's own traffic and answers are the app's: only Gantry's
		// refusals (an error before anything was forwarded) are audited.
		if err == nil {
			return nil
		}
		mutating = false
	} else if !isAPI(req.URL.Path) {
		return nil
	}
	if !(mutating || denied || hidden) {
		return nil
	}
	if id, ok := identity.From(req.Context()); ok && (id.Via == identity.ViaAgent || id.Via == identity.ViaRun) && err == nil {
		return nil // a node's telemetry and a run's progress change nothing a person did: refusals only
	}
	r := audit.Record{At: now(), Actor: "anonymous", Action: ownmetrics.Method(req.Method) + " " + clip(c.Path(), auditObjectBytes), Object: clip(req.URL.Path, auditObjectBytes),
		Decision: audit.Allow, Status: status, RequestID: c.Response().Header().Get(echo.HeaderXRequestID)}
	if id, ok := identity.From(req.Context()); ok {
		r.Actor = id.String()
		if id.TokenID != "" {
			r.Actor += " (token " + id.TokenID + ")"
		}
	}
	switch {
	case hidden:
		r.Decision, r.Reason = audit.Deny, nf.Denied+" (answered 404)"
	case denied:
		r.Decision = audit.Deny
	}
	if err != nil && !hidden {
		if _, p := problemFor(err); p.Detail != nil {
			r.Reason = *p.Detail
		} else {
			r.Reason = p.Title
		}
	}
	r.Reason = clip(r.Reason, auditReasonBytes)
	if host, _, serr := net.SplitHostPort(req.RemoteAddr); serr == nil {
		r.Source = host
	}
	// A client that went away does not take the record with it: what it
	// asked for may have been done.
	actx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), auditWriteTimeout)
	defer cancel()
	if _, aerr := store.AppendAudit(actx, r); aerr != nil {
		log.ErrorContext(actx, "audit record not written", "err", aerr, "action", r.Action, "actor", r.Actor)
	}
	return nil
}

// auditWriteTimeout bounds an audit write once its request has ended.
const auditWriteTimeout = 10 * time.Second

// logIDs puts the request's id, and the workload's id on a workload's routes,
// into the request's context: every line logged while serving it carries
// them (package logctx).
func logIDs(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		attrs := []slog.Attr{slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID))}
		if strings.HasPrefix(c.Path(), "/api/v1/workloads/:id") {
			attrs = append(attrs, slog.String("workload_id", c.Param("id")))
		}
		r := c.Request()
		c.SetRequest(r.WithContext(logctx.With(r.Context(), attrs...)))
		return next(c)
	}
}
