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

// TestNodeGroupEdits: a platform engineer's change of a node group is in
// force at once (GET /api/v1/node-groups), listed among the platform's
// edits, refused with the field's path where it does not hold, and gone on
// reset.
func TestNodeGroupEdits(t *testing.T) {
	e := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{Subject: "pat", Groups: []string{"platform-team"}, SecondFactor: true}, nil
	})
	ctx := t.Context()
	group := func() model.NodeGroup {
		r := servertest.Must(e.api.ListNodeGroupsWithResponse(ctx))(t)
		for _, g := range r.JSON200.Items {
			if g.Name == "h100-on-demand" {
				return g
			}
		}
		t.Fatal("no h100-on-demand")
		return model.NodeGroup{}
	}
	put := servertest.Must(e.api.SetNodeGroupWithResponse(ctx, "h100-on-demand", model.NodeGroupRequest{Max: new(1), PricePerNodeHour: new(48.0), QuietTimeSeconds: new(120)}))(t)
	if put.StatusCode() != 200 || len(put.JSON200.Items) != 1 || put.JSON200.Items[0].Kind != "nodeGroup" || put.JSON200.Items[0].Value["max"] != 1.0 {
		t.Fatalf("put: %d %s", put.StatusCode(), put.Body)
	}
	if g := group(); g.Max != 1 || g.PricePerNodeHour != 48 || g.GpuHourPrice != 6 || g.QuietTimeSeconds != 120 || g.BootTimeSeconds != 180 || g.GpusPerNode != 8 {
		t.Fatalf("in force: %+v", g)
	}
	for _, tc := range []struct {
		name, group string
		body        model.NodeGroupRequest
		status      int
		field       string
	}{
		{"a reserved group's max", "h100-reserved", model.NodeGroupRequest{Max: new(4)}, 422, "max"},
		{"nothing", "h100-spot", model.NodeGroupRequest{}, 422, ""},
		{"a group that is not", "b200-spot", model.NodeGroupRequest{Max: new(4)}, 404, ""},
	} {
		r := servertest.Must(e.api.SetNodeGroupWithResponse(ctx, tc.group, tc.body))(t)
		if r.StatusCode() != tc.status {
			t.Errorf("%s: %d %s", tc.name, r.StatusCode(), r.Body)
			continue
		}
		if p := r.ApplicationproblemJSONDefault; tc.field != "" && (p == nil || p.Errors == nil || (*p.Errors)[0].Field != tc.field) {
			t.Errorf("%s: %s, want a problem at %s", tc.name, r.Body, tc.field)
		}
	}
	if g := group(); g.Max != 1 {
		t.Fatalf("a refused change changed the group: %+v", g)
	}
	reset := servertest.Must(e.api.ResetNodeGroupWithResponse(ctx, "h100-on-demand"))(t)
	if reset.StatusCode() != 200 || len(reset.JSON200.Items) != 0 {
		t.Fatalf("reset: %d %s", reset.StatusCode(), reset.Body)
	}
	if g := group(); g.Max != 2 || g.PricePerNodeHour != 55.2 || g.QuietTimeSeconds != 600 {
		t.Fatalf("after the reset: %+v", g)
	}
}
