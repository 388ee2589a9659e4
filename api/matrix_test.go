package api_test

import (
	"context"
	"net/http"
	"sort"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gantryhq/gantry"
	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/user"
)

// roles are the callers of the matrix, by the starter policy's groups.
// "narrowed" is a platform admin's personal access token narrowed to team
// nlp: it holds only what the admin holds in nlp, nothing platform-wide.
var roles = []struct {
	name      string
	groups    []string
	tokenTeam string
}{
	{"platform-admin", []string{"gantry-admins"}, ""},
	{"platform-engineer", []string{"platform-team"}, ""},
	{"team-admin", []string{"ml-vision-leads"}, ""},
	{"member", []string{"ml-vision"}, ""},
	{"viewer", []string{"auditors"}, ""},
	{"nobody", nil, ""},
	{"narrowed", []string{"gantry-admins"}, "nlp"},
}

// TestRouteRoleMatrix walks every route of openapi.yaml for every role and
// checks the outcome (status code) against the policy in policy/.
func TestRouteRoleMatrix(t *testing.T) {
	// The caller is chosen per request by a header only this test sets.
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		role := r.Header.Get("X-Test-Role")
		for _, ro := range roles {
			if ro.name == role {
				id := identity.Identity{Subject: role, Groups: ro.groups, TokenTeam: ro.tokenTeam, SecondFactor: true}
				if ro.tokenTeam != "" {
					id.TokenID, id.Via = "tok-"+role, identity.ViaToken
				}
				return id, nil
			}
		}
		return identity.Identity{Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil // setup
	})
	const (
		A = "platform-admin"
		P = "platform-engineer"
		T = "team-admin"
		M = "member"
		V = "viewer"
		N = "nobody"
		X = "narrowed"
	)
	ctx := t.Context()
	as := map[string]*client.ClientWithResponses{}
	for _, ro := range roles {
		as[ro.name] = e.as(ro.name)
	}
	// Setup as platform admin: per role, a template to delete and a workload
	// (owned by the admin) to stop and one to delete.
	stopIDs, delIDs := map[string]string{}, map[string]string{}
	launch := model.LaunchRequest{Template: "dev-environment", Team: "vision"}
	for _, ro := range roles {
		doc := templateDoc(t, "../templates/dev-environment.yaml", func(d *model.TemplateDocument) { d.Metadata.Name = "del-" + ro.name })
		if s := servertest.Must(e.api.CreateTemplateWithResponse(ctx, doc))(t).StatusCode(); s != 201 {
			t.Fatalf("setup template: %d", s)
		}
		for _, ids := range []map[string]string{stopIDs, delIDs} {
			r := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, launch))(t)
			if r.StatusCode() != 201 {
				t.Fatalf("setup workload: %d", r.StatusCode())
			}
			ids[ro.name] = r.JSON201.Id
		}
	}
	tokenIDs := map[string]string{}
	for _, ro := range roles {
		if ro.tokenTeam != "" {
			tokenIDs[ro.name] = tokenIDs[A] // a token may not manage tokens: try the admin's own
			continue
		}
		r := servertest.Must(as[ro.name].CreateTokenWithResponse(ctx, model.TokenRequest{Name: "setup", ExpiresInDays: 1}))(t)
		if r.StatusCode() != 201 {
			t.Fatalf("setup token as %s: %d", ro.name, r.StatusCode())
		}
		tokenIDs[ro.name] = r.JSON201.Id
	}
	onlyAdmin := func(ok int) map[string]int {
		return map[string]int{A: ok, P: 403, T: 403, M: 403, V: 403, N: 403, X: 403}
	}
	aliceID := user.IDOf("alice") // the setup identity
	tr := servertest.Must(e.api.CreateTokenWithResponse(ctx, model.TokenRequest{Name: "setup", ExpiresInDays: 1}))(t)
	if tr.StatusCode() != 201 {
		t.Fatalf("setup token: %d", tr.StatusCode())
	}
	aliceToken := tr.JSON201.Id
	readers := map[string]int{A: 200, P: 200, T: 200, M: 200, V: 200, N: 403, X: 200}
	writers := func(ok int) map[string]int {
		return map[string]int{A: ok, P: ok, T: 403, M: 403, V: 403, N: 403, X: 403}
	}
	three := 3
	public := map[string]int{A: 200, P: 200, T: 200, M: 200, V: 200, N: 200, X: 200}
	// The setup workloads are vision's: to a token narrowed to nlp they do not exist.
	visionReaders := map[string]int{A: 200, P: 200, T: 200, M: 200, V: 200, N: 403, X: 404}
	vllm := templateDoc(t, "../templates/vllm-inference.yaml", nil)
	wid := stopIDs[A]
	trialReq := model.TrialRequest{Template: "pytorch-train", Team: "vision", Classes: []string{"H100-80GB"}, Gpus: &[]int{1, 2}, Steps: 50}
	trialResp := servertest.Must(e.api.CreateTrialWithResponse(ctx, nil, trialReq))(t)
	if trialResp.StatusCode() != 201 {
		t.Fatalf("setup trial: %d %s", trialResp.StatusCode(), trialResp.Body)
	}
	trialID := trialResp.JSON201.Id
	decision := model.DecisionRequest{Reason: "within the quarter's plan"}
	// plain is the status of a call that is not WithResponse, its body
	// closed unread: the spec (which GetOpenAPIWithResponse cannot decode)
	// and a stream (which WatchWorkloadWithResponse would read to its end).
	plain := func(resp *http.Response, err error) (statusCoder, error) {
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		return httpStatus(resp.StatusCode), nil
	}
	type row struct {
		send func(ctx context.Context, c *client.ClientWithResponses, role string) (statusCoder, error)
		want map[string]int
	}
	matrix := map[string]row{
		"GET /healthz": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetHealthWithResponse(ctx)
		}, public},
		"GET /readyz": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetReadyWithResponse(ctx)
		}, public},
		"GET /metrics": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetGantryMetricsWithResponse(ctx)
		}, public},
		"GET /openapi.yaml": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return plain(c.GetOpenAPI(ctx))
		}, public},
		"GET /auth/config": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetAuthConfigWithResponse(ctx)
		}, public},
		"GET /api/v1/me": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetMeWithResponse(ctx)
		}, public},
		"GET /api/v1/templates": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListTemplatesWithResponse(ctx)
		}, readers},
		"POST /api/v1/templates": {func(ctx context.Context, c *client.ClientWithResponses, role string) (statusCoder, error) {
			return c.CreateTemplateWithResponse(ctx, templateDoc(t, "../templates/dev-environment.yaml", func(d *model.TemplateDocument) { d.Metadata.Name = "new-" + role }))
		}, writers(201)},
		"GET /api/v1/templates/{name}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetTemplateWithResponse(ctx, "vllm-inference", nil)
		}, readers},
		"PUT /api/v1/templates/{name}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.UpdateTemplateWithResponse(ctx, "vllm-inference", nil, vllm)
		}, writers(200)},
		"DELETE /api/v1/templates/{name}": {func(ctx context.Context, c *client.ClientWithResponses, role string) (statusCoder, error) {
			return c.DeleteTemplateWithResponse(ctx, "del-"+role, nil)
		}, writers(204)},
		"GET /api/v1/templates/{name}/versions": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListTemplateVersionsWithResponse(ctx, "vllm-inference")
		}, readers},
		"POST /api/v1/catalog/apply": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ApplyTemplatesWithResponse(ctx, model.TemplateSetRequest{DryRun: new(true), Files: []struct {
				Content string `json:"content"`
				Path    string `json:"path"`
			}{}})
		}, writers(200)},
		"PUT /api/v1/templates/{name}/versions/{version}/status": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.SetTemplateVersionStatusWithResponse(ctx, "vllm-inference", 1, model.SetTemplateVersionStatusJSONRequestBody{Status: "deprecated", Reason: new("use version 2")})
		}, writers(200)},
		// A preview refuses what a launch refuses: only those who may launch in the team.
		"POST /api/v1/templates/{name}/render": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.RenderTemplateWithResponse(ctx, "dev-environment", model.RenderRequest{Team: "vision"})
		}, map[string]int{A: 200, P: 403, T: 200, M: 200, V: 403, N: 403, X: 403}},
		"GET /api/v1/gpu-classes": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListGPUClassesWithResponse(ctx)
		}, readers},
		"GET /api/v1/gpu-classes/{name}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetGPUClassWithResponse(ctx, "L4")
		}, readers},
		"GET /api/v1/workloads": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListWorkloadsWithResponse(ctx, nil)
		}, readers},
		"POST /api/v1/workloads": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.CreateWorkloadWithResponse(ctx, nil, launch)
		}, map[string]int{A: 201, P: 403, T: 201, M: 201, V: 403, N: 403, X: 403}},
		"POST /api/v1/workloads/estimate": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.EstimateWorkloadWithResponse(ctx, nil, launch)
		}, map[string]int{A: 200, P: 403, T: 200, M: 200, V: 403, N: 403, X: 403}},
		"GET /api/v1/workloads/{id}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetWorkloadWithResponse(ctx, wid)
		}, visionReaders},
		"GET /api/v1/workloads/{id}/events": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListWorkloadEventsWithResponse(ctx, wid)
		}, visionReaders},
		"GET /api/v1/workloads/{id}/watch": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return plain(c.WatchWorkload(ctx, wid))
		}, visionReaders},
		// No cluster here: whoever may read the workload learns it has no log.
		"GET /api/v1/workloads/{id}/logs": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetWorkloadLogsWithResponse(ctx, wid, nil)
		}, map[string]int{A: 409, P: 409, T: 409, M: 409, V: 409, N: 403, X: 404}},
		"POST /api/v1/workloads/{id}/stop": {func(ctx context.Context, c *client.ClientWithResponses, role string) (statusCoder, error) {
			return c.StopWorkloadWithResponse(ctx, stopIDs[role])
		}, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		"POST /api/v1/workloads/{id}/keepalive": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.KeepWorkloadAliveWithResponse(ctx, wid)
		}, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		// Every kind starts again; the admin's service is running, so starting it changes nothing.
		"POST /api/v1/workloads/{id}/start": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.StartWorkloadWithResponse(ctx, wid)
		}, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		"DELETE /api/v1/workloads/{id}": {func(ctx context.Context, c *client.ClientWithResponses, role string) (statusCoder, error) {
			return c.DeleteWorkloadWithResponse(ctx, delIDs[role])
		}, map[string]int{A: 204, P: 403, T: 204, M: 403, V: 403, N: 403, X: 404}},
		"GET /api/v1/workloads/{id}/metrics": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetWorkloadMetricsWithResponse(ctx, wid, nil)
		}, visionReaders},
		"GET /api/v1/workloads/{id}/advice": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetWorkloadAdviceWithResponse(ctx, wid)
		}, visionReaders},
		// No telemetry here: whoever may manage the workload learns there is nothing to apply.
		"POST /api/v1/workloads/{id}/advice/apply": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ApplyWorkloadAdviceWithResponse(ctx, wid, model.ApplyWorkloadAdviceJSONRequestBody{})
		}, map[string]int{A: 409, P: 403, T: 409, M: 403, V: 403, N: 403, X: 404}},
		"GET /api/v1/advice": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListAdviceWithResponse(ctx, nil)
		}, readers},
		"GET /api/v1/costs": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetCostsWithResponse(ctx, nil)
		}, readers},
		// No carbon source in this server: 404 for everyone signed in
		// (TestCarbonForecast reads one).
		"GET /api/v1/carbon/forecast": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetCarbonForecastWithResponse(ctx, nil)
		}, map[string]int{A: 404, P: 404, T: 404, M: 404, V: 404, N: 404, X: 404}},
		"GET /api/v1/budgets": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListBudgetsWithResponse(ctx, nil)
		}, readers},
		"GET /api/v1/teams/{team}/report": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetTeamReportWithResponse(ctx, "vision", nil)
		}, visionReaders},
		"GET /api/v1/teams/{team}/settings": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetTeamSettingsWithResponse(ctx, "vision")
		}, visionReaders},
		// Prices, quotas and budgets over the files: the platform's.
		"GET /api/v1/platform/edits": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListPlatformEditsWithResponse(ctx)
		}, writers(200)},
		"PUT /api/v1/gpu-classes/{name}/price": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.SetGPUClassPriceWithResponse(ctx, "L4", model.PriceRequest{OnDemand: 0.9})
		}, writers(200)},
		"DELETE /api/v1/gpu-classes/{name}/price": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ResetGPUClassPriceWithResponse(ctx, "L4")
		}, writers(200)},
		"PUT /api/v1/teams/{team}/quota": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.SetTeamQuotaWithResponse(ctx, "vision", model.QuotaRequest{Gpus: &map[string]float64{"L4": 8}})
		}, writers(200)},
		"DELETE /api/v1/teams/{team}/quota": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ResetTeamQuotaWithResponse(ctx, "vision")
		}, writers(200)},
		"PUT /api/v1/teams/{team}/budget": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.SetTeamBudgetWithResponse(ctx, "vision", model.BudgetRequest{Amount: 5000})
		}, writers(200)},
		"DELETE /api/v1/teams/{team}/budget": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ResetTeamBudgetWithResponse(ctx, "vision")
		}, writers(200)},
		// A team-admin's: the platform team sets the limits in the templates.
		"PUT /api/v1/teams/{team}/settings": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.PutTeamSettingsWithResponse(ctx, "vision", nil, model.TeamSettingsRequest{Templates: map[string]model.TemplateOverride{"jupyter-notebook": {IdleTimeout: new("4h")}}})
		}, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		// The workload needs no approval: who may decide learns it is not waiting.
		"POST /api/v1/workloads/{id}/approve": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ApproveWorkloadWithResponse(ctx, wid, decision)
		}, map[string]int{A: 409, P: 403, T: 409, M: 403, V: 403, N: 403, X: 404}},
		"POST /api/v1/workloads/{id}/deny": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.DenyWorkloadWithResponse(ctx, wid, decision)
		}, map[string]int{A: 409, P: 403, T: 409, M: 403, V: 403, N: 403, X: 404}},
		"GET /api/v1/templates/{name}/advice": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetTemplateAdviceWithResponse(ctx, "vllm-inference")
		}, writers(200)},
		// GPU nodes are the platform's; the test server has no agents, so no node is known.
		"GET /api/v1/nodes": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListNodesWithResponse(ctx)
		}, map[string]int{A: 200, P: 200, T: 403, M: 403, V: 403, N: 403, X: 403}},
		"GET /api/v1/node-groups": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListNodeGroupsWithResponse(ctx)
		}, map[string]int{A: 200, P: 200, T: 403, M: 403, V: 403, N: 403, X: 403}},
		// Worker clusters are the platform's (none in the test server: one cluster).
		"GET /api/v1/clusters": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListClustersWithResponse(ctx)
		}, map[string]int{A: 200, P: 200, T: 403, M: 403, V: 403, N: 403, X: 403}},
		// Only platform engineers cordon clusters (the test server has none: not found).
		"PUT /api/v1/clusters/{name}/cordon": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.CordonClusterWithResponse(ctx, "onprem-a100")
		}, writers(404)},
		"PUT /api/v1/clusters/{name}/drain": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.DrainClusterWithResponse(ctx, "onprem-a100")
		}, writers(404)},
		"DELETE /api/v1/clusters/{name}/cordon": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.UncordonClusterWithResponse(ctx, "onprem-a100")
		}, writers(200)},
		// Only platform engineers change node groups.
		"PUT /api/v1/node-groups/{name}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.SetNodeGroupWithResponse(ctx, "h100-on-demand", model.NodeGroupRequest{Max: &three})
		}, writers(200)},
		"DELETE /api/v1/node-groups/{name}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ResetNodeGroupWithResponse(ctx, "h100-on-demand")
		}, writers(200)},
		"GET /api/v1/capacity/forecast": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetCapacityForecastWithResponse(ctx, &model.GetCapacityForecastParams{Class: "H100-80GB"})
		}, map[string]int{A: 200, P: 200, T: 403, M: 403, V: 403, N: 403, X: 403}},
		"GET /api/v1/capacity/reserved": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetReservedAdviceWithResponse(ctx, &model.GetReservedAdviceParams{Class: "H200-141GB"})
		}, map[string]int{A: 422, P: 422, T: 403, M: 403, V: 403, N: 403, X: 403}},
		"GET /api/v1/nodes/{name}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetNodeWithResponse(ctx, "gpu-node-1")
		}, map[string]int{A: 404, P: 404, T: 403, M: 403, V: 403, N: 403, X: 403}},
		// A run's progress: its readers read it (nothing reported here); only the run's own token reports.
		"GET /api/v1/workloads/{id}/progress": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetWorkloadProgressWithResponse(ctx, wid, nil)
		}, visionReaders},
		"POST /api/v1/workloads/{id}/progress/keep": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.KeepRunWithResponse(ctx, wid)
		}, map[string]int{A: 200, P: 403, T: 200, M: 403, V: 403, N: 403, X: 404}},
		"POST /api/v1/workloads/{id}/progress": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ReportProgressWithResponse(ctx, wid, model.ProgressReports{Reports: []model.ProgressReport{{Step: 1}}})
		}, map[string]int{A: 403, P: 403, T: 403, M: 403, V: 403, N: 403, X: 403}},
		// Trials are launches: who may launch in the team starts one; its readers read it.
		"POST /api/v1/trials": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.CreateTrialWithResponse(ctx, nil, trialReq)
		}, map[string]int{A: 201, P: 403, T: 201, M: 201, V: 403, N: 403, X: 403}},
		"GET /api/v1/trials": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListTrialsWithResponse(ctx, nil)
		}, readers},
		"GET /api/v1/trials/{id}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetTrialWithResponse(ctx, trialID)
		}, visionReaders},
		// Only a node's agent pushes telemetry, by its ServiceAccount token: no person's credentials count.
		"POST /api/v1/telemetry": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.PushTelemetryWithResponse(ctx, model.TelemetryBatch{Node: "n1", Readings: &[]model.Reading{}})
		}, map[string]int{A: 401, P: 401, T: 401, M: 401, V: 401, N: 401, X: 401}},
		"GET /api/v1/images": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListImagesWithResponse(ctx)
		}, readers},
		"GET /api/v1/images/{name}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.GetImageWithResponse(ctx, "pytorch")
		}, readers},
		"POST /api/v1/images/{name}/verify": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.VerifyImageWithResponse(ctx, "pytorch", model.VerifyRequest{Tag: "25.01-py3"})
		}, readers},
		// Users are the platform admin's: anyone else, and any narrowed token, is refused.
		"GET /api/v1/users": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListUsersWithResponse(ctx)
		}, onlyAdmin(200)},
		"POST /api/v1/users/{user}/deactivate": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.DeactivateUserWithResponse(ctx, aliceID)
		}, onlyAdmin(200)},
		"POST /api/v1/users/{user}/reactivate": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ReactivateUserWithResponse(ctx, aliceID)
		}, onlyAdmin(200)},
		"GET /api/v1/users/{user}/tokens": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListUserTokensWithResponse(ctx, aliceID)
		}, onlyAdmin(200)},
		"DELETE /api/v1/users/{user}/tokens/{id}": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.RevokeUserTokenWithResponse(ctx, aliceID, aliceToken)
		}, onlyAdmin(204)},
		"GET /api/v1/audit": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListAuditWithResponse(ctx, nil)
		}, map[string]int{A: 200, P: 403, T: 403, M: 403, V: 403, N: 403, X: 403}},
		// Anyone signed in manages their own tokens; a narrowed token manages none.
		"GET /api/v1/tokens": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.ListTokensWithResponse(ctx)
		}, map[string]int{A: 200, P: 200, T: 200, M: 200, V: 200, N: 200, X: 403}},
		"POST /api/v1/tokens": {func(ctx context.Context, c *client.ClientWithResponses, _ string) (statusCoder, error) {
			return c.CreateTokenWithResponse(ctx, model.TokenRequest{Name: "nb", ExpiresInDays: 30})
		}, map[string]int{A: 201, P: 201, T: 201, M: 201, V: 201, N: 201, X: 403}},
		"DELETE /api/v1/tokens/{id}": {func(ctx context.Context, c *client.ClientWithResponses, role string) (statusCoder, error) {
			return c.RevokeTokenWithResponse(ctx, tokenIDs[role])
		}, map[string]int{A: 204, P: 204, T: 204, M: 204, V: 204, N: 204, X: 403}},
	}
	// Every route of the spec has a row.
	doc, err := openapi3.NewLoader().LoadFromData(gantry.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			routes = append(routes, method+" "+path)
		}
	}
	sort.Strings(routes)
	for _, r := range routes {
		if _, ok := matrix[r]; !ok {
			t.Errorf("route %s has no row in the role matrix", r)
		}
	}
	if len(matrix) != len(routes) {
		t.Errorf("%d rows for %d routes", len(matrix), len(routes))
	}
	for _, r := range routes {
		row, ok := matrix[r]
		if !ok {
			continue
		}
		for _, ro := range roles {
			got := servertest.Must(row.send(ctx, as[ro.name], ro.name))(t).StatusCode()
			if want := row.want[ro.name]; got != want {
				t.Errorf("%s as %s: %d, want %d", r, ro.name, got, want)
			}
		}
	}
}

// TestTeamScopes: a member sees and manages what is theirs in their team, and
// another team's workload does not exist for them.
func TestTeamScopes(t *testing.T) {
	e := newEnv(t, func(r *http.Request) (identity.Identity, error) {
		if r.Header.Get("X-Test-Role") == "member" {
			return identity.Identity{Subject: "ann", Groups: []string{"ml-vision"}}, nil
		}
		return identity.Identity{Subject: "alice", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
	})
	ctx := t.Context()
	member := e.as("member")
	nlp := servertest.Deref(servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "vllm-inference", Team: "nlp"}))(t).JSON201)
	if s := servertest.Must(member.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t).StatusCode(); s != 201 {
		t.Fatalf("member launch: %d", s)
	}
	list := servertest.Deref(servertest.Must(member.ListWorkloadsWithResponse(ctx, nil))(t).JSON200)
	if len(list.Items) != 1 || list.Items[0].Team != "vision" {
		t.Fatalf("member lists %+v, want only their team's", list.Items)
	}
	own := list.Items[0].Id
	if s := servertest.Must(member.GetWorkloadWithResponse(ctx, nlp.Id))(t).StatusCode(); s != 404 {
		t.Errorf("another team's workload: %d, want 404", s)
	}
	if s := servertest.Must(member.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Team: new("nlp")}))(t).StatusCode(); s != 200 {
		t.Errorf("listing another team: %d", s)
	}
	if s := servertest.Must(member.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "vllm-inference", Team: "nlp"}))(t).StatusCode(); s != 403 {
		t.Errorf("launch in another team: %d, want 403", s)
	}
	gpu := &model.GPUChoice{Class: new("H200-141GB")}
	if s := servertest.Must(member.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "vllm-inference", Team: "vision", Gpu: gpu}))(t).StatusCode(); s != 403 {
		t.Errorf("a GPU class the team may not use: %d, want 403", s)
	}
	if s := servertest.Must(member.StopWorkloadWithResponse(ctx, own))(t).StatusCode(); s != 200 {
		t.Errorf("member stopping their own workload: %d, want 200", s)
	}
}

// statusCoder is what every answer of the typed client has.
type statusCoder interface{ StatusCode() int }

// httpStatus is the status of a plain (not WithResponse) typed call.
type httpStatus int

func (s httpStatus) StatusCode() int { return int(s) }
