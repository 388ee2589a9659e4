package security

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// 5. Nothing under /api is served that openapi.yaml does not declare, however
// the path is spelled; refused before any handler, as a problem.
func testUndeclaredPaths(t *testing.T, w *world) {
	g := w.g
	admin, anonymous := w.api["ada"], g.newClient(t)
	for _, c := range []struct {
		path string
		as   *client
		want int
	}{
		{"/api/v1/secret", admin, http.StatusNotFound},
		{"/api/v1/secret", anonymous, http.StatusUnauthorized}, // who you are is asked first: nothing about the path leaks
		{"/api/v1/templates/../audit", admin, http.StatusNotFound},
		{"/api/v1/templates/%2e%2e/audit", admin, http.StatusNotFound},
		// An escaped slash stays inside one segment: a template name the
		// spec refuses (400), not a way out of /templates.
		{"/api/v1/templates/..%2faudit", admin, http.StatusBadRequest},
		{"/api/v1/./audit", admin, http.StatusNotFound},
		{"/api/v1//audit", admin, http.StatusNotFound},
		{"/api/v1/audit/", admin, http.StatusNotFound},
		{"/api/v2/x", admin, http.StatusNotFound},
		{"/api/v2/x", anonymous, http.StatusNotFound},
		{"/api", anonymous, http.StatusNotFound},
		{"/api/", anonymous, http.StatusNotFound},
	} {
		who := "anonymous"
		if c.as == admin {
			who = "ada"
		}
		t.Run(who+" "+c.path, func(t *testing.T) {
			r := c.as.raw(t, "GET", c.path, "") // raw: paths openapi.yaml does not declare
			wantStatus(t, "GET "+c.path, r, c.want)
			if strings.Contains(string(r.body), `"items"`) {
				t.Errorf("GET %s answered a listing: %s", c.path, r)
			}
		})
	}
	t.Run("method the path does not declare", func(t *testing.T) {
		wantStatus(t, "DELETE /api/v1/audit", admin.raw(t, "DELETE", "/api/v1/audit", ""), http.StatusMethodNotAllowed)
	})
}

// 6. A body past maxBodyBytes (1 MiB) is refused with 413 without reading
// it all: 100 MB streamed chunked (no length announced) or announced.
func testOversizedBodies(t *testing.T, w *world) {
	g, admin := w.g, w.api["ada"]
	const size = 100 << 20
	before := admin.workloadCount(t)
	for _, c := range []struct{ name, framing string }{
		{"chunked, no length announced", "Transfer-Encoding: chunked"},
		{"Content-Length announced", "Content-Length: " + strconv.Itoa(size)},
	} {
		t.Run(c.name, func(t *testing.T) {
			// raw: 100 MB written by hand, to see when the server answers
			head := "POST /api/v1/workloads HTTP/1.1\r\nHost: " + g.host + "\r\nAuthorization: Bearer " + w.tok["alice"].Token +
				"\r\nContent-Type: application/json\r\n" + c.framing + "\r\n\r\n"
			start := time.Now()
			r, written, err := g.raw(t, head, func(conn io.Writer) (int64, error) {
				dst := conn
				var cw io.WriteCloser
				if strings.HasPrefix(c.framing, "Transfer-Encoding") {
					cw = httputil.NewChunkedWriter(conn)
					dst = cw
				}
				n, err := io.Copy(dst, io.LimitReader(&endless{prefix: `{"template":"dev-environment","team":"vision","parameters":{"x":"`}, size))
				if err == nil && cw != nil {
					err = cw.Close()
				}
				return n, err
			})
			if err != nil {
				t.Fatalf("no answer (%v) after %d bytes", err, written)
			}
			wantStatus(t, "POST 100 MB", *r, http.StatusRequestEntityTooLarge)
			if written >= size/2 {
				t.Errorf("the server read %d of %d bytes before answering: it did not stop at the limit", written, size)
			}
			t.Logf("413 after %v; %d bytes sent before the connection closed", time.Since(start).Round(time.Millisecond), written)
		})
	}
	wantStatus(t, "/healthz afterwards", servertest.Must(admin.GetHealthWithResponse(t.Context()))(t), http.StatusOK)
	if after := admin.workloadCount(t); after != before {
		t.Errorf("%d workloads before, %d after", before, after)
	}
}

// endless is a reader of a prefix then 'a' forever: a big body without
// holding it in memory.
type endless struct {
	prefix string
	off    int
}

func (e *endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if e.off < len(e.prefix) {
			k := copy(p[n:], e.prefix[e.off:])
			e.off += k
			n += k
			continue
		}
		p[n] = 'a'
		n++
	}
	return n, nil
}

// 7. A JSON body naming a key twice is refused, naming the key: a decoder
// keeps the last, so what was checked and what is used could differ.
func testDuplicateKeys(t *testing.T, w *world) {
	admin := w.api["ada"]
	// raw bodies: a key twice is JSON no generated type can send; each goes
	// through its operation's WithBody variant.
	doc := func(name string) string {
		b, _ := json.Marshal(probeTemplate(name))
		return string(b)
	}
	meta := func(name string) string { return `{"name":"` + name + `","title":"dup"}` }
	spec, _ := json.Marshal(probeTemplate("x").Spec)
	before := admin.workloadCount(t)
	const ct = "application/json"
	for _, c := range []struct {
		name, who, body, field string
		send                   func(ctx context.Context, c *client, body io.Reader) (answer, error)
	}{
		{"template metadata twice", "ada",
			`{"apiVersion":"gantry.dev/v1alpha1","kind":"Template","metadata":` + meta("sec-dup-a") + `,"metadata":` + meta("sec-dup-b") + `,"spec":` + string(spec) + `}`, "metadata",
			func(ctx context.Context, c *client, body io.Reader) (answer, error) {
				return c.CreateTemplateWithBodyWithResponse(ctx, ct, body)
			}},
		{"resources.memory twice", "ada",
			strings.Replace(doc("sec-dup-c"), `"memory":"{{mem}}"`, `"memory":"{{mem}}","memory":"1Gi"`, 1), "spec.resources.memory",
			func(ctx context.Context, c *client, body io.Reader) (answer, error) {
				return c.CreateTemplateWithBodyWithResponse(ctx, ct, body)
			}},
		{"launch team twice", "alice",
			`{"template":"dev-environment","team":"vision","team":"nlp"}`, "team",
			func(ctx context.Context, c *client, body io.Reader) (answer, error) {
				return c.CreateWorkloadWithBodyWithResponse(ctx, nil, ct, body)
			}},
		{"version status twice", "ada",
			`{"status":"deprecated","reason":"dup","status":"revoked"}`, "status",
			func(ctx context.Context, c *client, body io.Reader) (answer, error) {
				return c.SetTemplateVersionStatusWithBodyWithResponse(ctx, "sec-probe", 1, ct, body)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := wantStatus(t, c.name, servertest.Must(c.send(t.Context(), w.api[c.who], strings.NewReader(c.body)))(t), http.StatusUnprocessableEntity)
			if !slices.Contains(p.fields(), c.field) {
				t.Errorf("problem fields %v; want %q named", p.fields(), c.field)
			}
		})
	}
	for _, name := range []string{"sec-dup-a", "sec-dup-b", "sec-dup-c"} {
		wantStatus(t, "template "+name, servertest.Must(admin.GetTemplateWithResponse(t.Context(), name, nil))(t), http.StatusNotFound)
	}
	if st := templateStatus(t, admin, "sec-probe", 1); st != "active" {
		t.Errorf("sec-probe version 1 is %q after the refused status change; want active", st)
	}
	if after := admin.workloadCount(t); after != before {
		t.Errorf("%d workloads before, %d after", before, after)
	}
}

// 8. A quantity with a huge decimal exponent (apimachinery turns it into
// big-number arithmetic that spins for minutes) is refused at once, from a
// template body or through a parameter.
func testHugeExponents(t *testing.T, w *world) {
	admin := w.api["ada"]
	before := admin.workloadCount(t)
	withMem := func(mem string) *model.Parameters { return &model.Parameters{"mem": mem} }
	probe := func(mem string) func(context.Context, *client) (answer, error) {
		return func(ctx context.Context, c *client) (answer, error) {
			return c.RenderTemplateWithResponse(ctx, "sec-probe", model.RenderRequest{Team: "vision", Parameters: withMem(mem)})
		}
	}
	launch := func(mem string) func(context.Context, *client) (answer, error) {
		return func(ctx context.Context, c *client) (answer, error) {
			return c.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "sec-probe", Team: "vision", Parameters: withMem(mem)})
		}
	}
	create := func(name string, edit func(*model.TemplateDocument)) func(context.Context, *client) (answer, error) {
		return func(ctx context.Context, c *client) (answer, error) {
			doc := probeTemplate(name)
			edit(&doc)
			return c.CreateTemplateWithResponse(ctx, doc)
		}
	}
	for _, c := range []struct {
		name, who string
		send      func(context.Context, *client) (answer, error)
		field     string // the field the refusal names
	}{
		{"template resources.memory", "ada", create("sec-exp-a", func(d *model.TemplateDocument) { d.Spec.Resources.Memory = "1E8000000000" }), "spec.resources.memory"},
		{"template resources.cpu", "ada", create("sec-exp-b", func(d *model.TemplateDocument) { d.Spec.Resources.Cpu = "1e8000000000" }), "spec.resources.cpu"},
		{"template volume size", "ada", create("sec-exp-c", func(d *model.TemplateDocument) {
			d.Spec.Volumes = &[]model.Volume{{Name: "data", MountPath: "/data", Size: "1E8000000000"}}
		}), "spec.volumes[0].size"},
		{"parameter in a preview", "alice", probe("1E8000000000"), "spec.resources.memory"},
		{"parameter in a launch", "alice", launch("1E8000000000"), "spec.resources.memory"},
		{"negative exponent in a launch", "alice", launch("1e-8000000000"), "spec.resources.memory"},
		{"a 40-digit quantity in a launch", "alice", launch("1" + strings.Repeat("0", 39) + "Gi"), "spec.resources.memory"},
		{"a 4000-digit parameter in a launch", "alice", launch("1" + strings.Repeat("0", 4000) + "Gi"), "parameters.mem"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			r := servertest.Must(c.send(t.Context(), w.api[c.who]))(t) // the client gives up after 20 s: a hang fails here
			elapsed := time.Since(start)
			p := wantStatus(t, c.name, r, http.StatusUnprocessableEntity)
			if r.StatusCode() == http.StatusUnprocessableEntity && !slices.Contains(p.fields(), c.field) {
				t.Errorf("problem fields %v; want %q named", p.fields(), c.field)
			}
			if elapsed > 5*time.Second {
				t.Errorf("answered after %v; want it refused at once", elapsed)
			}
		})
	}
	for _, name := range []string{"sec-exp-a", "sec-exp-b", "sec-exp-c"} {
		wantStatus(t, "template "+name, servertest.Must(admin.GetTemplateWithResponse(t.Context(), name, nil))(t), http.StatusNotFound)
	}
	if after := admin.workloadCount(t); after != before {
		t.Errorf("%d workloads before, %d after", before, after)
	}
}

// 18. Headers past the server's limit (1 MB) are refused (431) or the
// connection closed, never a crash; headers that never end are dropped.
func testHeaders(t *testing.T, w *world, slow *slowHeaders) {
	g := w.g
	big := strings.Repeat("a", 2<<20)
	var many strings.Builder
	for i := 0; many.Len() < 2<<20; i++ {
		fmt.Fprintf(&many, "X-Pad-%d: %s\r\n", i, strings.Repeat("b", 60))
	}
	for _, c := range []struct{ name, head string }{
		{"one 2 MB header", "GET /healthz HTTP/1.1\r\nHost: " + g.host + "\r\nX-Pad: " + big + "\r\n\r\n"},
		{"2 MB of small headers", "GET /healthz HTTP/1.1\r\nHost: " + g.host + "\r\n" + many.String() + "\r\n"},
		{"a 2 MB cookie with a valid token", "GET /api/v1/templates HTTP/1.1\r\nHost: " + g.host + "\r\nAuthorization: Bearer " +
			w.tok["alice"].Token + "\r\nCookie: gantry_session=" + big + "\r\n\r\n"},
		{"a 2 MB request line", "GET /healthz?" + big + " HTTP/1.1\r\nHost: " + g.host + "\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _, err := g.raw(t, c.head, nil) // raw: headers past the server's limit, written by hand
			switch {
			case err != nil:
				t.Logf("connection closed without an answer: %v", err)
			case r.status != http.StatusRequestHeaderFieldsTooLarge:
				t.Errorf("%s; want 431 or the connection closed", r)
			default:
				t.Logf("%s", r)
			}
			wantStatus(t, "/healthz afterwards", servertest.Must(w.api["alice"].GetHealthWithResponse(t.Context()))(t), http.StatusOK)
		})
	}
	t.Run("headers that never end", func(t *testing.T) {
		var end slowEnd
		waitfor.Until(t, 30*time.Second, "the server to drop a connection whose headers never end", func() error {
			select {
			case end = <-slow.closed:
				return nil
			default:
				return fmt.Errorf("still open %v after it was opened", time.Since(slow.opened).Round(time.Second))
			}
		})
		if errors.Is(end.err, os.ErrDeadlineExceeded) {
			t.Fatalf("the server kept the connection open until the test's own deadline")
		}
		t.Logf("dropped %v after it was opened (ReadHeaderTimeout 10 s)", end.at.Sub(slow.opened).Round(100*time.Millisecond))
	})
}

// slowHeaders is a connection whose request headers never end.
type slowHeaders struct {
	opened time.Time
	closed chan slowEnd
}

// slowEnd is how a slow connection ended: when, and the read's error (a
// deadline of the test's own means the server never dropped it).
type slowEnd struct {
	at  time.Time
	err error
}

// openSlowHeaders starts a request and never finishes its headers; the
// server must drop it (ReadHeaderTimeout) while serving everyone else.
func (g *gantry) openSlowHeaders(t *testing.T) *slowHeaders {
	t.Helper()
	src := g.nextSource(t)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", g.host)
	if err != nil {
		t.Fatal(err)
	}
	s := &slowHeaders{opened: time.Now(), closed: make(chan slowEnd, 1)}
	io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: "+g.host+"\r\nX-Slow: a")
	conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	go func() {
		_, err := io.Copy(io.Discard, conn) // until the server closes it (or the deadline)
		s.closed <- slowEnd{at: time.Now(), err: err}
		conn.Close()
	}()
	t.Cleanup(func() { conn.Close() })
	return s
}

// testDeepBodies: bodies nested deeper or wider than any request, under the
// body limit, sent by a read-only viewer to every route that reads JSON from
// a person — the probe's 60,000-deep render body took 5 GB and 24 s, 100,000
// deep took the machine's memory. Each is refused with a 400 naming the limit
// and where it was passed, quickly, with the server's memory flat.
func testDeepBodies(t *testing.T, w *world) {
	deep := func(prefix string, n int) string {
		return prefix + strings.Repeat("[", n) + strings.Repeat("]", n) + "}"
	}
	var wide strings.Builder
	wide.WriteString(`{"team":"vision","parameters":{`)
	for i := range 60_000 {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"p%d":1`, i)
	}
	wide.WriteString("}}")
	before := w.g.rss(t)
	// raw bodies: nested deeper and wider than any request, through each
	// operation's WithBody variant.
	const ct = "application/json"
	render := func(ctx context.Context, c *client, body io.Reader) (answer, error) {
		return c.RenderTemplateWithBodyWithResponse(ctx, "dev-environment", ct, body)
	}
	launch := func(ctx context.Context, c *client, body io.Reader) (answer, error) {
		return c.CreateWorkloadWithBodyWithResponse(ctx, nil, ct, body)
	}
	apply := func(ctx context.Context, c *client, body io.Reader) (answer, error) {
		return c.ApplyTemplatesWithBodyWithResponse(ctx, ct, body)
	}
	for _, c := range []struct {
		name, who   string
		send        func(context.Context, *client, io.Reader) (answer, error)
		body, field string
		limit       string
	}{
		{"render, arrays 60,000 deep", "vic", render, deep(`{"team":"vision","gpu":`, 60_000), "gpu[0][0]", "nested deeper than 64"},
		{"render, arrays 100,000 deep", "vic", render, deep(`{"team":"vision","gpu":`, 100_000), "gpu[0]", "nested deeper than 64"},
		{"launch, objects 50,000 deep", "alice", launch, `{"template":"dev-environment","team":"vision","parameters":` + strings.Repeat(`{"a":`, 50_000) + "1" + strings.Repeat("}", 50_001), "parameters.a.a", "nested deeper than 64"},
		{"launch, 60,000 parameters", "alice", launch, wide.String(), "parameters", "more than 50000 members"},
		{"catalog apply, 60,000 deep", "ada", apply, deep(`{"dryRun":true,"files":`, 60_000), "files[0]", "nested deeper than 64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			p := wantStatus(t, c.name, servertest.Must(c.send(t.Context(), w.api[c.who], strings.NewReader(c.body)))(t), http.StatusBadRequest)
			took := time.Since(start)
			if len(p.Errors) != 1 || !strings.HasPrefix(p.Errors[0].Field, c.field) || !strings.Contains(p.Errors[0].Detail, c.limit) {
				t.Errorf("problem %+v; want one field under %q saying %q", p, c.field, c.limit)
			}
			// Generous: the refusal takes milliseconds; the quadratic walk
			// took 24 s at 60,000 levels.
			if took > 5*time.Second {
				t.Errorf("answered after %v", took)
			}
			t.Logf("400 after %v", took.Round(time.Microsecond))
		})
	}
	// YAML inside a body (a catalog file) is bounded by its decoder: the
	// answer names the file and line.
	yamlDeep := `{"dryRun":true,"files":[{"path":"deep.yaml","content":"apiVersion: gantry.dev/v1alpha1\nkind: Template\nmetadata: {name: deep}\nspec: ` + strings.Repeat("[", 60_000) + `"}]}`
	start := time.Now()
	p := wantStatus(t, "catalog apply of a file nested 60,000 deep", servertest.Must(apply(t.Context(), w.api["ada"], strings.NewReader(yamlDeep)))(t), http.StatusUnprocessableEntity)
	if len(p.Errors) == 0 || !strings.Contains(p.Errors[0].Detail, "depth") {
		t.Errorf("problem %+v; want the file's depth named", p)
	}
	t.Logf("deep YAML file: 422 after %v", time.Since(start).Round(time.Microsecond))
	after := w.g.rss(t)
	t.Logf("server resident memory %d MB before, %d MB after", before>>20, after>>20)
	if after > before+150<<20 {
		t.Errorf("the server's memory grew from %d MB to %d MB", before>>20, after>>20)
	}
	wantStatus(t, "/healthz afterwards", servertest.Must(w.api["vic"].GetHealthWithResponse(t.Context()))(t), http.StatusOK)
}
