package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestProxyDialsOnlyItsService: /w/{id}/ forwards to the workload's own
// Service, in its own namespace, over plain HTTP at a port — what a launch
// records — and to nothing else a record may say (another team's Service,
// the cloud's metadata address), without dialling it.
func TestProxyDialsOnlyItsService(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	g := servertest.WithOverrides(t, server.Overrides{AppTransport: roundTrip(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		asked = append(asked, r.URL.Host)
		mu.Unlock()
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("the app")), Header: http.Header{}, Request: r}, nil
	})})
	tok := g.Token("alice")
	r := servertest.Must(newClient(g.URL, tok, "").CreateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d %s", r.StatusCode(), r.Body)
	}
	id := r.JSON201.Id
	w, err := g.Store.Workload(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	ns := g.Workloads.Namespace(w)
	for _, tc := range []struct {
		endpoint string
		ok       bool
	}{
		{"http://notebook." + ns + ".svc.cluster.local:8888", true},
		{"http://169.254.169.254:80", false},
		{"http://notebook.gantry-other.svc.cluster.local:8888", false},
		{"http://notebook." + ns + ".svc.cluster.local.evil.example:8888", false},
		{"http://a.notebook." + ns + ".svc.cluster.local:8888", false},
		{"https://notebook." + ns + ".svc.cluster.local:8888", false},
		{"http://notebook." + ns + ".svc.cluster.local", false},
		{"http://u:p@notebook." + ns + ".svc.cluster.local:8888", false},
	} {
		if _, err := g.Store.UpdateWorkload(context.Background(), id, func(old workload.Workload) (workload.Workload, error) {
			old.Status, old.Endpoint = workload.Running, tc.endpoint
			return old, nil
		}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		asked = nil
		mu.Unlock()
		req, _ := http.NewRequest(http.MethodGet, g.URL+"/w/"+id+"/", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		dialled := len(asked) > 0
		mu.Unlock()
		switch {
		case tc.ok && (resp.StatusCode != 200 || string(body) != "the app"):
			t.Errorf("%s: %d %s, want the app", tc.endpoint, resp.StatusCode, body)
		case !tc.ok && (resp.StatusCode < 500 || dialled || strings.Contains(string(body), "the app")):
			t.Errorf("%s: %d %s (asked %v), want it refused undialled", tc.endpoint, resp.StatusCode, body, asked)
		}
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
