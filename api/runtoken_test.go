package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/api"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
)

// podReviewer stands in for the cluster's TokenReview: every token is bound
// to a pod of workload *of.
type podReviewer struct{ of *string }

func (r podReviewer) ReviewRunToken(context.Context, string, string, string) (runs.Review, error) {
	return runs.Review{Authenticated: true, Audiences: []string{runs.Audience}, Username: "system:serviceaccount:gantry-vision:default",
		Workload: *r.of, Pod: "gantry-vision/run-" + *r.of}, nil
}

// TestRunTokenReachesOnlyItsProgress walks every route of openapi.yaml
// with a training run's token, through the real middleware: only its own
// workload's progress route takes it; every other route that is not public
// refuses it (401: it is no person's credential — the OpenID provider's
// verifier refuses a cluster's token, as the stand-in here does), and
// another workload's progress route refuses it (403).
func TestRunTokenReachesOnlyItsProgress(t *testing.T) {
	var wid string
	g := servertest.WithOverrides(t, server.Overrides{
		Identify: func(r *http.Request) (identity.Identity, error) {
			if tok, _ := authn.BearerToken(r.Header.Get("Authorization")); runs.IsRunToken(tok) {
				return identity.Identity{}, errors.New("not a token of this issuer")
			}
			return alice(r)
		},
		RunReviewer: podReviewer{of: &wid},
	}, func(c *config.Config) {
		// A refused credential is an anonymous request, limited per
		// source: this one source sends a hundred.
		c.Security.AnonymousBurst = 1000
	})
	e := envAt(t, g.URL, nil, string(g.Config.Database.DSN))
	var token string
	wid, token = launchWithRunToken(t, e)
	send := func(method, path, body string) int {
		t.Helper()
		return servertest.Send(t, method, e.url+path, token, body)
	}
	doc, err := openapi3.NewLoader().LoadFromData(gantry.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	const progress = "/api/v1/workloads/{id}/progress"
	reports := `{"reports": [{"step": 1}]}`
	var walked []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if p, _ := op.Extensions[api.PermissionExtension].(string); p == api.Public {
				continue
			}
			walked = append(walked, method+" "+path)
			concrete := strings.ReplaceAll(path, "{id}", wid)
			for strings.Contains(concrete, "{") { // any other parameter: a plausible value
				i, j := strings.Index(concrete, "{"), strings.Index(concrete, "}")
				concrete = concrete[:i] + "x1" + concrete[j+1:]
			}
			got := send(method, concrete, reports)
			switch {
			case method == http.MethodPost && path == progress:
				if got == http.StatusUnauthorized || got == http.StatusForbidden {
					t.Errorf("%s %s, its own progress: %d, want it taken", method, path, got)
				}
				t.Logf("%s %s, its own progress: %d", method, path, got)
			case got != http.StatusUnauthorized:
				t.Errorf("%s %s with a run's token: %d, want 401", method, path, got)
			}
		}
	}
	sort.Strings(walked)
	if !strings.Contains(strings.Join(walked, "\n"), "POST "+progress) || len(walked) < 50 {
		t.Fatalf("walked %d routes: %v", len(walked), walked)
	}
	if got := send(http.MethodPost, "/api/v1/workloads/zz99zz99zz/progress", reports); got != http.StatusForbidden {
		t.Errorf("another workload's progress with this run's token: %d, want 403", got)
	}
}

// launchWithRunToken launches a dev-environment in team vision and makes
// a token shaped as its run's pod's projected token (audience gantry-run,
// bound to a pod in its namespace), unsigned: podReviewer stands in for
// the cluster's TokenReview.
func launchWithRunToken(t *testing.T, e *env) (id, token string) {
	t.Helper()
	launched := servertest.Must(e.api.CreateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if launched.JSON201 == nil {
		t.Fatalf("launch: %d", launched.StatusCode())
	}
	id = launched.JSON201.Id
	enc := base64.RawURLEncoding.EncodeToString
	token = enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"aud":["`+runs.Audience+`"],"exp":`+strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)+
		`,"kubernetes.io":{"namespace":"gantry-vision","pod":{"name":"run-`+id+`","uid":"u1"}}}`)) + ".sig"
	return id, token
}
