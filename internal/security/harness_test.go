package security

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apiclient "github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/servertest"
)

// outsider is a development user the default configuration lacks: a member
// of team nlp (group ml-nlp in policy/bindings.yaml), the other team an
// attacker from inside the company would sit in. Its password is not its
// name, so that the log check can tell a leak from a mention of the user.
var outsider = config.DevUser{Username: "nina", Password: "nina-Pw-4c1d9e0b7a", Name: "Nina Rossi (data scientist, team nlp)",
	Email: "nina@gantry.localhost", Groups: []string{"ml-nlp"}}

// weakAdmin is a platform admin whose provider never says a second factor
// was used: what the platform roles need (policy/bindings.yaml).
var weakAdmin = config.DevUser{Username: "ida", Password: "ida-Pw-9f2e", Name: "Ida (platform admin, no second factor)",
	Email: "ida@gantry.localhost", Groups: []string{"gantry-admins", "ml-vision"}}

// gantry is one `gantry serve` process and what the tests learned from it.
type gantry struct {
	URL  string // http://127.0.0.1:port, as the server logged it
	host string // 127.0.0.1:port
	dir  string // its data: the SQLite file, the development keys, the configuration
	db   string
	env  []string // what configures it beyond its flags (servertest.Env adds the rest)
	p    *servertest.Process

	mu      sync.Mutex
	secrets map[string]string // secret → what it is; none may appear in the log
	source  uint32            // the last source address handed out (127.0.0.x)
}

// start runs `gantry serve` on the embedded defaults in a temporary
// directory and waits until it logs the URL it listens on (it binds port 0:
// nothing picks a port and hands it on). The process is killed at cleanup if
// a test did not stop it.
func start(t *testing.T) *gantry {
	t.Helper()
	// Every client connects from an address of its own (nextSource).
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Fatalf("these tests connect from several loopback addresses (127.0.0.x), and 127.0.0.2 is not usable here: %v", err)
	} else {
		ln.Close()
	}
	dir := t.TempDir()
	g := &gantry{dir: dir, db: filepath.Join(dir, "gantry.db"),
		secrets: map[string]string{string(outsider.Password): "nina's password"}, source: 10}
	cfgPath := filepath.Join(dir, "gantry.yaml")
	if err := os.WriteFile(cfgPath, devUsersConfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Only what is set here configures the server: servertest drops the
	// caller's GANTRY_* variables (a developer's database, CI's settings).
	// The server runs under an address-space limit (ulimit -v): an attack
	// that makes it allocate without bound ends it, not the machine.
	g.env = []string{"XDG_DATA_HOME=" + filepath.Join(dir, "data"), "GANTRY_IMAGES_DEV_REGISTRY=true"}
	g.p = servertest.StartBinary(t, servertest.ProcessOptions{Args: []string{"--config", cfgPath, "--db", g.db}, Env: g.env, MemoryKiB: serverMemoryKiB})
	g.URL = g.p.URL
	g.host = strings.TrimPrefix(g.URL, "http://")
	return g
}

// serverMemoryKiB is the address space gantry serve may map: several times
// what it uses (about 100 MB resident), far below the machine's.
const serverMemoryKiB = 4 << 20

// rss is the server's resident memory, from /proc.
func (g *gantry) rss(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.p.Cmd.Process.Pid))
	if err != nil {
		t.Fatalf("the server's memory: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// devUsersConfig is the configuration file: the default development users
// plus the outsider, nothing else.
func devUsersConfig() []byte {
	var b strings.Builder
	b.WriteString("devLogin:\n  users:\n")
	for _, u := range append(config.DefaultDevUsers(), outsider, weakAdmin) {
		groups, _ := json.Marshal(u.Groups)
		fmt.Fprintf(&b, "    - {username: %q, password: %q, name: %q, email: %q, groups: %s, secondFactor: %v}\n",
			u.Username, string(u.Password), u.Name, u.Email, groups, u.SecondFactor)
	}
	return []byte(b.String())
}

// stop sends SIGTERM and waits for a clean exit.
func (g *gantry) stop(t *testing.T) {
	t.Helper()
	if err := g.p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-g.p.Exited:
	case <-time.After(30 * time.Second):
		g.p.Stop()
		t.Fatalf("gantry serve did not stop within 30 s of SIGTERM")
	}
	if g.p.Err != nil {
		t.Fatalf("gantry serve exited with %v after SIGTERM; want exit 0", g.p.Err)
	}
}

// secret records a value that must never appear in the server's log.
func (g *gantry) secret(value, what string) {
	if value == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.secrets[value] = what
}

// nextSource hands out a loopback address of its own to each client, so that
// the anonymous limit (one bucket per source address) and the sign-in limit
// charge each attack separately, as separate attackers would be.
func (g *gantry) nextSource(t *testing.T) netip.Addr {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.source++
	if g.source > 254 {
		t.Fatal("out of loopback source addresses")
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, byte(g.source)})
}

// client is one caller: a browser (cookies, and the session's CSRF token once
// signed in) or a script with a bearer credential. Every client connects from
// its own source address. Its methods of the typed client (api/client)
// call the API over that connection, presenting its bearer credential.
type client struct {
	*apiclient.ClientWithResponses
	g      *gantry
	hc     *http.Client
	src    netip.Addr
	bearer string // sent as Authorization: Bearer
	csrf   string // the signed-in page's CSRF token (never sent unless asked)
	hops   *hops
}

// typedClient is the typed client of g over hc, presenting *bearer when set.
func (g *gantry) typedClient(t *testing.T, hc *http.Client, bearer *string) *apiclient.ClientWithResponses {
	t.Helper()
	c, err := apiclient.NewClientWithResponses(g.URL, apiclient.WithHTTPClient(hc), apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		if *bearer != "" {
			r.Header.Set("Authorization", "Bearer "+*bearer)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// withCSRF sends a signed-in browser's CSRF token with a typed call.
func (c *client) withCSRF() apiclient.RequestEditorFn {
	return servertest.Header("X-CSRF-Token", c.csrf)
}

// hops records every response a client received, redirects included.
type hops struct {
	mu   sync.Mutex
	list []hop
	next http.RoundTripper
}

type hop struct {
	url      *url.URL
	status   int
	location string
}

func (h *hops) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(r)
	if err == nil {
		h.mu.Lock()
		h.list = append(h.list, hop{url: r.URL, status: resp.StatusCode, location: resp.Header.Get("Location")})
		h.mu.Unlock()
	}
	return resp, err
}

func (h *hops) reset() []hop {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.list
	h.list = nil
	return out
}

// newClient is a client from a new source address.
func (g *gantry) newClient(t *testing.T) *client {
	t.Helper()
	return g.clientFrom(t, g.nextSource(t))
}

// clientFrom is a client connecting from src, with a cookie jar, that
// follows redirects and gives up after 20 s: a hang fails the case, not the
// suite.
func (g *gantry) clientFrom(t *testing.T, src netip.Addr) *client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, Proxy: nil, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	jar, _ := cookiejar.New(nil)
	h := &hops{next: tr}
	c := &client{g: g, src: src, hops: h, hc: &http.Client{Jar: jar, Transport: h, Timeout: 20 * time.Second}}
	c.ClientWithResponses = g.typedClient(t, c.hc, &c.bearer)
	return c
}

// bearerClient is a script presenting credential.
func (g *gantry) bearerClient(t *testing.T, credential string) *client {
	t.Helper()
	c := g.newClient(t)
	c.bearer = credential
	return c
}

var csrfRE = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// signIn signs a browser in through the development provider's password
// form, as a person would, and keeps its session cookie and CSRF token.
func (g *gantry) signIn(t *testing.T, username, password string) *client {
	t.Helper()
	c := g.newClient(t)
	resp, body, err := devidp.SignIn(context.Background(), c.hc, g.URL+"/auth/login", username, password)
	if err != nil {
		t.Fatalf("sign in as %s: %v", username, err)
	}
	if resp.Request.URL.String() != g.URL+"/" {
		t.Fatalf("sign-in as %s ended at %s (%d), want %s/", username, resp.Request.URL, resp.StatusCode, g.URL)
	}
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the signed-in page of %s carries no CSRF token:\n%s", username, body)
	}
	c.csrf = m[1]
	ses := c.cookie("gantry_session")
	if ses == "" {
		t.Fatalf("sign-in as %s set no session cookie", username)
	}
	g.secret(ses, username+"'s session cookie")
	g.secret(c.csrf, username+"'s CSRF token")
	c.hops.reset()
	return c
}

// cookie is the value of the client's cookie for Gantry named name.
func (c *client) cookie(name string) string {
	u, _ := url.Parse(c.g.URL)
	for _, ck := range c.hc.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// token makes a personal access token with a signed-in browser's session
// (POST /api/v1/tokens with the CSRF header).
func (c *client) token(t *testing.T, req model.TokenRequest) model.TokenCreated {
	t.Helper()
	r := servertest.Must(c.CreateTokenWithResponse(t.Context(), req, c.withCSRF()))(t)
	if r.StatusCode() != http.StatusCreated {
		t.Fatalf("make a token %+v: %s", req, show(r))
	}
	tk := *r.JSON201
	if !strings.HasPrefix(tk.Token, "gnt_") || tk.Id == "" {
		t.Fatalf("token answer without a gnt_ secret or an id: %s", show(r))
	}
	c.g.secret(tk.Token, fmt.Sprintf("token %s", tk.Id))
	_, secretPart, _ := strings.Cut(strings.TrimPrefix(tk.Token, "gnt_"), "_")
	c.g.secret(secretPart, fmt.Sprintf("token %s's secret part", tk.Id))
	return tk
}

// answer is what the tests read of any answer: a typed call's (every
// generated response has these methods) or a raw reply.
type answer interface {
	StatusCode() int
	ContentType() string
	GetBody() []byte
}

// show is an answer as a failure prints it: its status and (the start of)
// its body.
func show(r answer) string {
	b := string(r.GetBody())
	if len(b) > 600 {
		b = b[:600] + "…"
	}
	return fmt.Sprintf("%d %s", r.StatusCode(), strings.TrimSpace(b))
}

// reply is an answer to a raw request, body read.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) StatusCode() int     { return r.status }
func (r reply) ContentType() string { return r.header.Get("Content-Type") }
func (r reply) GetBody() []byte     { return r.body }
func (r reply) String() string      { return show(r) }

// problem is an RFC 9457 problem document (model.Problem, its optional
// fields flattened).
type problem struct {
	Type   string
	Title  string
	Status int
	Detail string
	Errors []model.FieldError
}

// problemOf reads r's problem document, failing when it is not one: the
// typed one of a generated response, else its body's.
func problemOf(t *testing.T, r answer) problem {
	t.Helper()
	if ct := r.ContentType(); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, show(r))
	}
	var doc model.Problem
	if typed, ok := r.(interface{ GetApplicationproblemJSONDefault() *model.Problem }); ok && typed.GetApplicationproblemJSONDefault() != nil {
		doc = *typed.GetApplicationproblemJSONDefault()
	} else if err := json.Unmarshal(r.GetBody(), &doc); err != nil {
		t.Fatalf("answer is not a problem document (%v): %s", err, show(r))
	}
	p := problem{Type: doc.Type, Title: doc.Title, Status: doc.Status, Detail: servertest.Deref(doc.Detail), Errors: servertest.Deref(doc.Errors)}
	if p.Status != r.StatusCode() {
		t.Errorf("problem status %d differs from the response's %d", p.Status, r.StatusCode())
	}
	return p
}

// fields are the problem's field paths.
func (p problem) fields() []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Field)
	}
	return out
}

// raw sends one request by hand, body (when not empty) as is, with headers
// as name, value pairs. It is for what the typed client cannot send: paths
// and methods openapi.yaml does not declare, the portal's pages and forms,
// a notebook's /w/ paths, floods.
func (c *client) raw(t *testing.T, method, path, body string, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.g.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// noRedirects makes the client hand back redirects instead of following them.
func (c *client) noRedirects() *client {
	c.hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// record is one audit log row (GET /api/v1/audit).
type record struct{ model.AuditRecord }

func (r record) String() string {
	return fmt.Sprintf("#%d %s %s %s %s %d %q from %s", r.Seq, r.Actor, r.Action, r.Object, r.Decision, r.Status, r.Reason, r.Source)
}

// audit reads the audit log after seq (every page) as admin.
func (c *client) audit(t *testing.T, after int64) []record {
	t.Helper()
	var out []record
	for {
		r := servertest.Must(c.ListAuditWithResponse(t.Context(), &model.ListAuditParams{Limit: new(1000), After: &after}))(t)
		if r.StatusCode() != http.StatusOK {
			t.Fatalf("read the audit log: %s", show(r))
		}
		for _, rec := range r.JSON200.Items {
			out = append(out, record{rec})
		}
		if r.JSON200.NextAfter == nil {
			return out
		}
		after = *r.JSON200.NextAfter
	}
}

// auditHead is the sequence number of the newest audit record.
func (c *client) auditHead(t *testing.T) int64 {
	t.Helper()
	recs := c.audit(t, 0)
	if len(recs) == 0 {
		return 0
	}
	return recs[len(recs)-1].Seq
}

// workloadCount is how many workloads admin sees (every team's).
func (c *client) workloadCount(t *testing.T) int {
	t.Helper()
	n, params := 0, &model.ListWorkloadsParams{Limit: new(500)}
	for {
		r := servertest.Must(c.ListWorkloadsWithResponse(t.Context(), params))(t)
		if r.StatusCode() != http.StatusOK {
			t.Fatalf("list workloads: %s", show(r))
		}
		n += len(r.JSON200.Items)
		if servertest.Deref(r.JSON200.NextCursor) == "" {
			return n
		}
		params.Cursor = r.JSON200.NextCursor
	}
}

// raw is a request written by hand on a connection from a source of its
// own: head is everything before the body, and body (when not nil) writes
// the rest while the answer is read, so that a server answering before the
// body ends is seen answering. It returns the answer (nil if the server
// closed the connection without one), how many body bytes were written, and
// the read error.
func (g *gantry) raw(t *testing.T, head string, body func(w io.Writer) (int64, error)) (*reply, int64, error) {
	t.Helper()
	src := g.nextSource(t)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", g.host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	written := make(chan int64, 1)
	go func() {
		if _, err := io.WriteString(conn, head); err != nil || body == nil {
			written <- 0
			return
		}
		n, _ := body(conn)
		written <- n
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		return nil, <-written, err
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	conn.Close() // ends the writer
	return &reply{status: resp.StatusCode, header: resp.Header, body: data}, <-written, nil
}
