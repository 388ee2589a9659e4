package overlay_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/governance"
)

// TestEdits: on the real policy and store, a platform engineer's edits are
// checked as the files are (field paths), stored with who made them, and
// applied; a team-admin is refused; a reset takes an edit back; the
// authorizer with the set laid over answers the edited quota and budget.
func TestEdits(t *testing.T) {
	ctx := context.Background()
	classes, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"model.conf", "roles.csv", "bindings.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../policy", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), data, 0o644)
	}
	files := authz.InDir(dir)
	files.Classes = classes
	az, err := authz.New(files)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, store.SQLite, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	groups, err := nodegroup.LoadFile("../../templates/node-groups.yaml", classes.Names())
	if err != nil {
		t.Fatal(err)
	}
	var applied []overlay.Set
	svc, err := overlay.New(overlay.Options{Store: governance.New(st), Authz: az, Classes: classes, NodeGroups: groups, Fleet: &fleet.Fleet{}, Now: func() time.Time { return time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC) },
		Apply: func(_ context.Context, s overlay.Set) error {
			applied = append(applied, s)
			az.SetOverlay(authz.Overlay{Quotas: s.Quotas, Budgets: s.Budgets})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	pat := identity.With(ctx, identity.Identity{Issuer: "https://idp", Subject: "pat", Groups: []string{"platform-team"}, SecondFactor: true})
	lee := identity.With(ctx, identity.Identity{Issuer: "https://idp", Subject: "lee", Groups: []string{"ml-vision-leads"}})

	for _, tc := range []struct {
		name, kind, key string
		value           any
		field           string // "" : accepted
	}{
		{"a price", overlay.Price, "L4", gpu.Price{OnDemand: 0.9, Spot: 0.4}, ""},
		{"spot above on demand", overlay.Price, "L4", gpu.Price{OnDemand: 0.9, Spot: 2}, "spot"},
		{"no price", overlay.Price, "L4", gpu.Price{}, "onDemand"},
		{"another currency", overlay.Price, "L4", gpu.Price{OnDemand: 1, Currency: "EUR"}, "currency"},
		{"a quota", overlay.Quota, "vision", quota.Quota{GPUs: map[string]float64{"L4": 3}}, ""},
		{"a quota of a class that is not", overlay.Quota, "vision", quota.Quota{GPUs: map[string]float64{"V100": 3}}, "gpus.V100"},
		{"a budget", overlay.Budget, "vision", budget.Budget{Amount: 777, AtLimit: budget.Block}, ""},
		{"a budget of nothing", overlay.Budget, "vision", budget.Budget{Amount: 0}, "amount"},
		{"a node group's max and price", overlay.NodeGroup, "h100-on-demand", nodegroup.Change{Max: ptr(4), PricePerNodeHour: ptr(60.0)}, ""},
		{"a reserved group's max", overlay.NodeGroup, "h100-reserved", nodegroup.Change{Max: ptr(2)}, "max"},
		{"no machines", overlay.NodeGroup, "h100-spot", nodegroup.Change{Max: ptr(0)}, "max"},
		{"a quiet time of nothing", overlay.NodeGroup, "h100-spot", nodegroup.Change{QuietTimeSeconds: ptr(0)}, "quietTimeSeconds"},
		{"warm a reserved group", overlay.NodeGroup, "h100-reserved", nodegroup.Change{WarmPerDay: ptr(10.0)}, "warmPerDay"},
		{"a negative price", overlay.NodeGroup, "h100-spot", nodegroup.Change{PricePerNodeHour: ptr(-1.0)}, "pricePerNodeHour"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.Put(pat, tc.kind, tc.key, tc.value)
			var inv *fault.Invalid
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.field != "" && (!errors.As(err, &inv) || inv.Fields[0].Path != tc.field):
				t.Fatalf("%v, want a problem at %s", err, tc.field)
			}
		})
	}
	if _, err := svc.Put(pat, overlay.Price, "V100", gpu.Price{OnDemand: 1}); err == nil {
		t.Error("a price of a class that is not: accepted")
	}
	var missing *fault.NotFound
	if _, err := svc.Put(pat, overlay.NodeGroup, "a100-nowhere", nodegroup.Change{Max: ptr(1)}); !errors.As(err, &missing) {
		t.Errorf("a node group that is not: %v", err)
	}
	var forbidden *fault.Forbidden
	if _, err := svc.Put(lee, overlay.NodeGroup, "h100-on-demand", nodegroup.Change{Max: ptr(1)}); !errors.As(err, &forbidden) || !strings.Contains(err.Error(), "gpu-classes:write") {
		t.Errorf("a team-admin's node group: %v", err)
	}
	if _, err := svc.Put(lee, overlay.Budget, "vision", budget.Budget{Amount: 1e6}); !errors.As(err, &forbidden) || !strings.Contains(err.Error(), "policy:write") {
		t.Errorf("a team-admin's budget: %v", err)
	}
	set, err := svc.List(pat)
	if err != nil || len(set.Edits) != 4 || set.Prices["L4"].OnDemand != 0.9 || set.Edits[0].By != "https://idp#pat" {
		t.Fatalf("the edits: %+v, %v", set, err)
	}
	// The node group's change laid over the file's groups: what it set
	// replaced, the rest as the file has it.
	live, err := groups.With(set.NodeGroups, classes.Names())
	if err != nil {
		t.Fatal(err)
	}
	file, _ := groups.Get("h100-on-demand")
	if g, _ := live.Get("h100-on-demand"); g.Max != 4 || g.PricePerNodeHour != 60 || g.GPUsPerNode != file.GPUsPerNode || g.WarmPerDay != file.WarmPerDay || g.Boot() != file.Boot() {
		t.Errorf("the group in force: %+v (file: %+v)", g, file)
	}
	if q := az.Policy().Quota("vision"); q.GPUs["L4"] != 3 {
		t.Errorf("the quota in force: %+v", q)
	}
	if b := az.Policy().Budget("vision"); b == nil || b.Amount != 777 {
		t.Errorf("the budget in force: %+v", b)
	}
	if _, err := svc.Reset(pat, overlay.Budget, "vision"); err != nil {
		t.Fatal(err)
	}
	if b := az.Policy().Budget("vision"); b != nil && b.Amount == 777 {
		t.Errorf("after the reset the budget is still the edit's: %+v", b)
	}
	if last := applied[len(applied)-1]; len(last.Edits) != 3 || len(last.Budgets) != 0 {
		t.Errorf("the last set applied: %+v", last)
	}
	// A reload of the policy files keeps the edits laid over them.
	data, _ := os.ReadFile(filepath.Join(dir, "bindings.yaml"))
	os.WriteFile(filepath.Join(dir, "bindings.yaml"), append(data, []byte("# edited in git\n")...), 0o644)
	if err := az.Reload(); err != nil {
		t.Fatal(err)
	}
	if q := az.Policy().Quota("vision"); q.GPUs["L4"] != 3 {
		t.Errorf("the quota after a reload: %+v", q)
	}
}

func ptr[T any](v T) *T { return &v }
