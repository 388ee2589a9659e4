package workload_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// dayProfile is a site whose grid is dirty by day (09:00–17:59 UTC, 400
// gCO2e/kWh) and clean by night (100).
func dayProfile(t *testing.T) *carbon.Profiles {
	t.Helper()
	var vs []string
	for h := range 24 {
		v := "100"
		if h >= 9 && h <= 17 {
			v = "400"
		}
		vs = append(vs, v)
	}
	p, err := carbon.ParseProfiles("carbon.yaml", []byte("apiVersion: gantry.dev/v1\nkind: CarbonProfiles\nsites:\n  eu-west: ["+strings.Join(vs, ", ")+"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// failing is a forecaster that does not answer.
type failing struct{}

func (failing) Name() string { return "down" }
func (failing) Forecast(context.Context, string, time.Time, time.Time) (map[time.Time]float64, error) {
	return nil, &fault.Unavailable{What: "carbon", Err: errors.New("connection refused")}
}

func batch(opts ...func(*workload.Request)) workload.Request {
	r := workload.Request{Template: "batch-inference", Team: "vision", Choice: template.Choice{Params: map[string]any{"input": "p.jsonl"}}}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// TestDeferral: a flexible job launched at 09:00 on a grid that is clean
// at night is held (Queued, not on the cluster) until the start whose
// 12-hour run is cleanest within its 8-hour max delay, released then and
// applied; a shorter max delay or a deadline moves that start earlier;
// 0s, a forecast that does not answer or a template that is not flexible
// start it at once; its owner can start it now, and a stop ends the hold.
func TestDeferral(t *testing.T) {
	profiles := dayProfile(t)
	h := newHarnessWith(t, nil, false, func(o *workload.Options) {
		o.Carbon, o.Forecast, o.Location = profiles, profiles, func(string) string { return "eu-west" }
	})
	ctx := asAlice()
	t0 := h.clock() // 09:00 UTC
	w, _, err := h.svc.Create(ctx, "alice", batch())
	if err != nil {
		t.Fatal(err)
	}
	// A 12 h run (its maxRuntime) started at 09:00 sees nine dirty hours
	// (325 on average); started at 17:00, the latest its 8 h allow, one
	// (125): −62 %.
	d := w.Deferral
	if w.Status != workload.Queued || !d.Holding() || !d.Until.Equal(t0.Add(8*time.Hour)) || w.Applied() {
		t.Fatalf("launched %s (%q), deferral %+v, applied %v; want Queued until 17:00, not applied", w.Status, w.Reason, d, w.Applied())
	}
	if d.AtOnce != 325 || d.AtStart != 125 || d.Runtime != 12*time.Hour || d.Location != "eu-west" || !strings.Contains(d.Source, "carbon.yaml") {
		t.Errorf("plan %+v", d)
	}
	if want := "waiting for cleaner power: forecast minimum 17:00–05:00 UTC, −62 % gCO2/kWh"; !strings.HasPrefix(w.Reason, want) || !strings.Contains(w.Reason, "starts by Nov 30 17:00 UTC at the latest") {
		t.Errorf("reason %q, want it to start %q", w.Reason, want)
	}
	if acts := w.Actions(); !containsAct(acts, workload.ActStart) || !containsAct(acts, workload.ActStop) {
		t.Errorf("actions %v, want start (now) and stop", acts)
	}
	if _, ok := h.cluster.Object(w.ID); ok {
		t.Fatal("a held launch is on the cluster")
	}
	// The reconciler leaves it alone; the release waits for its time.
	if n, err := h.svc.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("reconcile applied %d, %v", n, err)
	}
	h.advance(8*time.Hour - time.Second)
	if n, err := h.svc.ReleaseDeferred(ctx); err != nil || n != 0 {
		t.Fatalf("released %d before its time, %v", n, err)
	}
	h.advance(time.Second)
	if n, err := h.svc.ReleaseDeferred(ctx); err != nil || n != 1 {
		t.Fatalf("released %d at its time, %v", n, err)
	}
	got := h.status(t, w.ID)
	if !got.Applied() || got.Status != workload.Queued || got.Deferral.Holding() || got.Deferral.ReleasedBy != "forecast" || !got.Deferral.Released.Equal(h.clock()) {
		t.Fatalf("released: %s %q applied %v, deferral %+v", got.Status, got.Reason, got.Applied(), got.Deferral)
	}
	if _, ok := h.cluster.Object(w.ID); !ok {
		t.Fatal("released but not on the cluster")
	}
	if n, _ := h.svc.ReleaseDeferred(ctx); n != 0 {
		t.Errorf("released again: %d", n)
	}

	// A shorter max delay, a deadline: earlier starts. 0s: at once.
	h.advance(16 * time.Hour) // 09:00 the next day
	now := h.clock()
	for _, tc := range []struct {
		name  string
		req   workload.Request
		until time.Time // zero: at once
	}{
		{"max delay 2h", batch(func(r *workload.Request) { d := 2 * time.Hour; r.Flexible.MaxDelay = &d }), now.Add(2 * time.Hour)},
		{"a deadline 15h away: starts by 12:00", batch(func(r *workload.Request) { r.Flexible.Deadline = now.Add(15 * time.Hour) }), now.Add(3 * time.Hour)},
		{"a deadline that leaves no room", batch(func(r *workload.Request) { r.Flexible.Deadline = now.Add(11 * time.Hour) }), time.Time{}},
		{"max delay 0s", batch(func(r *workload.Request) { var d time.Duration; r.Flexible.MaxDelay = &d }), time.Time{}},
	} {
		w, _, err := h.svc.Create(ctx, "alice", tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		switch {
		case tc.until.IsZero() && (w.Deferral != nil || w.Status != workload.Pending || !w.Applied()):
			t.Errorf("%s: %s, deferral %+v; want Pending at once", tc.name, w.Status, w.Deferral)
		case !tc.until.IsZero() && (!w.Deferral.Holding() || !w.Deferral.Until.Equal(tc.until)):
			t.Errorf("%s: deferral %+v, want until %s", tc.name, w.Deferral, tc.until)
		}
	}

	// Its owner starts one now; a stopped one's hold ends, and a start
	// then applies it at once.
	now1, _, _ := h.svc.Create(ctx, "alice", batch())
	got, err = h.svc.Start(ctx, now1.ID)
	if err != nil || got.Deferral.Holding() || !got.Applied() || !strings.Contains(got.Deferral.ReleasedBy, "alice") {
		t.Fatalf("started now: %+v applied %v, %v", got.Deferral, got.Applied(), err)
	}
	stopped, _, _ := h.svc.Create(ctx, "alice", batch())
	if got, err = h.svc.Stop(ctx, stopped.ID); err != nil || got.Status != workload.Stopped || got.Deferral.Holding() {
		t.Fatalf("stopped while held: %s %+v %v", got.Status, got.Deferral, err)
	}
	if _, err = h.svc.Start(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := h.svc.Reconcile(ctx); err != nil || n != 1 || !h.status(t, stopped.ID).Applied() {
		t.Fatalf("started after a stop: reconcile applied %d, %v", n, err)
	}

	// Refusals name the field.
	for _, tc := range []struct {
		req  workload.Request
		want string
	}{
		{workload.Request{Template: "pytorch-train", Team: "vision", Flexible: workload.Flexible{Deadline: now.Add(time.Hour)}}, "deadline: template pytorch-train is not flexible"},
		{batch(func(r *workload.Request) { d := 9 * time.Hour; r.Flexible.MaxDelay = &d }), "maxDelay: 9h0m0s: want 0s (start at once) to the template's 8h"},
		{batch(func(r *workload.Request) { r.Flexible.Deadline = now.Add(-time.Minute) }), "deadline: " + now.Add(-time.Minute).Format(time.RFC3339) + " is not in the future"},
	} {
		var inv *fault.Invalid
		if _, _, err := h.svc.Create(ctx, "alice", tc.req); !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}

	// A forecast that does not answer never holds a launch.
	down := newHarnessWith(t, nil, false, func(o *workload.Options) { o.Forecast = failing{} })
	if w, _, err := down.svc.Create(ctx, "alice", batch()); err != nil || w.Deferral != nil || !w.Applied() {
		t.Errorf("with the forecast down: %+v applied %v, %v", w.Deferral, w.Applied(), err)
	}
}

func containsAct(acts []workload.Action, a workload.Action) bool {
	for _, x := range acts {
		if x == a {
			return true
		}
	}
	return false
}

// TestDeferralSaving: showback reports what a held job saved against
// starting at once — its energy hour by hour moved back by how long it was
// held, at the intensities the source gave for those hours.
func TestDeferralSaving(t *testing.T) {
	profiles := dayProfile(t)
	h := newHarnessWith(t, nil, false, func(o *workload.Options) {
		o.Carbon, o.Forecast, o.Location = profiles, profiles, func(string) string { return "eu-west" }
	})
	ctx := asAlice()
	d := 2 * time.Hour
	w, _, err := h.svc.Create(ctx, "alice", batch(func(r *workload.Request) { r.Flexible.MaxDelay = &d }))
	if err != nil || !w.Deferral.Holding() {
		t.Fatalf("%+v %v", w.Deferral, err)
	}
	// Held until 11:00: with this profile every start by day is alike; the
	// profile's 12 h window from 11:00 has two more clean hours.
	start := w.Deferral.Until
	h.advance(start.Sub(h.clock()))
	if n, err := h.svc.ReleaseDeferred(ctx); err != nil || n != 1 {
		t.Fatalf("released %d, %v", n, err)
	}
	if _, err := h.svc.Report(ctx, w.ID, workload.Running, ""); err != nil {
		t.Fatal(err)
	}
	// It runs 11:00–21:00 at 1 kWh an hour (1000 W): 7 dirty hours and 3
	// clean ones as it ran; started at 09:00 it would have had 9 dirty and 1.
	series := telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-a"}, Workload: w.ID}
	v := telemetry.NoValues()
	v[telemetry.GPUUtil] = 90
	if err := h.telemetry.AppendSamples(context.Background(), []telemetry.Stored{{Series: series, Time: start, Share: 1, Values: v}}); err != nil {
		t.Fatal(err)
	}
	recs, err := h.telemetry.WorkloadSeries(context.Background(), w.ID)
	if err != nil || len(recs) != 1 {
		t.Fatalf("series %v %v", recs, err)
	}
	for i := range 600 {
		b := start.Add(time.Duration(i) * time.Minute)
		if err := h.telemetry.WriteRollups(context.Background(), telemetry.Minute, telemetry.Pending{Bucket: b},
			[]telemetry.Rollup{{Series: recs[0].ID, Bucket: b, N: 6, Avg: v, Max: v, P95: v, Joules: 1000 * 60}}); err != nil {
			t.Fatal(err)
		}
	}
	h.advance(10 * time.Hour)
	if _, err := h.svc.Report(ctx, w.ID, workload.Succeeded, ""); err != nil {
		t.Fatal(err)
	}
	c, err := h.svc.Costs(ctx, start.Add(-12*time.Hour), h.clock(), "team")
	if err != nil {
		t.Fatal(err)
	}
	ran, once := (7*400+3*100)/1000.0, (9*400+1*100)/1000.0
	s := c.Deferred
	if s.Workloads != 1 || s.KgCO2e != ran || s.KgCO2eAtOnce != once || math.Abs(s.SavedKg-(once-ran)) > 1e-9 || s.SavedPercent != math.Round((once-ran)/once*1000)/10 {
		t.Errorf("saving %+v, want %v kg as run against %v at once", s, ran, once)
	}
	if c.KgCO2e != ran {
		t.Errorf("carbon %v kg, want %v", c.KgCO2e, ran)
	}
}

// TestReplan: a held launch is planned again on the forecast as it is
// later: a window the newer forecast puts elsewhere moves there (within
// the latest start fixed at launch, the savings still counted against
// starting at launch); a forecast that does not answer leaves the plan;
// one where starting now is as clean releases it now.
func TestReplan(t *testing.T) {
	f := &regional{by: map[string]func(int) float64{"eu-west": func(h int) float64 { // clean by night
		if h >= 9 && h <= 17 {
			return 400
		}
		return 100
	}}}
	h := newHarnessWith(t, nil, false, func(o *workload.Options) {
		o.Forecast, o.Location = f, func(string) string { return "eu-west" }
	})
	ctx := asAlice()
	t0 := h.clock() // 09:00
	w, _, err := h.svc.Create(ctx, "alice", batch())
	if err != nil || !w.Deferral.Holding() || !w.Deferral.Until.Equal(t0.Add(8*time.Hour)) {
		t.Fatalf("launched: %+v %v", w.Deferral, err)
	}
	atOnce, latest := w.Deferral.AtOnce, w.Deferral.Latest
	// Ten minutes later the forecast sees wind from noon on: its 12-hour
	// run is cleanest from 12:00.
	f.by["eu-west"] = func(h int) float64 {
		if h >= 12 {
			return 50
		}
		return 400
	}
	h.advance(10 * time.Minute)
	if n, err := h.svc.ReleaseDeferred(ctx); err != nil || n != 0 {
		t.Fatalf("released %d, %v", n, err)
	}
	got := h.status(t, w.ID)
	d := got.Deferral
	if !d.Holding() || !d.Until.Equal(t0.Add(3*time.Hour)) || !d.WindowEnd.Equal(t0.Add(15*time.Hour)) || d.AtStart != 50 || d.AtOnce != atOnce ||
		!d.Latest.Equal(latest) || !d.Replanned.Equal(h.clock()) || !strings.Contains(got.Reason, "forecast minimum 12:00–00:00 UTC") || got.Applied() {
		t.Fatalf("after a newer forecast: %+v (%q), applied %v", d, got.Reason, got.Applied())
	}
	// Six minutes later the forecast does not answer: the plan stays, and
	// the pass says why.
	delete(f.by, "eu-west")
	h.advance(6 * time.Minute)
	if n, err := h.svc.ReleaseDeferred(ctx); n != 0 || err == nil {
		t.Fatalf("a forecast down: released %d, %v (want the error said)", n, err)
	}
	if got := h.status(t, w.ID); !got.Deferral.Until.Equal(d.Until) {
		t.Fatalf("a forecast down moved the plan: %+v", got.Deferral)
	}
	// The wind comes early: now is as clean as any start left. Released
	// now, and applied.
	f.by["eu-west"] = func(int) float64 { return 50 }
	h.advance(6 * time.Minute)
	if n, err := h.svc.ReleaseDeferred(ctx); err != nil || n != 1 {
		t.Fatalf("released %d, %v; want it released now", n, err)
	}
	got = h.status(t, w.ID)
	if got.Deferral.Holding() || got.Deferral.ReleasedBy != "forecast" || !got.Applied() {
		t.Fatalf("released: %+v applied %v", got.Deferral, got.Applied())
	}
	if _, ok := h.cluster.Object(w.ID); !ok {
		t.Fatal("released but not on the cluster")
	}
}

// TestDeferralAcrossClusters: with worker clusters a flexible job's
// cluster and hour are chosen together — the cleanest window of the
// cheapest clusters, each on its own region's forecast — and the plan,
// its reason and its Job, released in its window, name the cluster; a
// cluster whose forecast does not answer is left out; a dearer cluster
// wins only where a carbon price pays for it.
func TestDeferralAcrossClusters(t *testing.T) {
	// us-east: 400 all day; eu-west: 400 by day, 100 by night; ap-south:
	// no forecast at all.
	var day []string
	for h := range 24 {
		v := "100"
		if h >= 9 && h <= 17 {
			v = "400"
		}
		day = append(day, v)
	}
	flat := strings.TrimSuffix(strings.Repeat("400, ", 24), ", ")
	profiles, err := carbon.ParseProfiles("carbon.yaml", []byte("apiVersion: gantry.dev/v1\nkind: CarbonProfiles\nsites:\n  eu-west: ["+strings.Join(day, ", ")+"]\n  us-east: ["+flat+"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	sites := []workload.Site{{Cluster: "cloud-east", Location: "us-east", PricePerHour: 10}, {Cluster: "cloud-far", Location: "ap-south", PricePerHour: 10},
		{Cluster: "cloud-west", Location: "eu-west", PricePerHour: 10}}
	var asked []render.Object
	h := newHarnessWith(t, nil, true, func(o *workload.Options) {
		o.Fleet, o.Carbon, o.Forecast = true, profiles, profiles
		o.Sites = func(_ context.Context, objs []render.Object) ([]workload.Site, float64, error) {
			asked = objs
			return sites, 0, nil
		}
	})
	ctx := asAlice()
	t0 := h.clock() // 09:00 UTC
	w, _, err := h.svc.Create(ctx, "alice", batch())
	if err != nil {
		t.Fatal(err)
	}
	d := w.Deferral
	if w.Status != workload.Queued || !d.Holding() || !d.Until.Equal(t0.Add(8*time.Hour)) || d.Cluster != "cloud-west" || d.Location != "eu-west" ||
		d.AtOnce != 325 || d.AtStart != 125 {
		t.Fatalf("launched %s (%q), deferral %+v; want held for cloud-west's night from 17:00", w.Status, w.Reason, d)
	}
	if !strings.HasPrefix(w.Reason, "waiting for cleaner power on cloud-west: forecast minimum 17:00–05:00 UTC, −62 % gCO2/kWh") {
		t.Errorf("reason %q", w.Reason)
	}
	if len(asked) == 0 {
		t.Error("the sites were not asked with the launch's objects")
	}
	h.advance(8 * time.Hour)
	if n, err := h.svc.ReleaseDeferred(ctx); err != nil || n != 1 {
		t.Fatalf("released %d, %v", n, err)
	}
	if got := plannedOn(h.cluster.Applied(w.ID)); got != "cloud-west" {
		t.Errorf("the released Job is planned on %q, want cloud-west", got)
	}
	if got := h.status(t, w.ID); !got.Applied() || got.Deferral.Cluster != "cloud-west" {
		t.Errorf("released: applied %v, deferral %+v", got.Applied(), got.Deferral)
	}

	// A dearer cluster, however clean, is not chosen without a carbon
	// price: the cheaper one is flat, so the launch starts at once there.
	sites[2].PricePerHour = 12
	w, _, err = h.svc.Create(ctx, "alice", batch())
	if err != nil || w.Deferral != nil || !w.Applied() {
		t.Fatalf("cheaper flat cluster: %+v applied %v, %v", w.Deferral, w.Applied(), err)
	}

	// Priced, carbon moves it there: at $1/kg and 1 kWh an hour, a 12-hour
	// run from 18:00 on the dearer cloud-west costs $122 + $1.20 of carbon,
	// at once on cloud-east $120 + $4.80.
	priced := func(carbonPrice float64) *harness {
		return newHarnessWith(t, nil, true, func(o *workload.Options) {
			o.Fleet, o.Carbon, o.Forecast = true, profiles, profiles
			o.Sites = func(context.Context, []render.Object) ([]workload.Site, float64, error) {
				return []workload.Site{{Cluster: "cloud-east", Location: "us-east", PricePerHour: 10, KWhPerHour: 1},
					{Cluster: "cloud-west", Location: "eu-west", PricePerHour: 10 + 2.0/12, KWhPerHour: 1}}, carbonPrice, nil
			}
		})
	}
	h2 := priced(1)
	h2.advance(8 * time.Hour) // 17:00
	w, _, err = h2.svc.Create(ctx, "alice", batch())
	if err != nil || !w.Deferral.Holding() || w.Deferral.Cluster != "cloud-west" || !w.Deferral.Until.Equal(h2.clock().Add(time.Hour)) {
		t.Fatalf("a carbon price: %+v, %v; want held for cloud-west from 18:00", w.Deferral, err)
	}
	// A tenth of it does not pay for the dearer cluster: at once on the
	// flat one.
	h3 := priced(0.1)
	h3.advance(8 * time.Hour)
	if w, _, err = h3.svc.Create(ctx, "alice", batch()); err != nil || w.Deferral != nil || !w.Applied() {
		t.Fatalf("a small carbon price: %+v applied %v, %v", w.Deferral, w.Applied(), err)
	}
}

// regional is a forecast that changes as a test sets it: one per location
// (by hour of the day); a location without one does not answer
// (*fault.NotFound).
type regional struct {
	by map[string]func(hour int) float64
}

func (*regional) Name() string { return "regional" }
func (r *regional) Forecast(_ context.Context, loc string, from, to time.Time) (map[time.Time]float64, error) {
	f, ok := r.by[loc]
	if !ok {
		return nil, &fault.NotFound{Kind: "location", Name: loc}
	}
	out := map[time.Time]float64{}
	for h := from.Truncate(time.Hour); h.Before(to); h = h.Add(time.Hour) {
		out[h] = f(h.Hour())
	}
	return out, nil
}

// TestReplanAcrossClusters: a held launch's hour is planned again on the
// cluster it was planned on, whatever the others' forecasts do since (its
// saving stays counted against starting at launch there); that cluster's
// forecast down leaves the plan, and says why; a person's start now
// releases it unmarked, to be placed as any launch.
func TestReplanAcrossClusters(t *testing.T) {
	night := func(h int) float64 {
		if h >= 9 && h <= 17 {
			return 400
		}
		return 100
	}
	f := &regional{by: map[string]func(int) float64{"eu-west": night, "us-east": func(int) float64 { return 400 }}}
	h := newHarnessWith(t, nil, true, func(o *workload.Options) {
		o.Fleet, o.Forecast = true, f
		o.Sites = func(context.Context, []render.Object) ([]workload.Site, float64, error) {
			return []workload.Site{{Cluster: "cloud-east", Location: "us-east", PricePerHour: 10}, {Cluster: "cloud-west", Location: "eu-west", PricePerHour: 10}}, 0, nil
		}
	})
	ctx := asAlice()
	t0 := h.clock() // 09:00
	w, _, err := h.svc.Create(ctx, "alice", batch())
	if err != nil || w.Deferral.Cluster != "cloud-west" || !w.Deferral.Until.Equal(t0.Add(8*time.Hour)) {
		t.Fatalf("launched: %+v, %v", w.Deferral, err)
	}
	atOnce := w.Deferral.AtOnce
	// Wind in the east all day, and the west clean from 14:00: the plan
	// stays on cloud-west, from 14:00.
	f.by["us-east"] = func(int) float64 { return 50 }
	f.by["eu-west"] = func(h int) float64 {
		if h >= 9 && h <= 13 {
			return 400
		}
		return 100
	}
	h.advance(10 * time.Minute)
	if n, err := h.svc.ReleaseDeferred(ctx); err != nil || n != 0 {
		t.Fatalf("released %d, %v", n, err)
	}
	got := h.status(t, w.ID)
	if d := got.Deferral; !d.Holding() || d.Cluster != "cloud-west" || d.Location != "eu-west" || !d.Until.Equal(t0.Add(5*time.Hour)) || d.AtOnce != atOnce ||
		!strings.HasPrefix(got.Reason, "waiting for cleaner power on cloud-west: forecast minimum 14:00–02:00 UTC") {
		t.Fatalf("after a newer forecast: %+v (%q); want cloud-west from 14:00", d, got.Reason)
	}
	// The west's forecast down: the plan stands, and the pass says why.
	delete(f.by, "eu-west")
	h.advance(6 * time.Minute)
	if n, err := h.svc.ReleaseDeferred(ctx); n != 0 || err == nil || !strings.Contains(err.Error(), "eu-west") {
		t.Fatalf("its cluster's forecast down: released %d, %v (want the error said)", n, err)
	}
	if d := h.status(t, w.ID).Deferral; !d.Holding() || d.Cluster != "cloud-west" || !d.Until.Equal(t0.Add(5*time.Hour)) {
		t.Fatalf("a forecast down moved the plan: %+v", d)
	}
	// Its owner starts it now: released, its Job not marked for cloud-west.
	got, err = h.svc.Start(ctx, w.ID)
	if err != nil || got.Deferral.Holding() || !got.Applied() || plannedOn(h.cluster.Applied(w.ID)) != "" {
		t.Fatalf("started now: %+v applied %v, planned on %q, %v", got.Deferral, got.Applied(), plannedOn(h.cluster.Applied(w.ID)), err)
	}
}

// plannedOn is the cluster the Job among objs is marked as planned on.
func plannedOn(objs []render.Object) string {
	for _, o := range objs {
		if job, ok := o.(*batchv1.Job); ok {
			return job.Labels[render.LabelPlannedCluster]
		}
	}
	return ""
}
