package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

// browserLike sends what a browser sends when it follows a link.
type browserLike struct{ next http.RoundTripper }

func (b browserLike) RoundTrip(r *http.Request) (*http.Response, error) {
	r.Header.Set("Accept", "text/html,application/xhtml+xml")
	return b.next.RoundTrip(r)
}

// TestNotebookOpensOnlyForItsOwner launches the starter Jupyter notebook on
// the local cluster and opens it through Gantry's proxy. The notebook's app
// cannot run on kwok nodes, so a stand-in answers at the address Gantry
// dials (the workload's in-cluster endpoint) and reports what reached it.
// The owner gets in (signed in through the link, or with a token); an
// unauthenticated client, a member of another team and a lead of the same
// team do not, and the app never sees Gantry's credentials.
func TestNotebookOpensOnlyForItsOwner(t *testing.T) {
	alone(t)
	if cluster == nil {
		t.Skip("no cluster")
	}
	seen := make(chan string, 100)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization") + "|" + r.Header.Get("Cookie")
		fmt.Fprintf(w, "jupyterlab at %s", r.URL.Path)
	}))
	defer app.Close()
	var endpoint string // host:port Gantry must dial: the notebook's, known after launch
	dials := make(chan string, 100)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials <- addr
		if addr != endpoint {
			return nil, fmt.Errorf("dial %s: not the notebook", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, strings.TrimPrefix(app.URL, "http://"))
	}}
	ns := "gantry-e2e-" + workload.NewID()
	grantLease(t, ns)
	g := servertest.WithOverrides(t, server.Overrides{AppTransport: tr}, func(c *config.Config) {
		c.Database.DSN = config.Secret(storetest.SQLitePath(t))
		c.PolicyDir = testPolicy(t)
		c.ReconcileInterval = config.Duration(time.Second)
		c.Namespace = ns
		c.Kubeconfig = gantryKubeconfig
		c.DevLogin.Users = append(c.DevLogin.Users, config.DevUser{Username: "nils", Password: "nils", Name: "Nils (team nlp)", Groups: []string{"ml-nlp"}})
	})
	// call is a raw request to the notebook's /w/ path (not the API).
	call := func(user, method, path string, header map[string]string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, g.URL+path, nil)
		if user != "" {
			req.Header.Set("Authorization", "Bearer "+g.Token(user))
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}

	// alice (team vision) launches a notebook.
	ctx := t.Context()
	alice := servertest.Client(g.URL, g.Token("alice"))
	r := servertest.Must(alice.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "jupyter-notebook", Team: "vision"}))(t)
	w := servertest.Deref(r.JSON201)
	wURL := servertest.Deref(w.Url)
	if r.StatusCode() != 201 || wURL != "/w/"+w.Id+"/" {
		t.Fatalf("launch: %d %s", r.StatusCode(), r.Body)
	}
	u, _ := url.Parse(servertest.Deref(w.Endpoint))
	endpoint = u.Host
	if want := fmt.Sprintf("%s.gantry-vision.svc.cluster.local:8888", w.Name); endpoint != want {
		t.Fatalf("endpoint %s, want the notebook's interactive port %s", servertest.Deref(w.Endpoint), want)
	}
	// Before it runs, even the owner waits.
	if code, body, _ := call("alice", "GET", wURL, nil); code != http.StatusConflict && code != http.StatusOK {
		t.Fatalf("before Running: %d %s", code, body)
	}
	waitfor.Until(t, 90*time.Second, "the notebook to run", func() error {
		if r := servertest.Must(alice.GetWorkloadWithResponse(ctx, w.Id))(t); servertest.Deref(r.JSON200).Status != model.Running {
			return fmt.Errorf("%d %s", r.StatusCode(), r.Body)
		}
		return nil
	})

	for len(seen) > 0 { // the owner's own early request, if the notebook ran already
		<-seen
	}

	// Who may not get in: nothing reaches the app.
	for _, tc := range []struct {
		who, accept string
		want        int
	}{
		{"", "application/json", http.StatusUnauthorized},
		{"", "text/html", http.StatusFound}, // to the sign-in, and back
		{"nils", "", http.StatusNotFound},   // another team: it does not exist
		{"lee", "", http.StatusForbidden},   // the team's lead: not the owner
		{"ada", "", http.StatusForbidden},   // a platform admin: not the owner either
	} {
		code, body, h := call(tc.who, "GET", wURL+"lab", map[string]string{"Accept": tc.accept})
		if code != tc.want {
			t.Errorf("%q opening the notebook: %d %s, want %d", tc.who, code, body, tc.want)
		}
		if code == http.StatusFound && h.Get("Location") != "/auth/login?return="+url.QueryEscape(wURL+"lab") {
			t.Errorf("unauthenticated browser sent to %s", h.Get("Location"))
		}
	}
	if len(seen) != 0 {
		t.Fatalf("%d refused requests reached the app", len(seen))
	}

	// The owner with a token: proxied, without the token.
	if code, body, _ := call("alice", "GET", wURL+"lab", nil); code != 200 || body != "jupyterlab at /w/"+w.Id+"/lab" {
		t.Fatalf("owner with a token: %d %s", code, body)
	}
	if got := <-seen; got != "|" {
		t.Errorf("the app saw Gantry's credentials: %q", got)
	}

	// The owner in a browser follows the link, signs in, and lands in the app.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Transport: browserLike{http.DefaultTransport}, Timeout: 20 * time.Second}
	resp, body, err := devidp.SignIn(context.Background(), browser, g.URL+wURL+"lab", "alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Request.URL.Path != wURL+"lab" || body != "jupyterlab at /w/"+w.Id+"/lab" {
		t.Fatalf("owner through the link landed on %s: %s", resp.Request.URL, body)
	}
	if got := <-seen; strings.Contains(got, "gantry_session") {
		t.Errorf("the app saw the session cookie: %q", got)
	}
	// A cross-site page cannot drive the owner's notebook with their cookie.
	post, _ := http.NewRequest("POST", g.URL+wURL+"api/kernels", nil)
	post.Header.Set("Origin", "https://evil.example")
	if resp, err := browser.Do(post); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST with the owner's session: %v %v", resp.StatusCode, err)
	}

	// Only Gantry may reach the pods: the notebook's NetworkPolicy admits its proxy alone.
	np, err := cluster.Client.NetworkingV1().NetworkPolicies("gantry-vision").Get(context.Background(), w.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if in := np.Spec.Ingress; len(in) != 1 || len(in[0].From) != 1 || in[0].From[0].PodSelector.MatchLabels[render.LabelRole] != render.RoleProxy || in[0].Ports[0].Port.IntValue() != 8888 {
		t.Errorf("notebook network policy %+v", np.Spec)
	}

	// nils' attempt is in the audit log as what it was.
	audit := servertest.Must(servertest.Client(g.URL, g.Token("ada")).ListAuditWithResponse(ctx, &model.ListAuditParams{Decision: new(model.ListAuditParamsDecisionDeny)}))(t)
	found := false
	for _, r := range servertest.Deref(audit.JSON200).Items {
		if strings.Contains(r.Actor, "#dev-nils") && r.Decision == "deny" && strings.Contains(r.Reason, "answered 404") {
			found = true
		}
	}
	if !found {
		t.Errorf("nils' attempt is not audited as a denial: %s", audit.Body)
	}
}
