package carbon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/carbon"
	"github.com/gantryhq/gantry/internal/fault"
)

func day(v float64) string {
	var parts []string
	for h := range 24 {
		parts = append(parts, jsonNum(v+float64(h)))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func jsonNum(v float64) string { b, _ := json.Marshal(v); return string(b) }

// TestProfiles: a profiles file's sites give each hour its value; a bad
// file names file:line and the field.
func TestProfiles(t *testing.T) {
	p, err := carbon.ParseProfiles("carbon.yaml", []byte("apiVersion: gantry.dev/v1\nkind: CarbonProfiles\nsites:\n  eu-west: "+day(100)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 12, 3, 22, 30, 0, 0, time.UTC)
	got, err := p.Intensity(context.Background(), "eu-west", from, from.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := map[time.Time]float64{from.Truncate(time.Hour): 122, from.Truncate(time.Hour).Add(time.Hour): 123, from.Truncate(time.Hour).Add(2 * time.Hour): 100}
	if len(got) != len(want) {
		t.Fatalf("hours %v, want %v", got, want)
	}
	for h, v := range want {
		if got[h] != v {
			t.Errorf("%s: %v, want %v", h, got[h], v)
		}
	}
	var nf *fault.NotFound
	if _, err := p.Intensity(context.Background(), "mars", from, from.Add(time.Hour)); !errors.As(err, &nf) {
		t.Errorf("an unknown site: %v", err)
	}
	for _, tc := range []struct{ doc, want string }{
		{"apiVersion: gantry.dev/v1\nkind: CarbonProfiles\nsites:\n  a: [1, 2]\n", "carbon.yaml:4: sites.a: 2 values: want 24"},
		{"apiVersion: gantry.dev/v1\nkind: CarbonProfiles\nsites:\n  a: " + strings.Replace(day(0), "[0,", "[-5,", 1) + "\n", "sites.a[0]: -5: gCO2e/kWh from 0 to 2000"},
		{"apiVersion: gantry.dev/v1\nkind: Other\nsites: {}\n", "kind: must be \"CarbonProfiles\""},
	} {
		if _, err := carbon.ParseProfiles("carbon.yaml", []byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
	}
	if g, unrated := carbon.Grams(map[time.Time]float64{from.Truncate(time.Hour): 2, from.Add(24 * time.Hour).Truncate(time.Hour): 1},
		map[time.Time]float64{from.Truncate(time.Hour): 122}); g != 244 || unrated != 1 {
		t.Errorf("grams %v, unrated %v kWh", g, unrated)
	}
}

// TestSDK: the Carbon Aware SDK source asks /emissions/bylocation for the
// hours it lacks, averages five-minute figures per hour, keeps past hours
// and asks the current one again after its refresh; its errors say which.
func TestSDK(t *testing.T) {
	var calls atomic.Int32
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/api/emissions/bylocation" || r.URL.Query().Get("location") != "westus" {
			http.Error(w, `{"title":"bad location"}`, http.StatusBadRequest)
			return
		}
		if s := int(status.Load()); s != 200 {
			w.WriteHeader(s)
			return
		}
		from, err1 := time.Parse(time.RFC3339, r.URL.Query().Get("time"))
		to, err2 := time.Parse(time.RFC3339, r.URL.Query().Get("toTime"))
		if err1 != nil || err2 != nil {
			http.Error(w, "bad time", http.StatusBadRequest)
			return
		}
		var out []map[string]any
		for at := from; at.Before(to); at = at.Add(5 * time.Minute) {
			// 300 in the first half of each hour, 500 in the second.
			rating := 300.0
			if at.Minute() >= 30 {
				rating = 500
			}
			out = append(out, map[string]any{"location": "westus", "time": at.Format(time.RFC3339), "rating": rating, "duration": "00:05:00"})
		}
		json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	now := time.Date(2026, 12, 3, 12, 20, 0, 0, time.UTC)
	s, err := carbon.NewSDK(carbon.SDKOptions{URL: srv.URL + "/api", Now: func() time.Time { return now }, Refresh: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	from := now.Add(-3 * time.Hour).Truncate(time.Hour)
	got, err := s.Intensity(ctx, "westus", from, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[from] != 400 || calls.Load() != 1 {
		t.Fatalf("hours %v after %d calls", got, calls.Load())
	}
	// Cached: no new call; the current hour asked again past its refresh.
	if _, err := s.Intensity(ctx, "westus", from, now); err != nil || calls.Load() != 1 {
		t.Fatalf("cached: %v after %d calls", err, calls.Load())
	}
	now = now.Add(6 * time.Minute)
	if _, err := s.Intensity(ctx, "westus", from, now); err != nil || calls.Load() != 2 {
		t.Fatalf("the current hour after its refresh: %v after %d calls", err, calls.Load())
	}
	// The hour that was current, asked again once it has ended (its first
	// figures were of part of it): asked again, and then kept.
	asked := now
	now = asked.Add(40 * time.Minute) // 13:06: ended, not yet all published
	if _, err := s.Intensity(ctx, "westus", from, asked); err != nil || calls.Load() != 3 {
		t.Fatalf("an hour asked while current, after it ended: %v after %d calls", err, calls.Load())
	}
	now = asked.Add(60 * time.Minute) // 13:26: published
	if _, err := s.Intensity(ctx, "westus", from, asked); err != nil || calls.Load() != 4 {
		t.Fatalf("once its figures are published: %v after %d calls", err, calls.Load())
	}
	now = asked.Add(3 * time.Hour)
	if _, err := s.Intensity(ctx, "westus", from, asked); err != nil || calls.Load() != 4 {
		t.Fatalf("a final hour is kept: %v after %d calls", err, calls.Load())
	}
	var nf *fault.NotFound
	if _, err := s.Intensity(ctx, "nowhere", from, now); !errors.As(err, &nf) {
		t.Errorf("an unknown location: %v", err)
	}
	status.Store(503)
	var un *fault.Unavailable
	if _, err := s.Intensity(ctx, "westus", now.Add(-48*time.Hour), now.Add(-47*time.Hour)); !errors.As(err, &un) || !strings.Contains(err.Error(), "Carbon Aware SDK") {
		t.Errorf("the service down: %v", err)
	}
	if _, err := carbon.NewSDK(carbon.SDKOptions{URL: "ftp://x", Now: time.Now}); err == nil {
		t.Error("an ftp URL was taken")
	}
}

// FuzzParseProfiles: any input gives profiles or an error, never a panic.
func FuzzParseProfiles(f *testing.F) {
	f.Add([]byte("apiVersion: gantry.dev/v1\nkind: CarbonProfiles\nsites:\n  a: " + day(1) + "\n"))
	f.Add([]byte("sites: {a: [1]}"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := carbon.ParseProfiles("f.yaml", data)
		if err == nil && p == nil {
			t.Fatal("no profiles and no error")
		}
	})
}
