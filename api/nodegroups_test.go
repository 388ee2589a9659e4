package api_test

import (
	"net/http"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
)

// TestNodeGroups: the node groups of templates/node-groups.yaml as the
// platform team declared them, priced per GPU-hour; without a cluster no
// state is claimed.
func TestNodeGroups(t *testing.T) {
	e := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{Subject: "pat", Groups: []string{"platform-team"}, SecondFactor: true}, nil
	})
	r := servertest.Must(e.api.ListNodeGroupsWithResponse(t.Context()))(t)
	if r.StatusCode() != 200 {
		t.Fatalf("%d %s", r.StatusCode(), r.Body)
	}
	var names []string
	for _, g := range r.JSON200.Items {
		names = append(names, g.Name)
		if g.State != nil {
			t.Errorf("%s: a state without a cluster: %+v", g.Name, g.State)
		}
	}
	if len(names) != 3 || names[0] != "h100-reserved" || names[1] != "h100-on-demand" || names[2] != "h100-spot" {
		t.Fatalf("groups %v, want the file's in its order", names)
	}
	od := r.JSON200.Items[1]
	if od.Class != "H100-80GB" || od.Purchase != "on-demand" || od.Min != 0 || od.Max != 2 || od.GpusPerNode != 8 ||
		od.PricePerNodeHour != 55.2 || od.GpuHourPrice != 6.9 || od.BootTimeSeconds != 180 || od.QuietTimeSeconds != 600 ||
		od.WarmPerDay == nil || *od.WarmPerDay != 100 || r.JSON200.Items[0].WarmPerDay != nil {
		t.Fatalf("h100-on-demand: %+v", od)
	}
}

// TestCapacityForecastAndReserved: the forecast of a class from the
// launches Gantry recorded (a running one is wanted now and ahead), its
// parameters checked; the reserved-size advice refuses a class without
// launches.
func TestCapacityForecastAndReserved(t *testing.T) {
	e := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{Subject: "ada", Groups: []string{"gantry-admins"}, SecondFactor: true}, nil
	})
	ctx := t.Context()
	r := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "pytorch-train", Team: "vision", Gpu: &model.GPUChoice{Class: new("H100-80GB"), Count: new(4)}}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d %s", r.StatusCode(), r.Body)
	}
	f := servertest.Must(e.api.GetCapacityForecastWithResponse(ctx, &model.GetCapacityForecastParams{Class: "H100-80GB", HorizonMinutes: new(60), StepMinutes: new(15)}))(t)
	if f.StatusCode() != 200 {
		t.Fatalf("forecast: %d %s", f.StatusCode(), f.Body)
	}
	if fc := f.JSON200; fc.Now != 4 || fc.Launches != 1 || fc.StepMinutes != 15 || len(fc.Points) != 4 || fc.Points[3].Gpus < 0 || fc.Points[3].Hi < fc.Points[3].Lo {
		t.Fatalf("forecast %+v", fc)
	}
	bad := servertest.Must(e.api.GetCapacityForecastWithResponse(ctx, &model.GetCapacityForecastParams{Class: "H100-80GB", HorizonMinutes: new(720), StepMinutes: new(1)}))(t)
	if p := bad.ApplicationproblemJSONDefault; bad.StatusCode() != 422 || p == nil || p.Errors == nil || len(*p.Errors) != 1 || (*p.Errors)[0].Field != "horizon" {
		t.Fatalf("720 steps: %d %s", bad.StatusCode(), bad.Body)
	}
	if nf := servertest.Must(e.api.GetCapacityForecastWithResponse(ctx, &model.GetCapacityForecastParams{Class: "B200"}))(t); nf.StatusCode() != 404 {
		t.Fatalf("an unknown class: %d", nf.StatusCode())
	}
	if rs := servertest.Must(e.api.GetReservedAdviceWithResponse(ctx, &model.GetReservedAdviceParams{Class: "H200-141GB"}))(t); rs.StatusCode() != 422 {
		t.Fatalf("reserved advice without launches: %d %s", rs.StatusCode(), rs.Body)
	}
}
