package api_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/template"
)

// TestCarbonForecast: on a server with a static carbon profile whose grid
// is dirty this hour and the next and clean after, the forecast endpoint
// chooses the start after next; a launch of the flexible batch-inference
// template is held until then (Queued, not applied, start offered), and
// POST /start releases it at once.
func TestCarbonForecast(t *testing.T) {
	now := time.Now().UTC()
	var day []string
	for h := range 24 {
		v := "100"
		if h == now.Hour() || h == (now.Hour()+1)%24 {
			v = "400"
		}
		day = append(day, v)
	}
	profiles := filepath.Join(t.TempDir(), "carbon.yaml")
	if err := os.WriteFile(profiles, []byte("apiVersion: gantry.dev/v1\nkind: CarbonProfiles\nsites:\n  eu-west: ["+strings.Join(day, ", ")+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, files, err := template.LoadCatalog("../templates")
	if err != nil {
		t.Fatal(err)
	}
	g := servertest.WithOverrides(t, server.Overrides{Identify: alice}, func(c *config.Config) {
		c.Energy.CarbonProfiles, c.Energy.Location = profiles, "eu-west"
	})
	e := envAt(t, g.URL, files, string(g.Config.Database.DSN))
	ctx := context.Background()

	f := servertest.Must(e.api.GetCarbonForecastWithResponse(ctx, &model.GetCarbonForecastParams{Within: new("8h"), Runtime: new("1h")}))(t).JSON200
	next2 := now.Truncate(time.Hour).Add(2 * time.Hour)
	if f == nil || f.Location != "eu-west" || !strings.Contains(f.Source, "carbon.yaml") || len(f.Hours) < 9 || !f.Best.Wait || !f.Best.Start.Equal(next2) || f.Best.AtStart != 100 {
		t.Fatalf("forecast %+v, want the start at %s", f, next2)
	}
	if r := servertest.Must(e.api.GetCarbonForecastWithResponse(ctx, &model.GetCarbonForecastParams{Within: new("9d")}))(t); r.StatusCode() != 422 {
		t.Errorf("within 9d: %d", r.StatusCode())
	}

	launch := model.LaunchRequest{Template: "batch-inference", Team: "vision", Parameters: &model.Parameters{"input": "p.jsonl"}}
	w := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, launch))(t).JSON201
	if w == nil || w.Status != model.Queued || w.Applied || w.Deferral == nil || w.Deferral.Until == nil || !w.Deferral.Until.Equal(next2) {
		t.Fatalf("launched %+v, want Queued and held until %s", w, next2)
	}
	if !strings.HasPrefix(servertest.Deref(w.Reason), "waiting for cleaner power: forecast minimum "+next2.Format("15:04")) || w.Warnings != nil {
		t.Errorf("reason %q, warnings %v", servertest.Deref(w.Reason), w.Warnings)
	}
	if !hasAction(w.Actions, model.WorkloadActionsStart) {
		t.Errorf("actions %v, want start (now)", w.Actions)
	}
	started := servertest.Must(e.api.StartWorkloadWithResponse(ctx, w.Id))(t).JSON200
	if started == nil || started.Deferral == nil || started.Deferral.Until != nil || servertest.Deref(started.Deferral.ReleasedBy) == "" || started.Deferral.Released == nil {
		t.Fatalf("started now: %+v", started)
	}
	// Refused where the template is not flexible, naming the field.
	bad := model.LaunchRequest{Template: "pytorch-train", Team: "vision", MaxDelay: new("1h")}
	if r := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, bad))(t); r.StatusCode() != 422 || !strings.Contains(string(r.Body), "maxDelay") {
		t.Errorf("maxDelay on pytorch-train: %d %s", r.StatusCode(), r.Body)
	}
}

func hasAction(acts *[]model.WorkloadActions, a model.WorkloadActions) bool {
	if acts == nil {
		return false
	}
	for _, x := range *acts {
		if x == a {
			return true
		}
	}
	return false
}
