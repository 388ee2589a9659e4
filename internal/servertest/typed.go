package servertest

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/api/client"
)

// Client is the typed client (api/client) of the API at url, presenting
// bearer (none when empty) on every request: what every test that calls
// the API uses, so that a change to the contract breaks the build.
func Client(url, bearer string, opts ...client.ClientOption) *client.ClientWithResponses {
	if bearer != "" {
		opts = append(opts, client.WithRequestEditorFn(Header("Authorization", "Bearer "+bearer)))
	}
	c, err := client.NewClientWithResponses(url, opts...)
	if err != nil {
		panic(err) // only an option can fail, and none here does
	}
	return c
}

// Header is a request editor that sets one header.
func Header(name, value string) client.RequestEditorFn {
	return func(_ context.Context, r *http.Request) error {
		r.Header.Set(name, value)
		return nil
	}
}

// Must is a typed call's answer: a request that got no answer, or an answer
// that does not decode as openapi.yaml says, fails the test.
//
//	w := servertest.Must(c.GetWorkloadWithResponse(ctx, id))(t)
func Must[R any](r R, err error) func(testing.TB) R {
	return func(t testing.TB) R {
		t.Helper()
		if err != nil {
			t.Fatalf("the typed client: %v", err)
		}
		return r
	}
}

// Deref is *p, or T's zero value when p is nil (an answer's JSON200 when
// the status was another).
func Deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// Send sends a JSON body with bearer to url and returns the answer's
// status: for a request the typed client cannot make (a run's token on a
// route, a body it would not send).
func Send(t testing.TB, method, url, bearer, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
