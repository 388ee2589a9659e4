package api_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/servertest"
)

// extremes are the values every parameter is sent, whatever its type: the
// ends of the calendar, numbers past every integer type, empty and huge
// strings, separators and control characters.
var extremes = []string{
	"", " ", "0", "-1", "1", "2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
	"-9223372036854775808", "-9223372036854775809", "1e400", "-1e400", "NaN", "Infinity", "0.0000001", "1.5",
	"0000-01", "0000-00", "9999-12", "10000-01", "1969-12",
	"0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "9999-12-31T23:59:59-23:59",
	"0000-01-01T00:00:00+23:59", "1970-01-01T00:00:00Z", "2026-02-30T00:00:00Z",
	"0ms", "9999999999999999999h", "1ms", "1h1h1h1h1h1h",
	strings.Repeat("a", 10_000), strings.Repeat("9", 10_000), strings.Repeat("é", 2_000),
	"..", "../..", "a/b", "%", "\x00", "\n", "<script>", "'; DROP TABLE workloads; --",
	"true", "false", "null", "[]", "{}",
}

// TestExtremeParameters sends every query and path parameter of openapi.yaml
// each extreme value, one parameter at a time (the others plausible), as a
// platform admin to a running server: whatever comes back, no 5xx, ever.
func TestExtremeParameters(t *testing.T) {
	e := newEnv(t, alice)
	r := servertest.Must(e.api.CreateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("setup launch: %d", r.StatusCode())
	}
	plausible := map[string]string{"name": "dev-environment", "team": "vision", "id": r.JSON201.Id, "version": "1", "user": "0123456789abcdef"}
	doc, err := openapi3.NewLoader().LoadFromData(gantry.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 20 * time.Second}
	sent, paths := 0, doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			var params []*openapi3.Parameter
			for _, ref := range append(append(openapi3.Parameters{}, item.Parameters...), op.Parameters...) {
				if p := ref.Value; p.In == openapi3.ParameterInPath || p.In == openapi3.ParameterInQuery {
					params = append(params, p)
				}
			}
			for _, p := range params {
				for _, v := range extremes {
					if p.In == openapi3.ParameterInPath && v == "" {
						continue // another route, not this parameter
					}
					u := path
					for _, q := range params {
						if q.In == openapi3.ParameterInPath {
							val := plausible[q.Name]
							if q == p {
								val = v
							}
							u = strings.Replace(u, "{"+q.Name+"}", url.PathEscape(val), 1)
						}
					}
					if p.In == openapi3.ParameterInQuery {
						u += "?" + url.Values{p.Name: {v}}.Encode()
					}
					status := sendExtreme(t, client, e.url, method, u)
					sent++
					if status >= 500 {
						t.Errorf("%s %s with %s %s = %.40q: %d", method, path, p.In, p.Name, v, status)
					}
				}
			}
		}
	}
	t.Logf("%d requests sent", sent)
}

// sendExtreme sends one request (mutating ones with an empty JSON body) and
// returns its status without waiting for a stream's end. Raw: the routes
// come from openapi.yaml at run time, and the values are ones the
// generated parameter types could not hold.
func sendExtreme(t *testing.T, client *http.Client, base, method, path string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // a stream (watch, logs?follow) is closed once its status is known
	var body io.Reader
	if method != http.MethodGet && method != http.MethodHead && method != http.MethodDelete {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+standIn)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
