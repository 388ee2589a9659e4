package nodegroup

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// TestWith: changes lay over the file's groups field by field; a change
// that no longer holds is left out and named under its group; Replace puts
// the result in force for every holder of the Set.
func TestWith(t *testing.T) {
	file, err := New(File{APIVersion: APIVersion, Kind: Kind, Groups: []Group{
		{Name: "l4", Class: "L4", Purchase: OnDemand, GPUsPerNode: 4, Max: 2, PricePerNodeHour: 4},
		{Name: "l4-reserved", Class: "L4", Purchase: Reserved, GPUsPerNode: 4, Min: 1, Max: 1, PricePerNodeHour: 3},
	}}, classes)
	if err != nil {
		t.Fatal(err)
	}
	held := &Set{}
	held.Replace(file)
	five, quiet, price := 5, 120, 6.0
	live, err := file.With(map[string]Change{
		"l4":          {Max: &five, QuietTimeSeconds: &quiet, PricePerNodeHour: &price},
		"l4-reserved": {Max: &five}, // no longer allowed: left out
		"gone":        {Max: &five},
	}, classes)
	var inv *fault.Invalid
	if !errors.As(err, &inv) || len(inv.Fields) != 2 || inv.Fields[0].Path != "gone" || inv.Fields[1].Path != "l4-reserved.max" {
		t.Fatalf("the changes left out: %v", err)
	}
	held.Replace(live)
	g, _ := held.Get("l4")
	if g.Max != 5 || g.Quiet() != 2*time.Minute || g.GPUHourPrice() != 1.5 || g.Boot() != DefaultBootTime || g.MaxGPUs() != 20 {
		t.Errorf("l4 in force: %+v", g)
	}
	if r, _ := held.Get("l4-reserved"); r.Max != 1 {
		t.Errorf("l4-reserved in force: %+v", r)
	}
	if g, _ := file.Get("l4"); g.Max != 2 {
		t.Errorf("the file's group changed: %+v", g)
	}
	if _, err := file.Changed("l4", Change{}, classes); err == nil || !strings.Contains(err.Error(), "nothing to change") {
		t.Errorf("an empty change: %v", err)
	}
}
