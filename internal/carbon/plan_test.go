package carbon_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/fault"
)

// hours is a forecast from start of the given hourly values.
func hours(start time.Time, vs ...float64) map[time.Time]float64 {
	out := map[time.Time]float64{}
	for i, v := range vs {
		out[start.Add(time.Duration(i)*time.Hour)] = v
	}
	return out
}

// TestBestAmong: the site and the start chosen together — the cheapest
// sites' cleanest window without a carbon price, price and carbon weighed
// together with one, a PUE counted, a wait only where it saves MinSaving
// at its own site, and a site whose forecast does not cover now left out.
func TestBestAmong(t *testing.T) {
	h0 := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	now := h0.Add(20 * time.Minute)
	latest := h0.Add(6 * time.Hour)
	//                  22   23   00   01   02   03   04
	east := hours(h0, 400, 400, 400, 400, 400, 400, 400, 400)  // never cleaner
	west := hours(h0, 500, 450, 300, 150, 150, 300, 500, 500)  // clean at 01:00
	north := hours(h0, 120, 120, 120, 120, 120, 120, 120, 120) // clean all night
	for _, tc := range []struct {
		name      string
		sites     []carbon.Site
		wantSite  int
		wantStart time.Time
		wait      bool
		ok        bool
	}{
		{"same price: the cleanest window of all", []carbon.Site{{Forecast: east}, {Forecast: west}}, 1, h0.Add(3 * time.Hour), true, true},
		{"no carbon price: the cheaper site's window alone", []carbon.Site{{Forecast: east, Price: 10}, {Forecast: west, Price: 12}}, 0, now, false, true},
		{"the cheaper site's own clean hour", []carbon.Site{{Forecast: west, Price: 10}, {Forecast: north, Price: 12}}, 0, h0.Add(3 * time.Hour), true, true},
		{"a carbon price weighs the dearer, cleaner site in", []carbon.Site{{Forecast: east, Price: 10, Weight: 0.01}, {Forecast: north, Price: 12, Weight: 0.01}}, 1, now, false, true},
		{"too small a carbon price does not", []carbon.Site{{Forecast: east, Price: 10, Weight: 0.001}, {Forecast: north, Price: 12, Weight: 0.001}}, 0, now, false, true},
		{"a PUE counts", []carbon.Site{{Forecast: west, PUE: 3}, {Forecast: north, PUE: 1}}, 1, now, false, true},
		{"clean at once beats a wait elsewhere", []carbon.Site{{Forecast: west}, {Forecast: north}}, 1, now, false, true},
		{"a wait that saves at its dirty site but not against the cleanest at once", []carbon.Site{{Forecast: hours(h0, 200, 200, 200, 200, 200, 200, 200, 200)}, {Forecast: hours(h0, 400, 400, 195, 195, 195, 195, 195, 195)}}, 0, now, false, true},
		{"a site with no forecast for now is left out", []carbon.Site{{Forecast: hours(h0.Add(time.Hour), 10, 10, 10, 10, 10, 10)}, {Forecast: west}}, 1, h0.Add(3 * time.Hour), true, true},
		{"no site to judge", []carbon.Site{{Forecast: nil}}, -1, now, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := carbon.BestAmong(tc.sites, now, latest, 2*time.Hour)
			if ok != tc.ok || c.Site != tc.wantSite || c.Wait != tc.wait || !c.Start.Equal(tc.wantStart) {
				t.Fatalf("site %d start %s wait %v ok %v, want %d %s %v %v (%+v)", c.Site, c.Start, c.Wait, ok, tc.wantSite, tc.wantStart, tc.wait, tc.ok, c)
			}
			if !c.Latest.Equal(latest) {
				t.Errorf("latest %s, want %s", c.Latest, latest)
			}
			if c.Wait {
				// Its saving is against starting at once at the same site.
				at, _ := carbon.Best(tc.sites[c.Site].Forecast, now, now, 2*time.Hour)
				if c.AtOnce != at.AtOnce || c.Saving() < carbon.MinSaving {
					t.Errorf("at once %g (the site's own: %g), saving %g", c.AtOnce, at.AtOnce, c.Saving())
				}
			}
		})
	}
}

// TestBest: the start whose window has the lowest mean forecast, never
// past the latest start, earliest on a tie, and now unless a later start
// saves at least MinSaving.
func TestBest(t *testing.T) {
	h0 := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	now := h0.Add(20 * time.Minute)
	//              22   23   00   01   02   03   04   05   06
	night := hours(h0, 400, 380, 300, 250, 200, 180, 190, 350, 420)
	for _, tc := range []struct {
		name      string
		forecast  map[time.Time]float64
		latest    time.Time
		run       time.Duration
		wantStart time.Time
		wait      bool
		ok        bool
	}{
		{"the night's low for a 2h run", night, h0.Add(8 * time.Hour), 2 * time.Hour, h0.Add(5 * time.Hour), true, true},
		{"never past the latest start", night, h0.Add(3 * time.Hour), 2 * time.Hour, h0.Add(3 * time.Hour), true, true},
		{"a latest start before the next hour: now", night, now.Add(10 * time.Minute), time.Hour, now, false, true},
		{"a flat forecast: now", hours(h0, 300, 300, 300, 300), h0.Add(3 * time.Hour), time.Hour, now, false, true},
		{"under MinSaving: now", hours(h0, 300, 300, 290, 300), h0.Add(3 * time.Hour), time.Hour, now, false, true},
		{"a tie: the earliest", hours(h0, 400, 200, 200, 200, 200), h0.Add(4 * time.Hour), time.Hour, h0.Add(time.Hour), true, true},
		{"a window past the horizon is not judged", hours(h0, 400, 400, 100), h0.Add(8 * time.Hour), 2 * time.Hour, h0.Add(time.Hour), true, true},
		{"no forecast for now: nothing to compare", hours(h0.Add(time.Hour), 100, 100), h0.Add(8 * time.Hour), time.Hour, now, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := carbon.Best(tc.forecast, now, tc.latest, tc.run)
			if ok != tc.ok || p.Wait != tc.wait || !p.Start.Equal(tc.wantStart) {
				t.Fatalf("start %s wait %v ok %v, want %s %v %v (plan %+v)", p.Start, p.Wait, ok, tc.wantStart, tc.wait, tc.ok, p)
			}
			if p.Start.After(tc.latest) && p.Wait {
				t.Errorf("starts %s, past the latest %s", p.Start, tc.latest)
			}
			if !p.End.Equal(p.Start.Add(tc.run)) {
				t.Errorf("window %s–%s for a %s run", p.Start, p.End, tc.run)
			}
		})
	}
	// The figures: a run started at 22:20 for 2h covers 40 min at 400,
	// 60 at 380 and 20 at 300; at 03:00 it covers 180 and 190.
	p, _ := carbon.Best(night, now, h0.Add(8*time.Hour), 2*time.Hour)
	atOnce := (400*40 + 380*60 + 300*20) / 120.0
	if math.Abs(p.AtOnce-atOnce) > 1e-9 || p.AtStart != 185 {
		t.Errorf("intensities %v at once, %v at the start; want %v, 185", p.AtOnce, p.AtStart, atOnce)
	}
	if want := (atOnce - 185) / atOnce; math.Abs(p.Saving()-want) > 1e-9 {
		t.Errorf("saving %v, want %v", p.Saving(), want)
	}
}

// TestShifted: energy used at 03:00 rated as if used by earlier.
func TestShifted(t *testing.T) {
	h := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	in := hours(h.Add(-5*time.Hour), 400, 380, 300, 250, 200, 180)
	g, u := carbon.Shifted(map[time.Time]float64{h: 2, h.Add(time.Hour): 1}, in, 5*time.Hour)
	if g != 2*400+1*380 || u != 0 {
		t.Errorf("grams %v unrated %v, want %v 0", g, u, 2*400+1*380)
	}
	g, u = carbon.Shifted(map[time.Time]float64{h: 2}, in, 6*time.Hour)
	if g != 0 || u != 2 {
		t.Errorf("an hour without a figure: grams %v unrated %v", g, u)
	}
	// Held 4 h 15 min: the 03:00 hour moves to 22:45–23:45, a quarter
	// in 22:00 (400) and three in 23:00 (380).
	g, u = carbon.Shifted(map[time.Time]float64{h: 2}, in, 4*time.Hour+15*time.Minute)
	if math.Abs(g-(0.5*400+1.5*380)) > 1e-9 || u != 0 {
		t.Errorf("a shift of part of an hour: grams %v unrated %v, want %v", g, u, 0.5*400+1.5*380)
	}
}

// TestSDKForecast: the forecast's points averaged per hour, cached for
// Refresh, a location it does not know NotFound.
func TestSDKForecast(t *testing.T) {
	var calls atomic.Int32
	now := time.Date(2026, 12, 4, 22, 20, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/emissions/forecasts/current" || r.URL.Query().Get("location") != "westus" {
			http.Error(w, `{"title":"location is not known"}`, http.StatusBadRequest)
			return
		}
		var data []map[string]any
		for at := now.Truncate(5 * time.Minute); at.Before(now.Add(24 * time.Hour)); at = at.Add(5 * time.Minute) {
			data = append(data, map[string]any{"location": "westus", "timestamp": at.Format(time.RFC3339), "duration": 5, "value": float64(100 + at.Hour())})
		}
		json.NewEncoder(w).Encode([]map[string]any{{"location": "westus", "windowSize": 5, "forecastData": data,
			"optimalDataPoints": data[:1]}})
	}))
	defer srv.Close()
	s, err := carbon.NewSDK(carbon.SDKOptions{URL: srv.URL, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := s.Forecast(ctx, "westus", now, now.Add(6*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	h := now.Truncate(time.Hour)
	if len(got) != 7 || got[h] != 122 || got[h.Add(2*time.Hour)] != 100 || calls.Load() != 1 {
		t.Fatalf("forecast %v after %d calls", got, calls.Load())
	}
	if _, err := s.Forecast(ctx, "westus", now, now.Add(time.Hour)); err != nil || calls.Load() != 1 {
		t.Fatalf("cached: %v after %d calls", err, calls.Load())
	}
	now = now.Add(6 * time.Minute)
	if _, err := s.Forecast(ctx, "westus", now, now.Add(time.Hour)); err != nil || calls.Load() != 2 {
		t.Fatalf("past its refresh: %v after %d calls", err, calls.Load())
	}
	var nf *fault.NotFound
	if _, err := s.Forecast(ctx, "nowhere", now, now.Add(time.Hour)); !errors.As(err, &nf) {
		t.Errorf("an unknown location: %v", err)
	}
}
