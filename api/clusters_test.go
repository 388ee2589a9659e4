package api_test

import (
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/template"
)

// TestClusters: with a clusters file, GET /api/v1/clusters lists the
// workers with their offers and labels; a worker whose credentials cannot
// be read says so once read; a platform engineer's cordon is in force at
// once and listed among the platform's edits, a team-admin's is refused,
// and an uncordon goes back to the file.
func TestClusters(t *testing.T) {
	pat := identity.Identity{Subject: "pat", Groups: []string{"platform-team"}, SecondFactor: true}
	var who atomic.Pointer[identity.Identity]
	who.Store(&pat)
	g := servertest.WithOverrides(t, server.Overrides{Identify: func(*http.Request) (identity.Identity, error) { return *who.Load(), nil }}, func(c *config.Config) {
		c.ClustersFile = filepath.Join(filepath.Dir(c.GPUClassesFile), "clusters.yaml")
	})
	_, files, err := template.LoadCatalog("../templates")
	if err != nil {
		t.Fatal(err)
	}
	e := envAt(t, g.URL, files, string(g.Config.Database.DSN))
	ctx := t.Context()
	list := servertest.Must(e.api.ListClustersWithResponse(ctx))(t)
	if list.StatusCode() != 200 || len(list.JSON200.Items) != 2 {
		t.Fatalf("%d %s", list.StatusCode(), list.Body)
	}
	// Each team's quota in force, beside the clusters' use.
	if q := list.JSON200.Quotas; q["vision"]["H100-80GB"] != 8 || q["nlp"]["*"] != 4 {
		t.Errorf("quotas %v", q)
	}
	on := list.JSON200.Items[0]
	if on.Name != "onprem-a100" || on.Provider != "on-premises" || on.Cordoned || (*on.Labels)["residency"] != "onprem" ||
		len(on.Offers) != 1 || on.Offers[0].PricePerGPUHour != 1.1 || on.Offers[0].Gpus == nil || *on.Offers[0].Gpus != 16 ||
		on.Images == nil || len(*on.Images) != 1 || (*on.Images)[0] != "registry.gantry.internal" {
		t.Fatalf("onprem-a100: %+v", on)
	}
	// Its CPU nodes for CPU-only launches, at a price per core-hour.
	if c := on.Cpu; c == nil || c.Purchase != "reserved" || c.PricePerCoreHour != 0.02 || c.Cores == nil || *c.Cores != 256 {
		t.Errorf("onprem-a100's CPU nodes: %+v", c)
	}
	put := servertest.Must(e.api.CordonClusterWithResponse(ctx, "cloud-east"))(t)
	if put.StatusCode() != 200 || len(put.JSON200.Items) != 1 || put.JSON200.Items[0].Kind != "cluster" || put.JSON200.Items[0].Key != "cloud-east" {
		t.Fatalf("cordon: %d %s", put.StatusCode(), put.Body)
	}
	if c := servertest.Must(e.api.ListClustersWithResponse(ctx))(t).JSON200.Items[1]; !c.Cordoned {
		t.Fatalf("cloud-east after the cordon: %+v", c)
	}
	if nf := servertest.Must(e.api.CordonClusterWithResponse(ctx, "mars"))(t); nf.StatusCode() != 404 {
		t.Fatalf("a cluster that is not: %d", nf.StatusCode())
	}
	who.Store(&identity.Identity{Subject: "lee", Groups: []string{"ml-vision-leads"}})
	if r := servertest.Must(e.api.CordonClusterWithResponse(ctx, "onprem-a100"))(t); r.StatusCode() != 403 {
		t.Fatalf("a team-admin's cordon: %d", r.StatusCode())
	}
	who.Store(&pat)
	if r := servertest.Must(e.api.UncordonClusterWithResponse(ctx, "cloud-east"))(t); r.StatusCode() != 200 || len(r.JSON200.Items) != 0 {
		t.Fatalf("uncordon: %d %s", r.StatusCode(), r.Body)
	}
	// A quota changed through the API is the one listed, its cores under
	// CPU.
	cores := 24.0
	if r := servertest.Must(e.api.SetTeamQuotaWithResponse(ctx, "vision", model.QuotaRequest{Gpus: &map[string]float64{"H100-80GB": 12}, Cores: &cores}))(t); r.StatusCode() != 200 {
		t.Fatalf("quota: %d %s", r.StatusCode(), r.Body)
	}
	if q := servertest.Must(e.api.ListClustersWithResponse(ctx))(t).JSON200.Quotas; q["vision"]["H100-80GB"] != 12 || q["vision"]["L4"] != 0 || q["vision"]["CPU"] != 24 {
		t.Errorf("quotas after the change: %v", q)
	}
	if q := servertest.Must(e.api.ListClustersWithResponse(ctx))(t).JSON200.Quotas; q["nlp"]["CPU"] != 0 || len(q["nlp"]) != 1 {
		t.Errorf("a team without cores in its quota: %v", q["nlp"])
	}
	if r := servertest.Must(e.api.ResetTeamQuotaWithResponse(ctx, "vision"))(t); r.StatusCode() != 200 {
		t.Fatalf("quota reset: %d %s", r.StatusCode(), r.Body)
	}
	if c := servertest.Must(e.api.ListClustersWithResponse(ctx))(t).JSON200.Items[1]; c.Cordoned {
		t.Fatalf("cloud-east after the uncordon: %+v", c)
	}
}
