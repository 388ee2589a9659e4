package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

// replicas starts two Gantry servers on one database — PostgreSQL when the
// test server is there (make test), else one SQLite file — whose apps are
// the same stand-in: a websocket echo at every notebook's endpoint.
func replicas(t *testing.T, edit ...func(*config.Config)) (a, b *servertest.Gantry) {
	t.Helper()
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			fmt.Fprint(w, "the app")
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprint(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprint(rw, "echo "+line)
			rw.Flush()
		}
	}))
	t.Cleanup(echo.Close)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, strings.TrimPrefix(echo.URL, "http://"))
	}}
	driver, dsn := "sqlite", storetest.SQLitePath(t)
	if os.Getenv("GANTRY_TEST_POSTGRES_DSN") != "" || os.Getenv("CI") != "" {
		driver, dsn = "postgres", storetest.PostgresDSN(t)
	}
	start := func() *servertest.Gantry {
		return servertest.WithOverrides(t, server.Overrides{AppTransport: tr}, append([]func(*config.Config){func(c *config.Config) {
			c.Database.Driver, c.Database.DSN = driver, config.Secret(dsn)
		}}, edit...)...)
	}
	return start(), start()
}

// running launches alice's notebook through g and records it Running at an
// endpoint (no cluster runs it here); it returns its id.
func running(t *testing.T, g *servertest.Gantry, tok string) string {
	t.Helper()
	r := servertest.Must(newClient(g.URL, tok, "").CreateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d %s", r.StatusCode(), r.Body)
	}
	id := r.JSON201.Id
	if _, err := g.Store.UpdateWorkload(context.Background(), id, func(old workload.Workload) (workload.Workload, error) {
		old.Status, old.Endpoint = workload.Running, "http://notebook."+g.Workloads.Namespace(old)+".svc.cluster.local:8888"
		return old, nil
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// liveConn is an open long-lived response: a websocket through the proxy
// or a watch stream; closed reports once the server has ended it.
type liveConn struct {
	name   string
	closed chan time.Time
}

// socket opens a websocket to the notebook through g and checks that it
// echoes.
func socket(t *testing.T, g *servertest.Gantry, tok, id string) *liveConn {
	t.Helper()
	host := strings.TrimPrefix(g.URL, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /w/%s/api/kernels/k/channels HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", id, host, tok)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("websocket through %s: %v %v", g.URL, resp, err)
	}
	fmt.Fprint(conn, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo ping\n" {
		t.Fatalf("through the socket: %q %v", line, err)
	}
	c := &liveConn{name: "websocket via " + g.URL, closed: make(chan time.Time, 1)}
	go func() {
		io.Copy(io.Discard, br)
		c.closed <- time.Now()
	}()
	return c
}

// watch opens a workload's watch stream through g and reads its first event.
func watch(t *testing.T, g *servertest.Gantry, tok, id string) *liveConn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Not WatchWorkloadWithResponse: it would read the stream to its end.
	resp, err := newClient(g.URL, tok, "").WatchWorkload(ctx, id)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch via %s: %v %v", g.URL, resp, err)
	}
	firstEvent(t, resp.Body)
	c := &liveConn{name: "watch via " + g.URL, closed: make(chan time.Time, 1)}
	go func() {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.closed <- time.Now()
	}()
	return c
}

// wantClosed waits for every connection to end within limit of since.
func wantClosed(t *testing.T, what string, since time.Time, limit time.Duration, conns ...*liveConn) {
	t.Helper()
	for _, c := range conns {
		select {
		case at := <-c.closed:
			took := at.Sub(since)
			t.Logf("%s: %s closed %v after", what, c.name, took.Round(time.Millisecond))
			if took > limit {
				t.Errorf("%s: %s closed after %v, want within %v", what, c.name, took, limit)
			}
		case <-time.After(limit + 5*time.Second):
			t.Errorf("%s: %s still open %v later", what, c.name, limit+5*time.Second)
		}
	}
}

// TestLiveConnectionsClose: what a credential or a workload allowed — a
// websocket to the notebook through the real proxy, a watch stream — ends
// within a second of its revocation, on the replica that revoked and on the
// other one, which learns of it only through the database.
func TestLiveConnectionsClose(t *testing.T) {
	a, b := replicas(t)
	const within = time.Second

	t.Run("revoked token", func(t *testing.T) {
		tok := a.Token("alice")
		keep := a.Token("alice")
		id := running(t, a, keep)
		conns := []*liveConn{socket(t, b, tok, id), socket(t, a, tok, id), watch(t, a, tok, id), watch(t, b, tok, id)}
		other := socket(t, b, keep, id) // another token of the same user stays
		api := newClient(a.URL, keep, "")
		servertest.Must(api.ListTokensWithResponse(t.Context()))(t)
		tokID := strings.Split(strings.TrimPrefix(tok, "gnt_"), "_")[0]
		start := time.Now()
		if s := servertest.Must(api.RevokeTokenWithResponse(t.Context(), tokID))(t).StatusCode(); s != 204 {
			t.Fatalf("revoke: %d", s)
		}
		wantClosed(t, "token revoked on one replica", start, within, conns...)
		select {
		case <-other.closed:
			t.Error("a socket of another, unrevoked token closed too")
		default:
		}
	})

	t.Run("deactivated user", func(t *testing.T) {
		tok := a.Token("alice")
		id := running(t, a, tok)
		conns := []*liveConn{socket(t, b, tok, id), watch(t, b, tok, id)}
		admin := newClient(a.URL, a.Token("ada"), "")
		users := servertest.Deref(servertest.Must(admin.ListUsersWithResponse(t.Context()))(t).JSON200)
		var uid string
		for _, u := range users.Items {
			if strings.HasSuffix(u.Subject, "alice") {
				uid = u.Id
			}
		}
		start := time.Now()
		if s := servertest.Must(admin.DeactivateUserWithResponse(t.Context(), uid))(t).StatusCode(); s != 200 {
			t.Fatalf("deactivate %q: %d", uid, s)
		}
		wantClosed(t, "user deactivated", start, within, conns...)
		if s := servertest.Must(admin.ReactivateUserWithResponse(t.Context(), uid))(t).StatusCode(); s != 200 {
			t.Fatalf("reactivate: %d", s)
		}
	})

	t.Run("group lost", func(t *testing.T) {
		tok := a.Token("alice")
		id := running(t, a, tok)
		conns := []*liveConn{socket(t, b, tok, id), watch(t, b, tok, id)}
		ctx := context.Background()
		var alice user.User
		all, err := a.Store.Users(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range all {
			if strings.HasSuffix(u.Key, "alice") {
				alice = u
			}
		}
		start := time.Now()
		alice.Groups, alice.GroupsAt = []string{"ml-nlp"}, time.Now()
		if err := a.Store.UpsertUser(ctx, alice); err != nil { // as the provider says at her next sign-in
			t.Fatal(err)
		}
		wantClosed(t, "moved from ml-vision to ml-nlp", start, within, conns...)
		alice.Groups = []string{"ml-vision"}
		if err := a.Store.UpsertUser(ctx, alice); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stopped and deleted workload", func(t *testing.T) {
		tok := a.Token("alice")
		id := running(t, a, tok)
		sockets := []*liveConn{socket(t, b, tok, id), socket(t, a, tok, id)}
		streams := []*liveConn{watch(t, b, tok, id)}
		api := newClient(a.URL, tok, "")
		start := time.Now()
		if s := servertest.Must(api.StopWorkloadWithResponse(t.Context(), id))(t).StatusCode(); s != 200 && s != 202 {
			t.Fatalf("stop: %d", s)
		}
		wantClosed(t, "workload stopped", start, within, sockets...)
		start = time.Now()
		if s := servertest.Must(api.DeleteWorkloadWithResponse(t.Context(), id))(t).StatusCode(); s != 200 && s != 202 && s != 204 {
			t.Fatalf("delete: %d", s)
		}
		wantClosed(t, "workload deleted", start, within, streams...)
	})
}

// TestStreamCaps: past the per-identity cap a watch is answered 429 with
// Retry-After; another person is not affected; a closed stream frees its
// place.
func TestStreamCaps(t *testing.T) {
	g := servertest.New(t, func(c *config.Config) { c.Security.StreamsPerIdentity = 3 })
	tok, other := g.Token("alice"), g.Token("lee")
	id := running(t, g, tok)
	api := newClient(g.URL, tok, "")
	var open []context.CancelFunc
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		open = append(open, cancel)
		resp, err := api.WatchWorkload(ctx, id) // a stream: not WithResponse, which reads to the end
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("watch within the cap: %v %v", resp, err)
		}
		defer resp.Body.Close()
	}
	defer func() {
		for _, c := range open {
			c()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := servertest.Must(api.WatchWorkloadWithResponse(ctx, id))(t) // refused: an answer, not a stream
	if r.StatusCode() != 429 || r.HTTPResponse.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "open streams") {
		t.Fatalf("a fourth watch: %d %q %s, want 429 with Retry-After", r.StatusCode(), r.HTTPResponse.Header.Get("Retry-After"), r.Body)
	}
	// lee, the team's admin, may watch alice's workload: his own count.
	resp, err := newClient(g.URL, other, "").WatchWorkload(ctx, id)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another person's watch: %v %v", resp, err)
	}
	resp.Body.Close()
	open[0]()
	waitfor.Until(t, 10*time.Second, "a closed stream's place to free", func() error {
		ctx, cancel := context.WithCancel(context.Background())
		open = append(open, cancel)
		resp, err := api.WatchWorkload(ctx, id)
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
			return errors.New(resp.Status)
		}
		return nil
	})
}

// TestRevokedCredentialRefusedOnEveryReplica: a token both replicas have
// just served — and keep for a few seconds — is refused at once by the
// replica that revoked it, and by the other as soon as the change feed
// tells it (well within the 5 s a replica keeps a credential); so is a
// deactivated user's token.
func TestRevokedCredentialRefusedOnEveryReplica(t *testing.T) {
	a, b := replicas(t)
	const feed = 2 * time.Second // the feed is read every 250 ms; credentials are kept 5 s
	status := func(g *servertest.Gantry, tok string) int {
		return servertest.Must(newClient(g.URL, tok, "").ListWorkloadsWithResponse(t.Context(), nil))(t).StatusCode()
	}
	refused := func(g *servertest.Gantry, tok string) func() error {
		return func() error {
			if s := status(g, tok); s != 401 {
				return fmt.Errorf("answered %d", s)
			}
			return nil
		}
	}
	served := func(tok string) {
		t.Helper()
		for _, g := range []*servertest.Gantry{a, b} {
			if s := status(g, tok); s != 200 {
				t.Fatalf("before: %s answered %d", g.URL, s)
			}
		}
	}

	// First: the next subtest deactivates alice.
	t.Run("signed-out session", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar, Timeout: 20 * time.Second}
		_, body, err := devidp.SignIn(t.Context(), browser, a.URL+"/auth/login", "alice", "alice")
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`).FindStringSubmatch(body)
		u, _ := url.Parse(a.URL)
		var cookie *http.Cookie
		for _, c := range jar.Cookies(u) {
			if c.Name == "gantry_session" {
				cookie = c
			}
		}
		if m == nil || cookie == nil {
			t.Fatalf("signed in without a CSRF token or a session cookie: %s", body)
		}
		me := func(g *servertest.Gantry) int {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", g.URL+"/api/v1/me", nil)
			req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, g := range []*servertest.Gantry{a, b} {
			if s := me(g); s != 200 {
				t.Fatalf("before: %s answered %d to the session", g.URL, s)
			}
		}
		req, _ := http.NewRequestWithContext(t.Context(), "POST", a.URL+"/auth/logout", strings.NewReader("csrf="+url.QueryEscape(m[1])))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := browser.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("sign-out: %v %v", resp, err)
		}
		resp.Body.Close()
		if s := me(a); s != 401 {
			t.Fatalf("the replica that signed it out answered %d", s)
		}
		waitfor.Until(t, feed, "the other replica to refuse the signed-out session", func() error {
			if s := me(b); s != 401 {
				return fmt.Errorf("answered %d", s)
			}
			return nil
		})
	})

	t.Run("revoked token", func(t *testing.T) {
		tok := a.Token("alice")
		served(tok)
		id := strings.Split(strings.TrimPrefix(tok, "gnt_"), "_")[0]
		if s := servertest.Must(newClient(a.URL, tok, "").RevokeTokenWithResponse(t.Context(), id))(t).StatusCode(); s != 204 {
			t.Fatalf("revoke: %d", s)
		}
		if err := refused(a, tok)(); err != nil {
			t.Fatalf("the replica that revoked it: %v", err)
		}
		waitfor.Until(t, feed, "the other replica to refuse the revoked token", refused(b, tok))
	})

	t.Run("deactivated user", func(t *testing.T) {
		tok := a.Token("alice")
		served(tok)
		admin := newClient(a.URL, a.Token("ada"), "")
		var uid string
		for _, u := range servertest.Deref(servertest.Must(admin.ListUsersWithResponse(t.Context()))(t).JSON200).Items {
			if strings.HasSuffix(u.Subject, "alice") {
				uid = u.Id
			}
		}
		if s := servertest.Must(admin.DeactivateUserWithResponse(t.Context(), uid))(t).StatusCode(); s != 200 {
			t.Fatalf("deactivate %q: %d", uid, s)
		}
		if err := refused(a, tok)(); err != nil {
			t.Fatalf("the replica that deactivated her: %v", err)
		}
		waitfor.Until(t, feed, "the other replica to refuse a deactivated user's token", refused(b, tok))
	})
}
