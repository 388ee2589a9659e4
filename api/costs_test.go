package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
)

// TestCosts: showback answers JSON by default and CSV on request (a header
// line and one line per group), and names a bad period's field.
func TestCosts(t *testing.T) {
	e := newEnv(t, alice)
	ctx := t.Context()
	r := servertest.Must(e.api.GetCostsWithResponse(ctx, &model.GetCostsParams{GroupBy: new(model.GetCostsParamsGroupByTemplate)}))(t)
	if c := servertest.Deref(r.JSON200); r.StatusCode() != 200 || c.GroupBy != "template" || c.Currency != "USD" || c.Items == nil {
		t.Fatalf("costs: %d %s", r.StatusCode(), r.Body)
	}
	// A platform admin sees the reserved node group's cost, charged to no
	// team; a team member does not.
	if c := servertest.Deref(r.JSON200); c.Reserved == nil || len(*c.Reserved) != 1 || (*c.Reserved)[0].NodeGroup != "h100-reserved" ||
		(*c.Reserved)[0].Nodes != 1 || (*c.Reserved)[0].GpuClass != "H100-80GB" || c.PlatformIdle == nil || *c.PlatformIdle != (*c.Reserved)[0].Idle {
		t.Fatalf("reserved: %s", r.Body)
	}
	member := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{Issuer: "https://idp", Subject: "ann", Groups: []string{"ml-vision"}}, nil
	})
	m := servertest.Must(member.api.GetCostsWithResponse(ctx, &model.GetCostsParams{GroupBy: new(model.GetCostsParamsGroupByNodeGroup)}))(t)
	if c := servertest.Deref(m.JSON200); m.StatusCode() != 200 || c.GroupBy != "nodeGroup" || c.Reserved != nil || c.PlatformIdle != nil ||
		c.KgCO2e != nil || c.CarbonSource != nil { // no carbon source: no carbon figures
		t.Fatalf("a team member's costs: %d %s", m.StatusCode(), m.Body)
	}
	csv := servertest.Must(e.api.GetCostsWithResponse(ctx, &model.GetCostsParams{Format: new(model.Csv), GroupBy: new(model.GetCostsParamsGroupByGpuClass)}))(t)
	if csv.StatusCode() != 200 || !strings.HasPrefix(csv.ContentType(), "text/csv") || !strings.HasPrefix(string(csv.Body), "gpuClass,cost_usd,used_usd,idle_usd,unmeasured_usd,gpu_hours,workloads,kwh,facility_kwh\n") {
		t.Fatalf("csv: %d %s %q", csv.StatusCode(), csv.ContentType(), csv.Body)
	}
	// A team's month: the report's shape, and a month that is not one.
	rep := servertest.Must(e.api.GetTeamReportWithResponse(ctx, "vision", &model.GetTeamReportParams{Month: new("2026-11")}))(t)
	if m := servertest.Deref(rep.JSON200); rep.StatusCode() != 200 || m.Team != "vision" || m.Month != "2026-11" || m.ByUser == nil || m.Alerts == nil {
		t.Fatalf("report: %d %s", rep.StatusCode(), rep.Body)
	}
	if bad := servertest.Must(e.api.GetTeamReportWithResponse(ctx, "vision", &model.GetTeamReportParams{Month: new("2026-13")}))(t); bad.StatusCode() != 422 && bad.StatusCode() != 400 {
		t.Fatalf("month 13: %d %s", bad.StatusCode(), bad.Body)
	}
	// A team's settings: within the templates' limits, or refused by field.
	put := model.TeamSettingsRequest{Templates: map[string]model.TemplateOverride{
		"jupyter-notebook": {IdleTimeout: new("6h")}, "dev-environment": {Sleep: new("weekdays 19:00-07:00 Europe/Paris")}}}
	set := servertest.Must(e.api.PutTeamSettingsWithResponse(ctx, "vision", nil, put))(t)
	if s := servertest.Deref(set.JSON200); set.StatusCode() != 200 || servertest.Deref(s.Templates["jupyter-notebook"].IdleTimeout) != "6h" || servertest.Deref(s.UpdatedBy) == "" {
		t.Fatalf("settings: %d %s", set.StatusCode(), set.Body)
	}
	got := servertest.Must(e.api.GetTeamSettingsWithResponse(ctx, "vision"))(t)
	if s := servertest.Deref(got.JSON200); got.StatusCode() != 200 || servertest.Deref(s.Templates["dev-environment"].Sleep) != "weekdays 19:00-07:00 Europe/Paris" {
		t.Fatalf("settings read back: %d %s", got.StatusCode(), got.Body)
	}
	// Versions: the ETag of a read makes a change conditional (If-Match);
	// a change from an older version is refused with 412, and writes
	// nothing.
	tag := servertest.Deref(servertest.Deref(got.Headers200).ETag)
	if tag != `"v1"` {
		t.Fatalf("the settings' ETag: %q, want \"v1\"", tag)
	}
	cond := func(ifMatch string, idle string) *client.PutTeamSettingsResponse {
		req := model.TeamSettingsRequest{Templates: map[string]model.TemplateOverride{"jupyter-notebook": {IdleTimeout: &idle}}}
		return servertest.Must(e.api.PutTeamSettingsWithResponse(ctx, "vision", &model.PutTeamSettingsParams{IfMatch: &ifMatch}, req))(t)
	}
	if r := cond(tag, "5h"); r.StatusCode() != 200 || r.HTTPResponse.Header.Get("ETag") != `"v2"` || servertest.Deref(servertest.Deref(r.Headers200).ETag) != `"v2"` {
		t.Fatalf("a change from the current version: %d %q", r.StatusCode(), r.HTTPResponse.Header.Get("ETag"))
	}
	if r := cond(tag, "4h"); r.StatusCode() != 412 || r.ApplicationproblemJSON412 == nil {
		t.Fatalf("a change from the version before: %d %s, want 412", r.StatusCode(), r.Body)
	}
	if r := cond("not-a-tag", "4h"); r.StatusCode() != 422 {
		t.Fatalf("If-Match that is no ETag: %d, want 422", r.StatusCode())
	}
	got = servertest.Must(e.api.GetTeamSettingsWithResponse(ctx, "vision"))(t)
	if s := servertest.Deref(got.JSON200); got.StatusCode() != 200 || servertest.Deref(s.Templates["jupyter-notebook"].IdleTimeout) != "5h" {
		t.Fatalf("after a refused change: %d %s", got.StatusCode(), got.Body)
	}
	put = model.TeamSettingsRequest{Templates: map[string]model.TemplateOverride{
		"jupyter-notebook": {IdleTimeout: new("72h")}, "pytorch-train": {Sleep: new("daily 19:00-07:00 UTC")}}}
	refused := servertest.Must(e.api.PutTeamSettingsWithResponse(ctx, "vision", nil, put))(t)
	if p := problemOf(refused.ApplicationproblemJSONDefault); refused.StatusCode() != 422 || len(p.Errors) != 2 ||
		p.Errors[0].Field != "templates.jupyter-notebook.idleTimeout" || p.Errors[1].Field != "templates.pytorch-train.sleep" {
		t.Fatalf("settings past the limits: %d %s", refused.StatusCode(), refused.Body)
	}
	from, to := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r = servertest.Must(e.api.GetCostsWithResponse(ctx, &model.GetCostsParams{From: &from, To: &to}))(t)
	if p := problemOf(r.ApplicationproblemJSONDefault); r.StatusCode() != 422 || len(p.Errors) == 0 || p.Errors[0].Field != "from" {
		t.Fatalf("a period ending before it starts: %d %s", r.StatusCode(), r.Body)
	}
}
