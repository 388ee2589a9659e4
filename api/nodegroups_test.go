package api_test

import (
	"net/http"
	"testing"

	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
)

// TestNodeGroups: the node groups of templates/node-groups.yaml as the
// platform team declared them, priced per GPU-hour; without a cluster no
// state is claimed.
func TestNodeGroups(t *testing.T) {
	e := newEnv(t, func(*http.Request) (identity.Identity, error) {
		return identity.Identity{Subject: "pat", Groups: []string{"platform-team"}}, nil
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
	if len(names) != 4 || names[0] != "h100-reserved" || names[1] != "h100-on-demand" {
		t.Fatalf("groups %v, want the file's in its order", names)
	}
	od := r.JSON200.Items[1]
	if od.Class != "H100-80GB" || od.Purchase != "on-demand" || od.Min != 0 || od.Max != 2 || od.GpusPerNode != 8 ||
		od.PricePerNodeHour != 55.2 || od.GpuHourPrice != 6.9 || od.BootTimeSeconds != 180 || od.QuietTimeSeconds != 600 {
		t.Fatalf("h100-on-demand: %+v", od)
	}
}
