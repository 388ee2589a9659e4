package workloads

import (
	"reflect"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/workload"
)

// TestDetachedCopiesEveryReference: a field of workload.Workload that
// refers to memory (a map, a slice, a pointer) is one detached copies, so
// that the row cache and its callers never share it; a new one fails here
// until detached copies it too.
func TestDetachedCopiesEveryReference(t *testing.T) {
	copied := map[string]bool{"Parameters": true, "SpotEvictions": true, "ExitCode": true, "Trial": true, "Deferral": true, "Related": true}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for f := range typ.Fields() {
			name := prefix + f.Name
			switch f.Type.Kind() {
			case reflect.Map, reflect.Slice, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func:
				if !copied[name] {
					t.Errorf("workload.Workload.%s (%s) is shared between the row cache and its callers: copy it in detached", name, f.Type)
				}
			case reflect.Struct:
				if f.Type != reflect.TypeFor[time.Time]() {
					walk(name+".", f.Type)
				}
			}
		}
	}
	walk("", reflect.TypeFor[workload.Workload]())

	code := 3
	w := workload.Workload{ID: "x", Parameters: map[string]string{"a": "1"}, SpotEvictions: []string{"e"}, ExitCode: &code, Trial: &workload.Trial{ID: "t", Steps: 10},
		Deferral: &workload.Deferral{ReleasedBy: "forecast"}, Related: &workload.Related{Moves: true}}
	d := detached(w)
	d.Parameters["a"], d.SpotEvictions[0], *d.ExitCode, d.Trial.Steps, d.Deferral.ReleasedBy, d.Related.Moves = "2", "f", 4, 20, "x", false
	if w.Parameters["a"] != "1" || w.SpotEvictions[0] != "e" || *w.ExitCode != 3 || w.Trial.Steps != 10 || w.Deferral.ReleasedBy != "forecast" || !w.Related.Moves {
		t.Fatalf("a change to the copy reached the original: %+v", w)
	}
}

// TestRowCacheBounds: the cache holds at most its bound, answers a row only
// at the version it was kept at, and never trades a later version for an
// earlier one.
func TestRowCacheBounds(t *testing.T) {
	c := newRowCache(2)
	for i, id := range []string{"a", "b", "c"} {
		c.put(workload.Workload{ID: id}, int64(i))
	}
	if len(c.rows) != 2 {
		t.Fatalf("%d rows kept, bound 2", len(c.rows))
	}
	c.put(workload.Workload{ID: "c", Reason: "new"}, 5)
	c.put(workload.Workload{ID: "c", Reason: "old"}, 4)
	if w, ok := c.getAll([]string{"c"}, []int64{5}); !ok[0] || w[0].Reason != "new" {
		t.Fatalf("at version 5: %+v %v", w, ok)
	}
	if _, ok := c.getAll([]string{"c"}, []int64{4}); ok[0] {
		t.Fatal("answered a row at a version it does not hold")
	}
}
