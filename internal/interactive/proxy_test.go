package interactive_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/interactive"
	"github.com/gantryhq/gantry/internal/workload"
)

// app stands for a notebook's app: it echoes what reached it, sets a cookie
// of its own and one of Gantry's, and speaks a websocket-style upgrade.
func app(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprint(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			rw.Flush()
			line, _ := rw.ReadString('\n')
			fmt.Fprint(rw, "echo "+line)
			rw.Flush()
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "_xsrf", Value: "app", Path: "/"})
		http.SetCookie(w, &http.Cookie{Name: "gantry_session", Value: "fixated", Path: "/"})
		// Cookies a browser would file under Gantry's names all the same.
		w.Header().Add("Set-Cookie", "=gantry_session=nameless; Path=/")
		w.Header().Add("Set-Cookie", "gantry_session; Path=/")
		w.Header().Add("Set-Cookie", "__Host-gantry_session=prefixed; Path=/; Secure")
		w.Header().Add("Set-Cookie", " GANTRY_SESSION =spaced; Path=/")
		fmt.Fprintf(w, "path=%s auth=%q cookie=%q prefix=%s", r.URL.EscapedPath(), r.Header.Get("Authorization"), r.Header.Get("Cookie"), r.Header.Get("X-Forwarded-Prefix"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

type opener struct {
	target workload.Target
	err    error
	used   *atomic.Int64 // Used calls, when counted
}

func (o opener) Target(context.Context, string) (workload.Target, error) { return o.target, o.err }
func (o opener) Used(context.Context, string) {
	if o.used != nil {
		o.used.Add(1)
	}
}

func serve(p *interactive.Proxy) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.Serve(w, r); err != nil {
			http.Error(w, err.Error(), http.StatusTeapot)
		}
	}))
	return srv
}

func TestProxy(t *testing.T) {
	backend := app(t)
	u, _ := url.Parse(backend.URL)
	strip := []string{"gantry_session", "gantry_login"}
	for _, tc := range []struct {
		name     string
		target   workload.Target
		wantPath string
	}{
		{"prefix kept (Jupyter base_url)", workload.Target{URL: u}, "/w/abcd1234/lab/tree"},
		{"prefix stripped (code-server)", workload.Target{URL: u, StripPrefix: true}, "/lab/tree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front := serve(&interactive.Proxy{Opener: opener{target: tc.target}, Strip: strip})
			defer front.Close()
			req, _ := http.NewRequest("GET", front.URL+"/w/abcd1234/lab/tree", nil)
			req.Header.Set("Authorization", "Bearer gnt_secret")
			req.Header.Set("Cookie", "gantry_session=s3cret; _xsrf=app; gantry_login=x")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := fmt.Sprintf("path=%s auth=\"\" cookie=\"_xsrf=app\" prefix=/w/abcd1234", tc.wantPath)
			if string(body) != want {
				t.Errorf("the app saw %q, want %q", body, want)
			}
			var names []string
			for _, c := range resp.Cookies() {
				names = append(names, c.Name)
			}
			if strings.Join(names, ",") != "_xsrf" || len(resp.Header.Values("Set-Cookie")) != 1 {
				t.Errorf("cookies set through the proxy: %v %q, want only the app's own _xsrf", names, resp.Header.Values("Set-Cookie"))
			}
		})
	}

	t.Run("websocket", func(t *testing.T) {
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: u}}, Strip: strip})
		defer front.Close()
		conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /w/abcd1234/api/kernels/k/channels HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", strings.TrimPrefix(front.URL, "http://"))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		fmt.Fprint(conn, "hello kernel\n")
		line, err := br.ReadString('\n')
		if err != nil || line != "echo hello kernel\n" {
			t.Fatalf("through the socket: %q %v", line, err)
		}
	})

	// The path reaches the app as the client escaped it: a %2F is not a
	// new segment and %2e%2e is not "..".
	t.Run("escaped paths forwarded as sent", func(t *testing.T) {
		for _, tc := range []struct {
			strip     bool
			path, app string
		}{
			{false, "/w/abcd1234/files/a%2Fb", "/w/abcd1234/files/a%2Fb"},
			{true, "/w/abcd1234/files/a%2Fb", "/files/a%2Fb"},
			{false, "/w/abcd1234/files/%2e%2e/%2e%2e/etc", "/w/abcd1234/files/%2e%2e/%2e%2e/etc"},
			{true, "/w/abcd1234/%2e%2e/x", "/%2e%2e/x"},
			{true, "/w/abcd1234/a%20b", "/a%20b"},
		} {
			front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: u, StripPrefix: tc.strip}}, Strip: strip})
			resp, err := http.Get(front.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			front.Close()
			if !strings.HasPrefix(string(body), "path="+tc.app+" ") {
				t.Errorf("strip %v, %s: the app saw %q, want path %s", tc.strip, tc.path, body, tc.app)
			}
		}
		// An id escaped in the path is not the id.
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: u}}})
		defer front.Close()
		resp, err := http.Get(front.URL + "/w/abcd%31234/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot {
			t.Errorf("an escaped id: %d, want refused", resp.StatusCode)
		}
	})

	t.Run("only websocket upgrades", func(t *testing.T) {
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: u}}, Strip: strip})
		defer front.Close()
		for _, up := range []string{"websocket, h2c", "h2c", "websocket/13, websocket"} {
			req, _ := http.NewRequest("GET", front.URL+"/w/abcd1234/api", nil)
			req.Header.Set("Upgrade", up)
			req.Header.Set("Connection", "Upgrade")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTeapot || !strings.Contains(string(body), "only a websocket upgrade") {
				t.Errorf("Upgrade: %s: %d %q, want refused", up, resp.StatusCode, body)
			}
		}
	})

	t.Run("refused before anything is forwarded", func(t *testing.T) {
		hits := 0
		counted := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
		defer counted.Close()
		cu, _ := url.Parse(counted.URL)
		refusal := &fault.Forbidden{Reason: "only its owner"}
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: cu}, err: refusal}})
		defer front.Close()
		resp, err := http.Get(front.URL + "/w/abcd1234/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot || hits != 0 {
			t.Errorf("refused open: status %d, %d requests reached the app", resp.StatusCode, hits)
		}
	})

	// What counts as a person's use for the idle culler: a page opened and
	// a change do; a browser's background read does not.
	t.Run("use", func(t *testing.T) {
		var used atomic.Int64
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: u}, used: &used}})
		defer front.Close()
		for _, tc := range []struct {
			method, mode string
			uses         int64
		}{{"GET", "cors", 0}, {"GET", "navigate", 1}, {"POST", "cors", 2}, {"GET", "no-cors", 2}, {"GET", "", 3}} {
			req, _ := http.NewRequest(tc.method, front.URL+"/w/abcd1234/api/contents", nil)
			if tc.mode != "" {
				req.Header.Set("Sec-Fetch-Mode", tc.mode)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if n := used.Load(); n != tc.uses {
				t.Errorf("after %s with Sec-Fetch-Mode %q: %d uses, want %d", tc.method, tc.mode, n, tc.uses)
			}
		}
	})

	// An app shares Gantry's origin: what would set rules for the whole
	// origin does not pass, nor may it install a service worker, and its
	// responses stay out of shared caches.
	t.Run("nothing for the whole origin", func(t *testing.T) {
		var hits atomic.Int64
		rogue := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			for _, h := range []string{"Service-Worker-Allowed", "Clear-Site-Data", "Strict-Transport-Security", "Alt-Svc", "NEL", "Report-To", "Reporting-Endpoints", "Origin-Agent-Cluster", "Accept-CH", "Critical-CH", "Set-Login"} {
				w.Header().Set(h, "x")
			}
			w.Header().Set("Cache-Control", `public, max-age=600, private="Set-Cookie", no-cache="a, b", s-maxage=3600`)
			w.Header().Set("Content-Security-Policy", "default-src 'self'") // the response's own: kept
		}))
		defer rogue.Close()
		ru, _ := url.Parse(rogue.URL)
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: ru}}})
		defer front.Close()
		resp, err := http.Get(front.URL + "/w/abcd1234/page")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for name := range resp.Header {
			switch name {
			case "Cache-Control", "Content-Security-Policy", "Vary", "Date", "Content-Length", "Content-Type":
			default:
				t.Errorf("the app's %s: %q passed", name, resp.Header.Get(name))
			}
		}
		if cc, v := resp.Header.Get("Cache-Control"), resp.Header.Get("Vary"); cc != `max-age=600, no-cache="a, b", private` || v != "Cookie, Authorization" {
			t.Errorf(`Cache-Control %q, Vary %q; want max-age=600, no-cache="a, b", private and Cookie, Authorization`, cc, v)
		}
		req, _ := http.NewRequest("GET", front.URL+"/w/abcd1234/sw.js", nil)
		req.Header.Set("Service-Worker", "script")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot || !strings.Contains(string(body), "service worker") || hits.Load() != 1 {
			t.Errorf("a service worker's script: %d %q (%d requests reached the app), want refused", resp.StatusCode, body, hits.Load())
		}
	})

	// An app's response headers are bounded (64 KiB), not Go's 10 MiB.
	t.Run("huge response headers", func(t *testing.T) {
		huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Big", strings.Repeat("a", 100<<10))
		}))
		defer huge.Close()
		hu, _ := url.Parse(huge.URL)
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: hu}}})
		defer front.Close()
		resp, err := http.Get(front.URL + "/w/abcd1234/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("100 KiB of headers: %d, want 502", resp.StatusCode)
		}
	})

	// Upgrade without "Connection: upgrade" asks for no switch: it is a
	// plain request (the app sees no Upgrade), not a socket.
	t.Run("Upgrade alone is a plain request", func(t *testing.T) {
		seen := make(chan string, 1)
		plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Get("Upgrade") }))
		defer plain.Close()
		pu, _ := url.Parse(plain.URL)
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: pu}}})
		defer front.Close()
		req, _ := http.NewRequest("POST", front.URL+"/w/abcd1234/x", strings.NewReader("body"))
		req.Header.Set("Upgrade", "websocket")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if up := <-seen; resp.StatusCode != 200 || up != "" {
			t.Errorf("%d, the app saw Upgrade %q; want 200 and none", resp.StatusCode, up)
		}
		if interactive.IsUpgrade(req) {
			t.Error("IsUpgrade without Connection: upgrade")
		}
		req.Header.Set("Connection", "keep-alive, Upgrade")
		if !interactive.IsUpgrade(req) {
			t.Error("not IsUpgrade with Connection: keep-alive, Upgrade")
		}
	})

	t.Run("no slash: redirected", func(t *testing.T) {
		front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: u}}})
		defer front.Close()
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(front.URL + "/w/abcd1234?x=1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/w/abcd1234/?x=1" {
			t.Errorf("%d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
	})
}

func TestSplit(t *testing.T) {
	for in, want := range map[string]string{
		"/w/abc/":      "abc|/|true",
		"/w/abc":       "abc||true",
		"/w/abc/lab/x": "abc|/lab/x|true",
		"/w/":          "||false",
		"/api/v1/w":    "||false",
	} {
		id, rest, ok := interactive.Split(in)
		if got := fmt.Sprintf("%s|%s|%v", id, rest, ok); got != want {
			t.Errorf("Split(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		method, origin, site, upgrade string
		want                          bool
	}{
		{"GET", "", "", "", true},
		{"POST", "http://gantry.example", "same-origin", "", true},
		{"POST", "", "", "", false},
		{"POST", "https://evil.example", "cross-site", "", false},
		{"PUT", "http://gantry.example", "cross-site", "", false},
		{"GET", "https://evil.example", "", "websocket", false},
		{"GET", "http://gantry.example", "", "websocket", true},
		// Any Upgrade is a handshake, however it is spelt.
		{"GET", "https://evil.example", "", "websocket, h2c", false},
		{"GET", "", "", "h2c", false},
		{"GET", "", "", "WebSocket", false},
	} {
		r := httptest.NewRequest(tc.method, "http://gantry.example/w/abc/api", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.upgrade != "" {
			r.Header.Set("Upgrade", tc.upgrade)
		}
		if got := interactive.SameOrigin(r); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc, got, tc.want)
		}
	}
}

// dialer stands for the worker clusters: it records what each dial asked
// for and connects to the app.
type dialer struct {
	app   string
	asked atomic.Value // the last dial's cluster/namespace/id:port
	dials atomic.Int64
}

func (d *dialer) Dial(ctx context.Context, cluster, namespace, id string, port int) (net.Conn, error) {
	d.asked.Store(fmt.Sprintf("%s/%s/%s:%d", cluster, namespace, id, port))
	d.dials.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.app)
}

// TestProxyToWorker: a notebook on a worker cluster is reached through the
// connections Workers open there — for its cluster, namespace, id and
// port, not its in-cluster address, which the proxy's own transport would
// dial — kept alive across requests; without Workers it is unavailable.
func TestProxyToWorker(t *testing.T) {
	backend := app(t)
	u, _ := url.Parse("http://nb-1.gantry-vision.svc.cluster.local:8888")
	target := workload.Target{URL: u, Cluster: "onprem", Namespace: "gantry-vision"}
	d := &dialer{app: strings.TrimPrefix(backend.URL, "http://")}
	front := serve(&interactive.Proxy{Opener: opener{target: target}, Workers: d})
	defer front.Close()
	for range 3 {
		resp, err := http.Get(front.URL + "/w/nb-1/api/status")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "path=/w/nb-1/api/status ") {
			t.Fatalf("through the worker: %d %s", resp.StatusCode, body)
		}
	}
	if got := d.asked.Load(); got != "onprem/gantry-vision/nb-1:8888" {
		t.Errorf("dialled %v", got)
	}
	if n := d.dials.Load(); n != 1 {
		t.Errorf("%d dials for three requests: the connection is not kept", n)
	}

	bare := serve(&interactive.Proxy{Opener: opener{target: target}})
	defer bare.Close()
	resp, err := http.Get(bare.URL + "/w/nb-1/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || !strings.Contains(string(body), "cannot reach the apps of its worker clusters") {
		t.Errorf("no way to the workers: %d %s", resp.StatusCode, body)
	}
}

// TestProxyKeepsConnections: requests to an app reuse the proxy's
// connections to it, with the default transport too.
func TestProxyKeepsConnections(t *testing.T) {
	var conns atomic.Int64
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	backend.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	backend.Start()
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	front := serve(&interactive.Proxy{Opener: opener{target: workload.Target{URL: u}}})
	defer front.Close()
	for range 5 {
		resp, err := http.Get(front.URL + "/w/nb-1/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections to the app for five requests in a row, want 1", n)
	}
}
