// Package api owns Gantry's HTTP surface: the handlers generated from openapi.yaml
// (oapi-codegen, echo strict server) and the glue around them — validation of every
// request against the spec, the identity hook, body limits, logging, and the one
// mapping from errors to RFC 9457 problem responses. Handlers stay thin: they
// translate between the wire types and the domain services.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/weblogin"
	"github.com/gantryhq/gantry/internal/workload"
	"github.com/gantryhq/gantry/portal"
)

// Pinger checks a dependency for /readyz.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Check is one dependency /readyz asks.
type Check struct {
	Name   string
	Pinger Pinger
}

// Options configure the HTTP server.
type Options struct {
	Catalog      *catalog.Service
	Workloads    *workload.Service
	Checks       []Check // what /readyz asks, in order
	Spec         []byte  // openapi.yaml
	MaxBodyBytes int64
	Logger       *slog.Logger
	// Portal serves the web UI at /, when set.
	Portal http.Handler
	// Identify verifies a bearer JWT (not a personal access token); with it
	// nil, only tokens and sessions authenticate.
	Identify func(*http.Request) (identity.Identity, error)
	// Sessions authenticates signed-in browsers by their session cookie.
	Sessions SessionAuthenticator
	// SignIn is what GET /auth/config tells clients.
	SignIn AuthConfig
	// Images is the image catalog and its verifier.
	Images *imageverify.Images
	// Teams lists the teams where an identity holds a permission (for /me).
	Teams func(id identity.Identity, permission access.Permission) (all bool, teams []string)
	// Audit, when set, records every mutating request and every denial.
	Audit audit.Store
	// Tokens manages personal access tokens and authenticates bearer tokens
	// with their prefix (gnt_) before Identify is asked.
	Tokens *token.Service
	// Authorize decides whether an identity holds a route's declared permission
	// in some team; nil denies every non-public route.
	Authorize func(id identity.Identity, permission access.Permission) bool
}

// New builds the HTTP handler.
func New(o Options) (*echo.Echo, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	validate, err := validator(o.Spec, o.Authorize)
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(o.Logger)
	e.Use(
		middleware.RequestID(),
		accessLog(o.Logger),
		auditLog(o.Audit, o.Logger),
		middleware.Recover(),
		middleware.BodyLimit(fmt.Sprint(o.MaxBodyBytes)+"B"),
		secureHeaders,
		identify(o.Identify, o.Tokens, o.Sessions),
		validate,
	)
	s := &server{o: o}
	RegisterHandlers(e, NewStrictHandler(s, nil))
	if o.Portal != nil {
		for _, p := range portal.Paths {
			e.Add(p.Method, p.Path, echo.WrapHandler(o.Portal))
		}
	}
	return e, nil
}

// SessionAuthenticator finds the signed-in browser session a cookie names.
type SessionAuthenticator interface {
	Authenticate(ctx context.Context, cookie string) (weblogin.Session, error)
}

// identify attaches the caller's identity to API requests: a bearer token
// (a personal access token by its prefix, else a JWT for Identify), or the
// session cookie of a signed-in browser, which must also send the session's
// CSRF token in X-CSRF-Token on anything but a read.
func identify(bearer func(*http.Request) (identity.Identity, error), tokens *token.Service, sessions SessionAuthenticator) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if !isAPI(r.URL.Path) {
				return next(c)
			}
			var id identity.Identity
			err := authn.ErrNoCredentials
			if raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
				switch {
				case tokens != nil && token.Is(raw):
					id, err = tokens.Authenticate(r.Context(), raw)
					id.Via = identity.ViaToken
				case bearer != nil:
					id, err = bearer(r)
					id.Via = identity.ViaBearer
				}
			} else if ck, cerr := r.Cookie(weblogin.SessionCookie); cerr == nil && sessions != nil {
				var ses weblogin.Session
				ses, err = sessions.Authenticate(r.Context(), ck.Value)
				if err != nil && !errors.Is(err, weblogin.ErrNoSession) {
					return fmt.Errorf("look up the session: %w", err) // the store failed: not the caller's fault
				}
				if err == nil && !safeMethod(r.Method) && !ses.CheckCSRF(r.Header.Get(CSRFHeader)) {
					return &fault.Forbidden{Reason: "missing or wrong " + CSRFHeader + " header: a signed-in browser sends its session's CSRF token with every change"}
				}
				id = ses.Identity
				id.Via = identity.ViaSession
			}
			if err != nil {
				// RFC 6750: say that the token is bad, never why.
				challenge := `Bearer realm="gantry"`
				if !errors.Is(err, authn.ErrNoCredentials) && !errors.Is(err, weblogin.ErrNoSession) {
					challenge += `, error="invalid_token"`
				}
				c.Response().Header().Set("WWW-Authenticate", challenge)
				return echo.NewHTTPError(http.StatusUnauthorized, "not authenticated")
			}
			c.SetRequest(r.WithContext(identity.With(r.Context(), id)))
			return next(c)
		}
	}
}

// CSRFHeader carries a browser session's CSRF token on API calls.
const CSRFHeader = "X-CSRF-Token"

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

func isAPI(path string) bool { return len(path) >= 8 && path[:8] == "/api/v1/" || path == "/api/v1" }

func secureHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		return next(c)
	}
}

func accessLog(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			log.LogAttrs(c.Request().Context(), slog.LevelInfo, "request",
				slog.String("method", c.Request().Method),
				slog.String("route", c.Path()),
				slog.Int("status", c.Response().Status),
				slog.Duration("duration", time.Since(start)),
				slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)))
			return nil
		}
	}
}

// auditLog records every mutating API request and every denial, once the
// response is decided, with the caller, the route, the outcome and why.
func auditLog(store audit.Store, log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := next(c); err != nil {
				c.Error(err)
				if store == nil {
					return nil
				}
				return record(c, store, log, err)
			}
			if store == nil {
				return nil
			}
			return record(c, store, log, nil)
		}
	}
}

func record(c echo.Context, store audit.Store, log *slog.Logger, err error) error {
	req := c.Request()
	status := c.Response().Status
	denied := status == http.StatusUnauthorized || status == http.StatusForbidden
	mutating := req.Method != http.MethodGet && req.Method != http.MethodHead && req.Method != http.MethodOptions
	if !isAPI(req.URL.Path) || !(mutating || denied) {
		return nil
	}
	r := audit.Record{At: time.Now(), Actor: "anonymous", Action: req.Method + " " + c.Path(), Object: req.URL.Path,
		Decision: audit.Allow, Status: status, RequestID: c.Response().Header().Get(echo.HeaderXRequestID)}
	if id, ok := identity.From(req.Context()); ok {
		r.Actor = id.String()
		if id.TokenID != "" {
			r.Actor += " (token " + id.TokenID + ")"
		}
	}
	if denied {
		r.Decision = audit.Deny
	}
	if err != nil {
		if _, p := problemFor(err); p.Detail != nil {
			r.Reason = *p.Detail
		} else {
			r.Reason = p.Title
		}
	}
	if host, _, serr := net.SplitHostPort(req.RemoteAddr); serr == nil {
		r.Source = host
	}
	if _, aerr := store.AppendAudit(req.Context(), r); aerr != nil {
		log.ErrorContext(req.Context(), "audit record not written", "err", aerr, "action", r.Action, "actor", r.Actor)
	}
	return nil
}

func (s *server) ListAudit(ctx context.Context, req ListAuditRequestObject) (ListAuditResponseObject, error) {
	if s.o.Audit == nil {
		return nil, &fault.Unavailable{What: "audit log", Err: errors.New("not configured on this server")}
	}
	p := req.Params
	limit := 100
	if p.Limit != nil {
		limit = *p.Limit
	}
	f := audit.Filter{Actor: deref(p.Actor), After: deref(p.After), Limit: limit + 1}
	if p.Decision != nil {
		f.Decision = string(*p.Decision)
	}
	recs, err := s.o.Audit.AuditRecords(ctx, f)
	if err != nil {
		return nil, err
	}
	out := AuditList{Items: []AuditRecord{}}
	for i, r := range recs {
		if i == limit {
			out.NextAfter = ptr(recs[limit-1].Seq)
			break
		}
		out.Items = append(out.Items, AuditRecord{Seq: r.Seq, At: r.At, Actor: r.Actor, Action: r.Action, Object: r.Object,
			Decision: AuditRecordDecision(r.Decision), Status: r.Status, Reason: r.Reason, RequestId: r.RequestID, Source: r.Source, Hash: r.Hash})
	}
	return ListAudit200JSONResponse(out), nil
}

// server implements StrictServerInterface.
type server struct {
	o Options
}

var _ StrictServerInterface = (*server)(nil)

func caller(ctx context.Context) string {
	id, _ := identity.From(ctx)
	return id.String()
}

func (s *server) images() (*imageverify.Images, error) {
	if s.o.Images == nil {
		return nil, &fault.Unavailable{What: "image catalog", Err: errors.New("not configured on this server")}
	}
	return s.o.Images, nil
}

func (s *server) ListImages(ctx context.Context, _ ListImagesRequestObject) (ListImagesResponseObject, error) {
	im, err := s.images()
	if err != nil {
		return nil, err
	}
	out := ImageList{Items: []CatalogImage{}}
	for _, e := range im.Catalog.List() {
		c, err := catalogImageOut(e)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, c)
	}
	return ListImages200JSONResponse(out), nil
}

func (s *server) GetImage(ctx context.Context, req GetImageRequestObject) (GetImageResponseObject, error) {
	im, err := s.images()
	if err != nil {
		return nil, err
	}
	e, ok := im.Catalog.Get(req.Name)
	if !ok {
		return nil, &fault.NotFound{Kind: "image", Name: req.Name}
	}
	c, err := catalogImageOut(e)
	if err != nil {
		return nil, err
	}
	return GetImage200JSONResponse(c), nil
}

func (s *server) VerifyImage(ctx context.Context, req VerifyImageRequestObject) (VerifyImageResponseObject, error) {
	im, err := s.images()
	if err != nil {
		return nil, err
	}
	if _, ok := im.Catalog.Get(req.Name); !ok {
		return nil, &fault.NotFound{Kind: "image", Name: req.Name}
	}
	r, err := im.Verify(ctx, req.Name+":"+req.Body.Tag)
	if err != nil {
		return nil, err
	}
	v := Verification{Image: r.Image, Reference: r.Reference, Digest: r.Digest, Pinned: r.Pinned, Signer: r.Signer, VerifiedAt: r.VerifiedAt, Cached: r.Cached}
	if len(r.Annotations) > 0 {
		v.Annotations = &r.Annotations
	}
	if len(r.Attestations) > 0 {
		v.Attestations = &r.Attestations
	}
	return VerifyImage200JSONResponse(v), nil
}

func (s *server) GetAuthConfig(ctx context.Context, _ GetAuthConfigRequestObject) (GetAuthConfigResponseObject, error) {
	if s.o.SignIn.Issuer == "" {
		return nil, &fault.Unavailable{What: "sign-in", Err: errors.New("no OpenID provider configured")}
	}
	return GetAuthConfig200JSONResponse(s.o.SignIn), nil
}

func (s *server) GetMe(ctx context.Context, _ GetMeRequestObject) (GetMeResponseObject, error) {
	id, _ := identity.From(ctx)
	me := Me{Issuer: id.Issuer, Subject: id.Subject, Email: strp(id.Email), Name: strp(id.Name), Groups: id.Groups,
		Via: MeVia(id.Via), TokenID: strp(id.TokenID), LaunchTeams: []string{}}
	if me.Groups == nil {
		me.Groups = []string{}
	}
	if s.o.Teams != nil {
		all, teams := s.o.Teams(id, access.WorkloadsLaunch)
		me.AllTeams = all
		if teams != nil && !id.ReadOnly {
			me.LaunchTeams = teams
		}
		if id.ReadOnly {
			me.AllTeams = false
		}
	}
	return GetMe200JSONResponse(me), nil
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *server) GetHealth(ctx context.Context, _ GetHealthRequestObject) (GetHealthResponseObject, error) {
	return GetHealth200JSONResponse{Status: Ok}, nil
}

func (s *server) GetReady(ctx context.Context, _ GetReadyRequestObject) (GetReadyResponseObject, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r := Readiness{Status: Ready, Checks: []struct {
		Detail *string `json:"detail,omitempty"`
		Name   string  `json:"name"`
		Ok     bool    `json:"ok"`
	}{}}
	for _, c := range s.o.Checks {
		ok, detail := true, (*string)(nil)
		if err := c.Pinger.Ping(ctx); err != nil {
			ok, detail = false, ptr(c.Name+" does not answer")
			r.Status = NotReady
			s.o.Logger.WarnContext(ctx, "readiness check failed", "check", c.Name, "err", err)
		}
		r.Checks = append(r.Checks, struct {
			Detail *string `json:"detail,omitempty"`
			Name   string  `json:"name"`
			Ok     bool    `json:"ok"`
		}{Detail: detail, Name: c.Name, Ok: ok})
	}
	if r.Status == NotReady {
		return GetReady503JSONResponse(r), nil
	}
	return GetReady200JSONResponse(r), nil
}

func (s *server) GetOpenAPI(ctx context.Context, _ GetOpenAPIRequestObject) (GetOpenAPIResponseObject, error) {
	return GetOpenAPI200ApplicationyamlResponse{Body: bytesReader(s.o.Spec), ContentLength: int64(len(s.o.Spec))}, nil
}

func (s *server) ListTemplates(ctx context.Context, _ ListTemplatesRequestObject) (ListTemplatesResponseObject, error) {
	vs, err := s.o.Catalog.List(ctx)
	if err != nil {
		return nil, err
	}
	return ListTemplates200JSONResponse(templateList(vs)), nil
}

func (s *server) CreateTemplate(ctx context.Context, req CreateTemplateRequestObject) (CreateTemplateResponseObject, error) {
	t, err := s.parseTemplate(req.Body)
	if err != nil {
		return nil, err
	}
	v, err := s.o.Catalog.Create(ctx, caller(ctx), t)
	if err != nil {
		return nil, err
	}
	return CreateTemplate201JSONResponse(templateVersion(v)), nil
}

func (s *server) GetTemplate(ctx context.Context, req GetTemplateRequestObject) (GetTemplateResponseObject, error) {
	version := 0
	if req.Params.Version != nil {
		version = *req.Params.Version
	}
	v, err := s.o.Catalog.Get(ctx, req.Name, version)
	if err != nil {
		return nil, err
	}
	return GetTemplate200JSONResponse(templateVersion(v)), nil
}

func (s *server) UpdateTemplate(ctx context.Context, req UpdateTemplateRequestObject) (UpdateTemplateResponseObject, error) {
	t, err := s.parseTemplate(req.Body)
	if err != nil {
		return nil, err
	}
	v, _, err := s.o.Catalog.Update(ctx, caller(ctx), req.Name, t)
	if err != nil {
		return nil, err
	}
	return UpdateTemplate200JSONResponse(templateVersion(v)), nil
}

func (s *server) DeleteTemplate(ctx context.Context, req DeleteTemplateRequestObject) (DeleteTemplateResponseObject, error) {
	if err := s.o.Catalog.Delete(ctx, caller(ctx), req.Name); err != nil {
		return nil, err
	}
	return DeleteTemplate204Response{}, nil
}

func (s *server) ListTemplateVersions(ctx context.Context, req ListTemplateVersionsRequestObject) (ListTemplateVersionsResponseObject, error) {
	vs, err := s.o.Catalog.History(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return ListTemplateVersions200JSONResponse(templateList(vs)), nil
}

func (s *server) RenderTemplate(ctx context.Context, req RenderTemplateRequestObject) (RenderTemplateResponseObject, error) {
	b := req.Body
	rd, err := s.o.Workloads.Preview(ctx, caller(ctx), workload.Request{
		Template: req.Name, Version: deref(b.TemplateVersion), Team: b.Team, Choice: choice(b.Gpu, b.Parameters, b.Confidential),
	})
	if err != nil {
		return nil, err
	}
	out := RenderResult{Template: rd.Version.Name, TemplateVersion: rd.Version.Version, Hash: rd.Hash, Objects: []map[string]any{}}
	for _, o := range rd.Objects {
		var m map[string]any
		if err := remarshal(o, &m); err != nil {
			return nil, err
		}
		delete(m, "status")
		out.Objects = append(out.Objects, m)
	}
	return RenderTemplate200JSONResponse(out), nil
}

func (s *server) ListGPUClasses(ctx context.Context, _ ListGPUClassesRequestObject) (ListGPUClassesResponseObject, error) {
	out := GPUClassList{Items: []GPUClass{}}
	for _, c := range s.o.Catalog.Classes().List() {
		out.Items = append(out.Items, gpuClass(c))
	}
	return ListGPUClasses200JSONResponse(out), nil
}

func (s *server) GetGPUClass(ctx context.Context, req GetGPUClassRequestObject) (GetGPUClassResponseObject, error) {
	c, ok := s.o.Catalog.Classes().Get(req.Name)
	if !ok {
		return nil, notFound("GPU class", req.Name)
	}
	return GetGPUClass200JSONResponse(gpuClass(c)), nil
}

func (s *server) CreateWorkload(ctx context.Context, req CreateWorkloadRequestObject) (CreateWorkloadResponseObject, error) {
	b := req.Body
	w, replayed, err := s.o.Workloads.Create(ctx, caller(ctx), workload.Request{
		Template: b.Template, Version: deref(b.TemplateVersion), Team: b.Team, Choice: choice(b.Gpu, b.Parameters, b.Confidential),
		IdempotencyKey: deref(req.Params.IdempotencyKey),
	})
	if err != nil {
		return nil, err
	}
	if replayed {
		return CreateWorkload200JSONResponse(workloadOut(w)), nil
	}
	return CreateWorkload201JSONResponse(workloadOut(w)), nil
}

func (s *server) StopWorkload(ctx context.Context, req StopWorkloadRequestObject) (StopWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Stop(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return StopWorkload200JSONResponse(workloadOut(w)), nil
}

func (s *server) StartWorkload(ctx context.Context, req StartWorkloadRequestObject) (StartWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Start(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return StartWorkload200JSONResponse(workloadOut(w)), nil
}

func (s *server) GetWorkloadLogs(ctx context.Context, req GetWorkloadLogsRequestObject) (GetWorkloadLogsResponseObject, error) {
	r, err := s.o.Workloads.Logs(ctx, req.Id, deref(req.Params.Follow), int64(deref(req.Params.TailLines)))
	if err != nil {
		return nil, err
	}
	return logStream{r}, nil
}

// logStream copies a log to the client as it arrives, flushing each chunk.
type logStream struct{ r io.ReadCloser }

func (l logStream) VisitGetWorkloadLogsResponse(w http.ResponseWriter) error {
	defer l.r.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := l.r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client went away
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return nil // headers are sent: end the stream
		}
	}
}

func (s *server) ListWorkloadEvents(ctx context.Context, req ListWorkloadEventsRequestObject) (ListWorkloadEventsResponseObject, error) {
	evs, err := s.o.Workloads.Events(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	out := EventList{Items: make([]Event, len(evs))}
	for i, e := range evs {
		out.Items[i] = Event{Time: e.Time, Type: e.Type, Reason: e.Reason, Message: e.Message, Object: e.Object, Count: ptr(e.Count)}
	}
	return ListWorkloadEvents200JSONResponse(out), nil
}

func (s *server) ListWorkloads(ctx context.Context, req ListWorkloadsRequestObject) (ListWorkloadsResponseObject, error) {
	p := req.Params
	f := workload.Filter{Team: deref(p.Team), Owner: deref(p.Owner), Template: deref(p.Template), Limit: deref(p.Limit)}
	if p.Status != nil {
		f.Status = workload.Status(*p.Status)
	}
	page, err := s.o.Workloads.List(ctx, f, deref(p.Cursor))
	if err != nil {
		return nil, err
	}
	out := WorkloadList{Items: make([]Workload, len(page.Items))}
	for i, w := range page.Items {
		out.Items[i] = workloadOut(w)
	}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	return ListWorkloads200JSONResponse(out), nil
}

func (s *server) GetWorkload(ctx context.Context, req GetWorkloadRequestObject) (GetWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Get(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return GetWorkload200JSONResponse(workloadOut(w)), nil
}

func (s *server) DeleteWorkload(ctx context.Context, req DeleteWorkloadRequestObject) (DeleteWorkloadResponseObject, error) {
	if err := s.o.Workloads.Delete(ctx, req.Id); err != nil {
		return nil, err
	}
	return DeleteWorkload204Response{}, nil
}

func (s *server) CreateToken(ctx context.Context, req CreateTokenRequestObject) (CreateTokenResponseObject, error) {
	if s.o.Tokens == nil {
		return nil, noTokens
	}
	b := req.Body
	t, secret, err := s.o.Tokens.Create(ctx, token.Request{Name: b.Name, Lifetime: time.Duration(b.ExpiresInDays) * 24 * time.Hour,
		Team: deref(b.Team), ReadOnly: deref(b.ReadOnly)})
	if err != nil {
		return nil, err
	}
	i := tokenInfo(t)
	return CreateToken201JSONResponse{Id: i.Id, Name: i.Name, Team: i.Team, ReadOnly: i.ReadOnly, CreatedAt: i.CreatedAt,
		ExpiresAt: i.ExpiresAt, Revoked: i.Revoked, Token: secret}, nil
}

func (s *server) ListTokens(ctx context.Context, _ ListTokensRequestObject) (ListTokensResponseObject, error) {
	if s.o.Tokens == nil {
		return nil, noTokens
	}
	ts, err := s.o.Tokens.List(ctx)
	if err != nil {
		return nil, err
	}
	out := TokenList{Items: make([]TokenInfo, len(ts))}
	for i, t := range ts {
		out.Items[i] = tokenInfo(t)
	}
	return ListTokens200JSONResponse(out), nil
}

func (s *server) RevokeToken(ctx context.Context, req RevokeTokenRequestObject) (RevokeTokenResponseObject, error) {
	if s.o.Tokens == nil {
		return nil, noTokens
	}
	if err := s.o.Tokens.Revoke(ctx, req.Id); err != nil {
		return nil, err
	}
	return RevokeToken204Response{}, nil
}

// noTokens answers token requests on a server built without a token service.
var noTokens = &fault.Unavailable{What: "personal access tokens", Err: errors.New("not configured on this server")}

func tokenInfo(t token.Token) TokenInfo {
	i := TokenInfo{Id: t.ID, Name: t.Name, ReadOnly: t.ReadOnly, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, Revoked: !t.RevokedAt.IsZero()}
	if t.Team != "" {
		i.Team = ptr(t.Team)
	}
	return i
}

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
