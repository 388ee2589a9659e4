package api

import (
	"bytes"
	"fmt"
	"math"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/workload"
)

// filled sets every field of v (a pointer), however deep, to a value that is
// not empty, so that a member the hand-written encoder leaves out shows. A
// kind it does not know fails the test: a new field needs a look.
func filled(t *testing.T, v reflect.Value, seed int) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		filled(t, v.Elem(), seed)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 2, 9, 30, seed%60, seed*1000+7, time.UTC)))
			return
		}
		for i := range v.NumField() {
			filled(t, v.Field(i), seed*31+i)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("%s-%d", v.Type().Name(), seed))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(seed))
	case reflect.Float64:
		v.SetFloat(float64(seed) / 7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			filled(t, v.Index(i), seed+i)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for i := range 3 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			filled(t, k, seed+10-i)
			filled(t, e, seed+i)
			v.SetMapIndex(k, e)
		}
	default:
		t.Fatalf("filled: a field of kind %s: teach this test and workloadjson.go about it", v.Kind())
	}
}

// sameAsGenerated checks that the hand-written answers are byte for byte
// what the generated ones (encoding/json) write.
func sameAsGenerated(t *testing.T, what string, ws ...model.Workload) {
	t.Helper()
	next := "cursor-<&>"
	page := model.WorkloadList{Items: ws, NextCursor: &next}
	want, got := httptest.NewRecorder(), httptest.NewRecorder()
	if err := gen.ListWorkloads200JSONResponse(page).VisitListWorkloadsResponse(want); err != nil {
		t.Fatal(err)
	}
	if err := workloadPage(page).VisitListWorkloadsResponse(got); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) || got.Code != want.Code || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
		t.Fatalf("%s: a page differs from encoding/json's:\n got %d %s\nwant %d %s", what, got.Code, got.Body, want.Code, want.Body)
	}
	for _, w := range ws {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		if err := gen.GetWorkload200JSONResponse(w).VisitGetWorkloadResponse(want); err != nil {
			t.Fatal(err)
		}
		if err := workloadOne(w).VisitGetWorkloadResponse(got); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Fatalf("%s: a workload differs from encoding/json's:\n got %s\nwant %s", what, got.Body, want.Body)
		}
	}
}

func TestWorkloadJSON(t *testing.T) {
	var full model.Workload
	filled(t, reflect.ValueOf(&full).Elem(), 1)
	empty := model.Workload{}
	nilSlices := model.Workload{Actions: new([]model.WorkloadActions(nil)), Warnings: new([]string(nil)), Approval: &model.Approval{}}
	odd := full
	odd.Name = "<script>\"é\"\u2028\x01\xff&"
	odd.Parameters = map[string]string{"b": "2", "a": "1\n", "ä": "\t"}
	odd.CostSoFar, odd.PricePerHour, odd.RanSeconds = 1e-7, 1e21, -0.000001
	odd.CreatedAt = time.Date(2026, 12, 2, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	zero := full
	zero.UpdatedAt = time.Time{}
	zero.CostSoFar = math.Copysign(0, -1)
	for name, ws := range map[string][]model.Workload{
		"every field set":                 {full},
		"every field empty":               {empty},
		"nil slices behind a set pointer": {nilSlices},
		"odd strings, numbers and zones":  {odd, zero},
		"a page of several":               {full, empty, odd},
		"no items":                        nil,
	} {
		t.Run(name, func(t *testing.T) { sameAsGenerated(t, name, ws...) })
	}
}

func TestWorkloadJSONRefusesWhatJSONCannotHold(t *testing.T) {
	for _, w := range []model.Workload{
		{CostSoFar: math.NaN()},
		{RanSeconds: math.Inf(1)},
		{CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		rec := httptest.NewRecorder()
		err := workloadPage(model.WorkloadList{Items: []model.Workload{w}}).VisitListWorkloadsResponse(rec)
		if err == nil || rec.Body.Len() != 0 || !strings.Contains(err.Error(), "encode a workload") {
			t.Fatalf("%+v: err %v, wrote %q; want an error and nothing written", w, err, rec.Body)
		}
	}
}

func FuzzWorkloadJSON(f *testing.F) {
	f.Add("x-abc", "k", "v", 1.25, int64(0))
	f.Add("<&>\u2028", "\xff", "\"\\", 1e-9, int64(123456789))
	f.Fuzz(func(t *testing.T, name, key, value string, cost float64, nanos int64) {
		if math.IsNaN(cost) || math.IsInf(cost, 0) {
			return // refused, as encoding/json refuses it (tested above)
		}
		w := model.Workload{Name: name, Parameters: map[string]string{key: value, value: key}, CostSoFar: cost, Reason: &value,
			CreatedAt: time.Unix(0, nanos%(1<<62)).UTC(), Actions: &[]model.WorkloadActions{model.WorkloadActions(key)}}
		sameAsGenerated(t, "fuzzed", w)
	})
}

// TestActionsBeyondTheStatus: the API offers what a workload allows beyond
// its status's row — stop (withdraw) for a start waiting for approval, not
// for a launch waiting for one; start now for a launch held for cleaner
// power — as Workload.Actions says.
func TestActionsBeyondTheStatus(t *testing.T) {
	s := &server{o: Options{Now: func() time.Time { return time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC) }}}
	has := func(w workload.Workload, a model.WorkloadActions) bool {
		out := s.workloadOut(w)
		return out.Actions != nil && slices.Contains(*out.Actions, a)
	}
	start := workload.Workload{ID: "w1", Status: workload.PendingApproval, Approval: workload.Approval{Why: "over budget", Restart: true}}
	launch := workload.Workload{ID: "w2", Status: workload.PendingApproval, Approval: workload.Approval{Why: "over the ceiling"}}
	held := workload.Workload{ID: "w3", Status: workload.Queued, Deferral: &workload.Deferral{Until: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}}
	if !has(start, model.WorkloadActionsStop) || !has(start, model.WorkloadActionsDelete) {
		t.Errorf("a start waiting for approval: %v, want stop and delete", *s.workloadOut(start).Actions)
	}
	if has(launch, model.WorkloadActionsStop) || !has(launch, model.WorkloadActionsApprove) {
		t.Errorf("a launch waiting for approval: %v, want approve and no stop", *s.workloadOut(launch).Actions)
	}
	if !has(held, model.WorkloadActionsStart) {
		t.Errorf("a launch held for cleaner power: %v, want start", *s.workloadOut(held).Actions)
	}
}
