package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestChunkedBodyTooLarge: a body past the limit answers 413 as a problem,
// whether its length was announced or it came chunked.
func TestChunkedBodyTooLarge(t *testing.T) {
	e := newEnv(t, alice)
	big := `{"template":"pytorch-train","team":"vision","parameters":{"script":"` + strings.Repeat("a", 200<<10) + `"}}`
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(big)
		if chunked {
			body = io.MultiReader(strings.NewReader(big)) // no length: sent chunked
		}
		req, _ := http.NewRequest("POST", e.url+"/api/v1/workloads", body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer test.jwt.token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p problem
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != 413 || p.Status != 413 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("chunked %v: %d %q %+v, want a 413 problem", chunked, resp.StatusCode, resp.Header.Get("Content-Type"), p)
		}
	}
}

// TestDuplicateKeysRefused: a JSON body naming a key twice (decoders keep
// the last one) is refused with the key's path, as template files are.
func TestDuplicateKeysRefused(t *testing.T) {
	e := newEnv(t, alice)
	doc := `{"apiVersion":"gantry.dev/v1alpha1","kind":"Template","metadata":{"name":"dup","name":"dup2"},"spec":{}}`
	var p problem
	if s := e.request("", "POST", "/api/v1/templates", doc, &p); s != 422 || p.fields()["metadata.name"] == "" {
		t.Fatalf("duplicate key in a template: %d %+v, want 422 naming metadata.name", s, p)
	}
	launch := `{"template":"pytorch-train","team":"vision","parameters":{"epochs":1,"epochs":999}}`
	if s := e.request("", "POST", "/api/v1/workloads", launch, &p); s != 422 || p.fields()["parameters.epochs"] == "" {
		t.Fatalf("duplicate key in a launch: %d %+v, want 422 naming parameters.epochs", s, p)
	}
}

// TestDeepBodyWhateverTheMediaTypeCase: the one pass over JSON bodies runs
// however the media type is spelt (application/JSON, a +json suffix), so the
// depth bound cannot be stepped around.
func TestDeepBodyWhateverTheMediaTypeCase(t *testing.T) {
	e := newEnv(t, alice)
	body := `{"template":"pytorch-train","team":"vision","parameters":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`
	for _, ct := range []string{"application/JSON", "Application/Json; charset=utf-8", "application/problem+json"} {
		req, _ := http.NewRequest("POST", e.url+"/api/v1/workloads", strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Authorization", "Bearer test.jwt.token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p problem
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != 400 || len(p.Errors) == 0 || !strings.Contains(p.Errors[0].Detail, "nested deeper than 64") {
			t.Errorf("Content-Type %s: %d %+v, want a 400 naming the depth", ct, resp.StatusCode, p)
		}
	}
}
