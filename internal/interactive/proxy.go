package interactive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// Opener decides whether the caller (the identity in the context) may open
// a workload and where it listens, and records a person's use of it for the
// idle culler (workload.Service).
type Opener interface {
	Target(ctx context.Context, id string) (workload.Target, error)
	// Used records that the caller used the workload now (see personal
	// and watch for what counts).
	Used(ctx context.Context, id string)
}

// Proxy forwards /w/{id}/… to the workload's app. The caller is already
// authenticated (the identity is in the request's context); Proxy asks
// Opener on every request, so a stop, a deletion or a lost permission cuts
// access on the next request.
type Proxy struct {
	Opener Opener
	// Strip names the cookies that are Gantry's own: never forwarded to an
	// app, and an app may not set them.
	Strip []string
	// Transport reaches the apps (default: http.DefaultTransport's settings).
	Transport http.RoundTripper
	// Workers reach the apps of workloads that run on a worker cluster
	// (nil: none do; such a workload is unavailable).
	Workers Workers
	// BusyEvery is how often a busy kernel counts as use (default
	// BusyEvery).
	BusyEvery time.Duration
	Log       *slog.Logger

	mu     sync.Mutex
	remote map[string]*http.Transport // by worker, namespace, workload and port
	own    *http.Transport            // the default Transport, made once
}

// Workers open connections to a workload's app on the worker cluster it
// runs on (workers.Workers: through that cluster's API server).
type Workers interface {
	Dial(ctx context.Context, cluster, namespace, id string, port int) (net.Conn, error)
}

// ErrBadPath is a request outside /w/{id}/: not found (404).
var ErrBadPath = &fault.NotFound{Kind: "interactive workload", Name: "(no id in the path: want /w/{id}/)"}

// Serve forwards one request, or returns why not (before anything is
// written) for the server's one mapping from errors to HTTP.
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request) error {
	id, rest, ok := Split(r.URL.Path)
	if !ok {
		return ErrBadPath
	}
	// The path goes on as the client escaped it (%2F stays %2F, %2e%2e
	// stays %2e%2e): the id must be the same in both forms.
	escID, escRest, _ := Split(r.URL.EscapedPath())
	if escID != id {
		return ErrBadPath
	}
	upgrade, err := upgradeOf(r)
	if err != nil {
		return err
	}
	if r.Header.Get("Service-Worker") != "" {
		// A service worker registered from an app would control pages of
		// Gantry's own origin (with Service-Worker-Allowed, all of it) and
		// outlive the workload: the app may not install one.
		return &fault.Forbidden{Reason: "an app under /w/ may not install a service worker: it would run on Gantry's origin"}
	}
	t, err := p.Opener.Target(r.Context(), id)
	if err != nil {
		return err
	}
	transport, err := p.transportFor(id, t)
	if err != nil {
		return err
	}
	if upgrade || personal(r) {
		p.Opener.Used(r.Context(), id)
	}
	if rest == "" { // /w/{id}: the app's relative links need the slash
		u := *r.URL
		u.Path += "/"
		u.RawPath = ""
		http.Redirect(w, r, u.RequestURI(), http.StatusFound)
		return nil
	}
	if upgrade {
		// A kernel's or an editor's socket lives as long as the tab: the
		// server's read and write deadlines are for requests, not sockets.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(t.URL)
			path, escaped := r.URL.Path, r.URL.EscapedPath()
			if t.StripPrefix {
				path, escaped = rest, escRest
			}
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			if escaped != pr.Out.URL.EscapedPath() {
				pr.Out.URL.RawPath = escaped
			}
			pr.Out.Host = t.URL.Host
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Prefix", strings.TrimSuffix(template.BasePath(id), "/"))
			// Gantry's credentials stay with Gantry: the app sees none of them.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("X-CSRF-Token")
			stripCookies(pr.Out.Header, p.Strip)
			// Uncompressed frames, so that a kernel's status can be read
			// on its way (watch).
			pr.Out.Header.Del("Sec-WebSocket-Extensions")
		},
		ModifyResponse: func(resp *http.Response) error {
			dropSetCookies(resp.Header, p.Strip)
			dropOriginWide(resp.Header)
			privateCache(resp.StatusCode, resp.Header)
			if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
				ctx := r.Context()
				resp.Body = watch(rwc, func() { p.Opener.Used(ctx, id) }, p.busyEvery())
			}
			return nil
		},
		Transport:     transport,
		FlushInterval: -1, // stream (kernel messages, server-sent events)
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log().WarnContext(r.Context(), "interactive workload unreachable", "workload_id", id, "err", err)
			http.Error(w, "the workload's app does not answer yet: try again in a moment", http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}

func (p *Proxy) busyEvery() time.Duration {
	if p.BusyEvery > 0 {
		return p.BusyEvery
	}
	return BusyEvery
}

// transport is Transport, or one made once (made on every request, it
// kept no connection alive between them).
func (p *Proxy) transport() http.RoundTripper {
	if p.Transport != nil {
		return p.Transport
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own == nil {
		p.own = NewTransport(nil)
	}
	return p.own
}

// transportFor is the transport that reaches a target: the proxy's own, or
// for a workload on a worker cluster one kept per workload whose
// connections are opened there (kept-alive connections are reused).
func (p *Proxy) transportFor(id string, t workload.Target) (http.RoundTripper, error) {
	if t.Cluster == "" {
		return p.transport(), nil
	}
	if p.Workers == nil {
		return nil, &fault.Unavailable{What: "worker cluster " + t.Cluster, Err: errors.New("this Gantry cannot reach the apps of its worker clusters")}
	}
	port, err := strconv.Atoi(t.URL.Port())
	if err != nil {
		return nil, fmt.Errorf("interactive: the port of workload %s's address %s: %w", id, t.URL, err)
	}
	key := strings.Join([]string{t.Cluster, t.Namespace, id, t.URL.Port()}, "/")
	p.mu.Lock()
	defer p.mu.Unlock()
	if tr, ok := p.remote[key]; ok {
		return tr, nil
	}
	if len(p.remote) >= maxRemote { // workloads come and go: start afresh
		for _, tr := range p.remote {
			tr.CloseIdleConnections()
		}
		p.remote = nil
	}
	if p.remote == nil {
		p.remote = map[string]*http.Transport{}
	}
	cluster, ns := t.Cluster, t.Namespace
	tr := NewTransport(func(ctx context.Context, _, _ string) (net.Conn, error) {
		return p.Workers.Dial(ctx, cluster, ns, id, port)
	})
	p.remote[key] = tr
	return tr, nil
}

// maxRemote bounds the transports kept for workloads on worker clusters.
const maxRemote = 256

// NewTransport is a transport to apps, dialling with dial (nil: the
// network's own dialer). An app is a workload's owner's code: what it
// answers is bounded (64 KiB of response headers, not Go's 10 MiB, which a
// few thousand requests held open would multiply into the server's
// memory). Its connections are not capped per host: a request past such a
// cap waits, without a deadline of its own, for one to free, and an app
// that holds streams (server-sent events, long polls) would hold them all;
// one person's open requests are capped instead (live.AllPerStream).
func NewTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	return &http.Transport{Proxy: nil, DialContext: dial, ResponseHeaderTimeout: 5 * time.Minute, IdleConnTimeout: 90 * time.Second,
		MaxIdleConnsPerHost: 16, MaxResponseHeaderBytes: 64 << 10}
}

// originWide are response headers that set rules for a whole origin (or
// report on it) rather than for the response: an app under /w/ shares
// Gantry's origin, so none of them passes.
var originWide = []string{"Service-Worker-Allowed", "Clear-Site-Data", "Strict-Transport-Security", "Alt-Svc",
	"NEL", "Report-To", "Reporting-Endpoints", "Origin-Agent-Cluster", "Accept-CH", "Critical-CH", "Set-Login",
	"Expect-CT", "Public-Key-Pins", "Public-Key-Pins-Report-Only"}

func dropOriginWide(h http.Header) {
	for _, name := range originWide {
		h.Del(name)
	}
}

// privateCache keeps an app's responses out of shared caches: whoever may
// open a workload is decided by Gantry on every request, so a cache in
// front of it (a CDN, a proxy) must not answer another person from what
// one was sent. The app's directives for the browser's own cache stay
// (max-age, no-cache, …); those for shared caches ("public", "s-maxage",
// "proxy-revalidate") and any "private" with a field list (which lets a
// shared cache keep the rest) go, and a plain "private" is added. The
// response varies by the credentials. A 304 that says nothing of caching
// is left alone (its headers update what the browser keeps).
func privateCache(status int, h http.Header) {
	if status == http.StatusNotModified && len(h.Values("Cache-Control")) == 0 {
		return
	}
	var kept []string
	for _, d := range cacheDirectives(h.Values("Cache-Control")) {
		name, _, _ := strings.Cut(d, "=")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "public", "s-maxage", "proxy-revalidate", "private":
			continue
		}
		kept = append(kept, d)
	}
	h.Set("Cache-Control", strings.Join(append(kept, "private"), ", "))
	h.Add("Vary", "Cookie, Authorization")
}

// cacheDirectives splits Cache-Control lines into directives at the commas
// outside quotes (a field list, no-cache="a, b", is one directive).
func cacheDirectives(lines []string) []string {
	var out []string
	for _, line := range lines {
		start, quoted := 0, false
		for i := 0; i <= len(line); i++ {
			if i < len(line) && line[i] == '"' {
				quoted = !quoted
			}
			if i == len(line) || line[i] == ',' && !quoted {
				if d := strings.TrimSpace(line[start:i]); d != "" {
					out = append(out, d)
				}
				start = i + 1
			}
		}
	}
	return out
}

func (p *Proxy) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

// upgradeOf says whether r asks to switch protocols (IsUpgrade): only to a
// websocket, named alone, is proxied; any other Upgrade asked for (h2c, a
// list) is refused rather than served as a plain request. An Upgrade header
// without "Connection: upgrade" asks for nothing: a plain request.
func upgradeOf(r *http.Request) (bool, error) {
	values := r.Header.Values("Upgrade")
	if len(values) == 0 {
		return false, nil
	}
	if !IsUpgrade(r) {
		// Upgrade without "Connection: upgrade" is no request to switch
		// (the reverse proxy forwards it as a plain request): it gets a
		// plain request's deadlines, not a socket's.
		return false, nil
	}
	if len(values) == 1 && strings.EqualFold(strings.TrimSpace(values[0]), "websocket") {
		return true, nil
	}
	return false, &fault.Invalid{Fields: []fault.Field{{Path: "header.Upgrade", Message: fmt.Sprintf("%q: only a websocket upgrade is proxied", strings.Join(values, ", "))}}}
}

// IsUpgrade says whether r asks to switch protocols (an Upgrade header and
// "Connection: upgrade", as the reverse proxy reads them): such a request
// is a socket's handshake (or an attempt at one), checked as a change is
// and counted as a stream.
func IsUpgrade(r *http.Request) bool {
	return len(r.Header.Values("Upgrade")) > 0 && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade")
}

// stripCookies removes the named cookies from a request's Cookie headers.
func stripCookies(h http.Header, names []string) {
	var kept []string
	for _, line := range h.Values("Cookie") {
		for _, part := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if name != "" && !contains(names, name) {
				kept = append(kept, strings.TrimSpace(part))
			}
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// dropSetCookies removes Set-Cookie headers that would set one of the named
// cookies: an app may not sign its owner in or out of Gantry.
func dropSetCookies(h http.Header, names []string) {
	var kept []string
	for _, line := range h.Values("Set-Cookie") {
		// A nameless cookie ("=gantry_session=x") is sent back by browsers
		// as "gantry_session=x": only cookies with a name of their own pass.
		pair, _, _ := strings.Cut(line, ";")
		name, _, hasValue := strings.Cut(pair, "=")
		name = strings.TrimSpace(name)
		if hasValue && name != "" && !contains(names, name) && !contains(names, strings.TrimPrefix(strings.TrimPrefix(name, "__Host-"), "__Secure-")) {
			kept = append(kept, line)
		}
	}
	h.Del("Set-Cookie")
	for _, line := range kept {
		h.Add("Set-Cookie", line)
	}
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// SameOrigin reports whether a request that changes something (any method
// but GET, HEAD and OPTIONS, and every websocket handshake) comes from a
// page of Gantry's own origin. The apps behind the proxy have their own
// forms and sockets, so Gantry's CSRF header cannot be asked of them; the
// browser's Origin (and Sec-Fetch-Site) can.
func SameOrigin(r *http.Request) bool {
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
	if safe && len(r.Header.Values("Upgrade")) == 0 { // any Upgrade, however spelt, is checked as a handshake
		return true
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}
