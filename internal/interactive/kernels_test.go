package interactive

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/internal/workload"
)

// oneApp is every notebook's app at one address.
type oneApp struct {
	u     *url.URL
	strip bool
}

func (a oneApp) AppTarget(_ context.Context, w workload.Workload) (workload.Target, error) {
	return workload.Target{URL: a.u, StripPrefix: a.strip, Namespace: "gantry-vision"}, nil
}

// TestKernelsBusy: a Jupyter server's list of kernels says whether one
// executes, asked at the app's own path (under /w/{id}/, or at its root
// for an app served with the prefix stripped); anything else an app
// answers is no kernel executing, and an app that does not answer is an
// error.
func TestKernelsBusy(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	answer := map[string]func(w http.ResponseWriter){}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		a := answer[r.URL.Path]
		mu.Unlock()
		if r.Header.Get("Authorization") != "" || r.Header.Get("Cookie") != "" {
			t.Errorf("credentials sent to an app: %v", r.Header)
		}
		if a == nil {
			http.NotFound(w, r)
			return
		}
		a(w)
	}))
	defer app.Close()
	u, _ := url.Parse("http://jupyter-notebook-nb1.gantry-vision.svc.cluster.local:8888")
	toApp := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, app.Listener.Addr().String())
	}}
	list := func(states ...string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			var entries []string
			for _, s := range states {
				entries = append(entries, fmt.Sprintf(`{"id": "k", "name": "python3", "execution_state": %q, "connections": 1}`, s))
			}
			fmt.Fprint(w, "["+strings.Join(entries, ",")+"]")
		}
	}
	for _, tc := range []struct {
		name   string
		strip  bool
		answer func(w http.ResponseWriter)
		busy   bool
		err    bool
	}{
		{"one kernel of two executing", false, list("idle", "busy"), true, false},
		{"kernels idle", false, list("idle", "starting"), false, false},
		{"no kernel", false, list(), false, false},
		{"at the root of an app served stripped", true, list("busy"), true, false},
		{"not Jupyter: 404", false, func(w http.ResponseWriter) { http.NotFound(w, nil) }, false, false},
		{"not Jupyter: a page", false, func(w http.ResponseWriter) { fmt.Fprint(w, "<html>busy</html>") }, false, false},
		{"a list past 1 MiB", false, func(w http.ResponseWriter) {
			fmt.Fprint(w, `[{"execution_state": "idle", "pad": "`+strings.Repeat("x", 2<<20)+`"}, {"execution_state": "busy"}]`)
		}, false, false},
		{"no answer", false, func(http.ResponseWriter) { panic(http.ErrAbortHandler) }, false, true},
	} {
		k, err := NewKernels(oneApp{u, tc.strip}, toApp, nil)
		if err != nil {
			t.Fatal(err)
		}
		path := "/w/nb1/api/kernels"
		if tc.strip {
			path = "/api/kernels"
		}
		mu.Lock()
		asked = nil
		clear(answer)
		answer[path] = tc.answer
		mu.Unlock()
		busy, err := k.Busy(context.Background(), workload.Workload{ID: "nb1"})
		if busy != tc.busy || (err != nil) != tc.err {
			t.Errorf("%s: busy %v (%v), want %v (an error: %v)", tc.name, busy, err, tc.busy, tc.err)
		}
		mu.Lock()
		if len(asked) < 1 || asked[0] != path {
			t.Errorf("%s: asked %v, want %s", tc.name, asked, path)
		}
		mu.Unlock()
	}
}
