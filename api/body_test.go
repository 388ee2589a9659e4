package api_test

import (
	"io"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/servertest"
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
		// raw body: past the limit, with and without its length
		r := servertest.Must(e.api.CreateWorkloadWithBodyWithResponse(t.Context(), nil, "application/json", body))(t)
		if p := problemOf(r.ApplicationproblemJSONDefault); r.StatusCode() != 413 || p.Status != 413 || !strings.HasPrefix(r.ContentType(), "application/problem+json") {
			t.Errorf("chunked %v: %d %q %s, want a 413 problem", chunked, r.StatusCode(), r.ContentType(), r.Body)
		}
	}
}

// TestDuplicateKeysRefused: a JSON body naming a key twice (decoders keep
// the last one) is refused with the key's path, as template files are.
func TestDuplicateKeysRefused(t *testing.T) {
	e := newEnv(t, alice)
	ctx := t.Context()
	// raw body: a key twice is JSON no generated type can send
	doc := `{"apiVersion":"gantry.dev/v1alpha1","kind":"Template","metadata":{"name":"dup","name":"dup2"},"spec":{}}`
	r := servertest.Must(e.api.CreateTemplateWithBodyWithResponse(ctx, "application/json", strings.NewReader(doc)))(t)
	if p := problemOf(r.ApplicationproblemJSONDefault); r.StatusCode() != 422 || p.fields()["metadata.name"] == "" {
		t.Fatalf("duplicate key in a template: %d %s, want 422 naming metadata.name", r.StatusCode(), r.Body)
	}
	launch := `{"template":"pytorch-train","team":"vision","parameters":{"epochs":1,"epochs":999}}`
	w := servertest.Must(e.api.CreateWorkloadWithBodyWithResponse(ctx, nil, "application/json", strings.NewReader(launch)))(t)
	if p := problemOf(w.ApplicationproblemJSONDefault); w.StatusCode() != 422 || p.fields()["parameters.epochs"] == "" {
		t.Fatalf("duplicate key in a launch: %d %s, want 422 naming parameters.epochs", w.StatusCode(), w.Body)
	}
}

// TestDeepBodyWhateverTheMediaTypeCase: the one pass over JSON bodies runs
// however the media type is spelt (application/JSON, a +json suffix), so the
// depth bound cannot be stepped around.
func TestDeepBodyWhateverTheMediaTypeCase(t *testing.T) {
	e := newEnv(t, alice)
	body := `{"template":"pytorch-train","team":"vision","parameters":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`
	for _, ct := range []string{"application/JSON", "Application/Json; charset=utf-8", "application/problem+json"} {
		// raw body: nested past the bound, under odd spellings of the media type
		r := servertest.Must(e.api.CreateWorkloadWithBodyWithResponse(t.Context(), nil, ct, strings.NewReader(body)))(t)
		if p := problemOf(r.ApplicationproblemJSONDefault); r.StatusCode() != 400 || len(p.Errors) == 0 || !strings.Contains(p.Errors[0].Detail, "nested deeper than 64") {
			t.Errorf("Content-Type %s: %d %s, want a 400 naming the depth", ct, r.StatusCode(), r.Body)
		}
	}
}
