// Package portal owns the web UI: pages rendered on the server and static files
// embedded in the binary (no CDN at run time), and browser sign-in — GET
// /auth/login, GET /auth/callback, POST /auth/logout — on top of the weblogin
// service. Cookies are HttpOnly and SameSite=Lax, Secure when the public URL is
// https; every form post carries the session's CSRF token, and the pages call
// the REST API with the session cookie like any other client.
package portal

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/clientaddr"
	"github.com/gantryhq/gantry/internal/identity"
	gtemplate "github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
)

//go:embed static
var static embed.FS

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Parse(pageHTML))

// Sessions is browser sign-in (weblogin.Service).
type Sessions interface {
	Begin(ctx context.Context, returnTo string, secondFactor bool) (redirect, state string, err error)
	Finish(ctx context.Context, cb weblogin.Callback) (cookie string, s weblogin.Session, returnTo string, err error)
	Authenticate(ctx context.Context, cookie string) (weblogin.Session, error)
	End(ctx context.Context, cookie string) error
}

// Options configure the portal.
type Options struct {
	// Now is the server's clock (audit times).
	Now      func() time.Time
	Sessions Sessions
	// Teams lists the teams where an identity holds a permission.
	Teams func(id identity.Identity, permission access.Permission) (all bool, teams []string)
	// Secure marks cookies Secure (Gantry is reached over https).
	Secure bool
	Logger *slog.Logger
	// Audit records every sign-in, refused sign-in and sign-out.
	Audit Auditor
}

// Auditor appends to the audit log (the store).
type Auditor interface {
	AppendAudit(ctx context.Context, r audit.Record) (audit.Record, error)
}

// Paths the portal serves, with their methods (echo's patterns).
var Paths = []struct{ Method, Path string }{
	{http.MethodGet, "/"}, {http.MethodGet, "/portal.js"}, {http.MethodGet, "/portal.css"},
	{http.MethodGet, "/workloads"}, {http.MethodGet, "/history"}, {http.MethodGet, "/workloads/:id"}, {http.MethodGet, "/launch/:name"}, {http.MethodGet, "/tokens"}, {http.MethodGet, "/teams/:team"}, {http.MethodGet, "/platform"}, {http.MethodGet, "/templates/:name/edit"}, {http.MethodGet, "/trials"}, {http.MethodGet, "/trials/:id"},
	{http.MethodGet, "/auth/login"}, {http.MethodGet, "/auth/callback"}, {http.MethodPost, "/auth/logout"},
}

// pages are the portal's pages, the only places a sign-in returns to: exact
// paths, and prefixes of pages about one workload or template.
var (
	pages        = []string{"/", "/workloads", "/history", "/tokens", "/platform", "/trials"}
	pagePrefixes = []string{"/workloads/", "/trials/", "/launch/", "/teams/", "/templates/", gtemplate.InteractivePrefix}
)

// returnTo is where a sign-in may come back to: a local path (weblogin's
// check) of one of the portal's pages or of an interactive workload
// (/w/{id}/…, opened from a link before signing in), with its query; "/"
// otherwise.
func returnTo(asked string) string {
	local := weblogin.LocalPath(asked)
	path, _, _ := strings.Cut(local, "?")
	if slices.Contains(pages, path) {
		return local
	}
	for _, p := range pagePrefixes {
		if strings.HasPrefix(path, p) {
			return local
		}
	}
	return "/"
}

type portal struct {
	o     Options
	files http.Handler
	// signIns bounds how often one source (an address, an IPv6 /64) may
	// start sign-ins: each start stores a pending login, and a flood would
	// fill that table. Past its bound on sources, new ones share a bucket
	// rather than everyone's being forgotten.
	signIns *clientaddr.Limiter
}

// New returns the portal's handler. Now, Sessions, Teams and Audit are
// required.
func New(o Options) (http.Handler, error) {
	if o.Now == nil || o.Sessions == nil || o.Teams == nil || o.Audit == nil {
		return nil, errors.New("portal: Now, Sessions, Teams and Audit are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	p := &portal{o: o, files: http.FileServer(http.FS(sub)),
		signIns: clientaddr.NewLimiter(1, 60, 0, o.Now)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.page("catalog"))
	mux.HandleFunc("GET /workloads", p.page("workloads"))
	mux.HandleFunc("GET /workloads/{id}", p.page("workload"))
	mux.HandleFunc("GET /history", p.page("history"))
	mux.HandleFunc("GET /trials", p.page("trials"))
	mux.HandleFunc("GET /trials/{id}", p.page("trials"))
	mux.HandleFunc("GET /launch/{name}", p.page("launch"))
	mux.HandleFunc("GET /tokens", p.page("tokens"))
	mux.HandleFunc("GET /teams/{team}", p.page("team"))
	mux.HandleFunc("GET /platform", p.page("platform"))
	mux.HandleFunc("GET /templates/{name}/edit", p.page("editor"))
	mux.Handle("GET /portal.js", p.files)
	mux.Handle("GET /portal.css", p.files)
	mux.HandleFunc("GET /auth/login", p.login)
	mux.HandleFunc("GET /auth/callback", p.callback)
	mux.HandleFunc("POST /auth/logout", p.logout)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	}), nil
}

type view struct {
	Session  *weblogin.Session
	Error    string
	AllTeams bool
	Teams    []string
	Page     string // catalog, workloads, workload, history, trials, launch, tokens, team, platform, editor
	Param    string // the workload's id, the template's or the team's name
	// Leads are the teams whose launches the caller may approve (a team
	// view each; a platform admin, who may approve for every team, reaches
	// any team's view by its address).
	Leads []string
	Path  string // this page, where a sign-in comes back to
	// CanEdit: the person may change templates (the catalog's Edit links);
	// Platform: they hold a permission in every team (the Platform page).
	CanEdit, Platform bool
}

func (p *portal) session(r *http.Request) *weblogin.Session {
	c, err := r.Cookie(weblogin.SessionCookie)
	if err != nil || p.o.Sessions == nil {
		return nil
	}
	s, err := p.o.Sessions.Authenticate(r.Context(), c.Value)
	if err != nil {
		if !errors.Is(err, weblogin.ErrNoSession) {
			p.o.Logger.ErrorContext(r.Context(), "session lookup failed", "err", err)
		}
		return nil
	}
	return &s
}

// page serves one of the portal's pages: the shell the server renders
// (who is signed in, the teams they may launch in, the CSRF token) that the
// page's script fills from the API — or the invitation to sign in, coming
// back here.
func (p *portal) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := view{Session: p.session(r), Page: name, Param: r.PathValue("id") + r.PathValue("name") + r.PathValue("team"), Path: r.URL.RequestURI()}
		if v.Session != nil && p.o.Teams != nil {
			v.AllTeams, v.Teams = p.o.Teams(v.Session.Identity, access.WorkloadsLaunch)
			_, v.Leads = p.o.Teams(v.Session.Identity, access.WorkloadsApprove)
			// Offered as the person's roles allow once they bring a second
			// factor: without one, the page's refusal sends them to get it.
			strong := v.Session.Identity
			strong.SecondFactor = true
			v.CanEdit, _ = p.o.Teams(strong, access.TemplatesWrite)
			// The Platform page is for who works on the platform or reads
			// all of it (an auditor): every team's workloads count too.
			for _, perm := range []access.Permission{access.TemplatesWrite, access.ImagesWrite, access.GPUClassesWrite, access.AuditRead, access.NodesRead, access.UsersManage, access.PolicyRead, access.WorkloadsRead} {
				if all, _ := p.o.Teams(strong, perm); all {
					v.Platform = true
				}
			}
		}
		p.render(w, http.StatusOK, v)
	}
}

func (p *portal) now() time.Time { return p.o.Now() }

func (p *portal) render(w http.ResponseWriter, status int, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := page.Execute(w, v); err != nil {
		p.o.Logger.Error("render portal page", "err", err)
	}
}

func (p *portal) cookie(name, value, path string, maxAge time.Duration) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: path, HttpOnly: true, Secure: p.o.Secure, SameSite: http.SameSiteLaxMode, MaxAge: int(maxAge / time.Second)}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	return c
}

// login sends the browser to the provider, binding the sign-in to this
// browser with a state cookie only the callback sees.
func (p *portal) login(w http.ResponseWriter, r *http.Request) {
	if p.o.Sessions == nil {
		p.render(w, http.StatusServiceUnavailable, view{Error: "Sign-in is not configured on this server."})
		return
	}
	if ok, _ := p.signIns.Take(clientaddr.Source(r.RemoteAddr)); !ok {
		w.Header().Set("Retry-After", "60")
		p.render(w, http.StatusTooManyRequests, view{Error: "Too many sign-in attempts from your address; wait a minute and try again."})
		return
	}
	// ?secondFactor=1: the person was refused something that needs a second
	// factor; the provider is asked for a fresh sign-in with one.
	redirect, state, err := p.o.Sessions.Begin(r.Context(), returnTo(r.URL.Query().Get("return")), r.URL.Query().Get("secondFactor") == "1")
	if err != nil {
		p.o.Logger.ErrorContext(r.Context(), "begin sign-in", "err", err)
		p.render(w, http.StatusServiceUnavailable, view{Error: "Sign-in is not available right now. Try again in a moment."})
		return
	}
	http.SetCookie(w, p.cookie(weblogin.StateCookie, state, "/auth/callback", 10*time.Minute))
	http.Redirect(w, r, redirect, http.StatusFound)
}

// callback finishes the sign-in; anything wrong ends with no session and a
// page that says what the person can do — start again, ask an admin
// (deactivated), or try again shortly (Gantry failed to record it) — while
// the reason goes to the log only.
func (p *portal) callback(w http.ResponseWriter, r *http.Request) {
	if p.o.Sessions == nil {
		p.render(w, http.StatusServiceUnavailable, view{Error: "Sign-in is not configured on this server."})
		return
	}
	q := r.URL.Query()
	cb := weblogin.Callback{State: q.Get("state"), Code: q.Get("code"), Error: q.Get("error")}
	if c, err := r.Cookie(weblogin.StateCookie); err == nil {
		cb.CookieState = c.Value
	}
	http.SetCookie(w, p.cookie(weblogin.StateCookie, "", "/auth/callback", -1))
	cookie, ses, back, err := p.o.Sessions.Finish(r.Context(), cb)
	if err != nil {
		status, msg := http.StatusBadRequest, "Sign-in failed: the sign-in link is invalid, expired or was already used. Sign in again."
		switch {
		case errors.Is(err, user.ErrDeactivated):
			msg = "Sign-in refused: your account is deactivated. Ask a platform admin."
		case !errors.Is(err, weblogin.ErrFailed):
			status, msg = http.StatusServiceUnavailable, "Sign-in could not be completed: Gantry could not record it. Sign in again in a moment."
		}
		p.o.Logger.WarnContext(r.Context(), "sign-in refused", "err", err)
		p.audit(w, r, status, "anonymous", audit.Deny, err.Error())
		p.render(w, status, view{Error: msg})
		return
	}
	p.o.Logger.InfoContext(r.Context(), "signed in", "user", ses.Identity.String(), "email", ses.Identity.Email)
	p.audit(w, r, http.StatusSeeOther, ses.Identity.String(), audit.Allow, "signed in")
	http.SetCookie(w, p.cookie(weblogin.SessionCookie, cookie, "/", time.Until(ses.ExpiresAt)))
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// logout ends the session; the form must carry the session's CSRF token, so
// another site cannot sign people out.
func (p *portal) logout(w http.ResponseWriter, r *http.Request) {
	ses := p.session(r)
	if ses == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if err := r.ParseForm(); err != nil || !ses.CheckCSRF(r.PostForm.Get("csrf")) {
		p.audit(w, r, http.StatusForbidden, ses.Identity.String(), audit.Deny, "sign-out without the session's CSRF token")
		p.render(w, http.StatusForbidden, view{Session: ses, Error: "This form has expired or did not come from Gantry; nothing was changed."})
		return
	}
	c, _ := r.Cookie(weblogin.SessionCookie)
	if err := p.o.Sessions.End(r.Context(), c.Value); err != nil {
		p.o.Logger.ErrorContext(r.Context(), "sign out", "err", err)
		p.render(w, http.StatusServiceUnavailable, view{Session: ses, Error: "Sign-out failed; try again."})
		return
	}
	p.o.Logger.InfoContext(r.Context(), "signed out", "user", ses.Identity.String())
	p.audit(w, r, http.StatusSeeOther, ses.Identity.String(), audit.Allow, "signed out")
	http.SetCookie(w, p.cookie(weblogin.SessionCookie, "", "/", -1))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// audit records a sign-in event like the API records its requests.
func (p *portal) audit(w http.ResponseWriter, r *http.Request, status int, actor, decision, reason string) {
	rec := audit.Record{At: p.now(), Actor: actor, Action: r.Method + " " + r.URL.Path, Object: r.URL.Path,
		Decision: decision, Status: status, Reason: reason, RequestID: w.Header().Get("X-Request-Id")}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		rec.Source = host
	}
	if _, err := p.o.Audit.AppendAudit(r.Context(), rec); err != nil {
		p.o.Logger.ErrorContext(r.Context(), "audit record not written", "err", err, "action", rec.Action, "actor", actor)
	}
}
