package carbon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// SDK is a Source and a Forecaster that asks a Carbon Aware SDK Web API
// (`GET /emissions/bylocation?location=L&time=FROM&toTime=TO`, an array of
// `{location, time, rating, duration}`, rating in gCO2e/kWh) for the
// emissions of the hours it has not cached. A figure asked once its hour
// had ended (and publishLag passed) is kept for Keep; one asked earlier —
// the current hour, or one just ended — is asked again after Refresh. Its
// forecast (`GET /emissions/forecasts/current?location=L`, the
// `forecastData` of the first answer) is asked again after Refresh.
type SDK struct {
	base    *url.URL
	client  *http.Client
	now     func() time.Time
	keep    time.Duration
	refresh time.Duration

	mu        sync.Mutex
	cache     map[hourKey]cached
	forecasts map[string]forecast // by location
}

// forecast is a location's current forecast as last asked.
type forecast struct {
	hours map[time.Time]float64
	at    time.Time
}

type hourKey struct {
	location string
	hour     int64
}

type cached struct {
	g       float64
	missing bool // the service had no figure for the hour
	at      time.Time
	// final: the hour had ended, and the service had had publishLag to
	// publish its figures, when it was asked; only a final figure is kept
	// for Keep, others for Refresh.
	final bool
}

// publishLag is how long after an hour ends its figures are taken as all
// published (WattTime and ElectricityMaps publish within minutes).
const publishLag = 15 * time.Minute

// SDKOptions configure an SDK source.
type SDKOptions struct {
	URL    string       // the Web API's base URL (required)
	Client *http.Client // default: a client with a 10 s timeout
	Now    func() time.Time
	// Keep is how long a past hour's figure is kept (default 24h);
	// Refresh how long the current hour's is, and how long a forecast is
	// kept (default 5m).
	Keep, Refresh time.Duration
}

// NewSDK is a source on the Carbon Aware SDK Web API at o.URL.
func NewSDK(o SDKOptions) (*SDK, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("carbon: the Carbon Aware SDK's URL %q is not an http(s) URL", o.URL)
	}
	if o.Now == nil {
		return nil, errors.New("carbon: Now (the server's clock) is required")
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Keep <= 0 {
		o.Keep = 24 * time.Hour
	}
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Minute
	}
	return &SDK{base: u, client: o.Client, now: o.Now, keep: o.Keep, refresh: o.Refresh, cache: map[hourKey]cached{}, forecasts: map[string]forecast{}}, nil
}

// Name implements Source.
func (s *SDK) Name() string { return "Carbon Aware SDK (" + s.base.Host + ")" }

// maxHours bounds one question: a longer window is asked in pieces.
const maxHours = 24 * 31

// maxBody bounds an answer (a month of five-minute figures is about 1 MiB).
const maxBody = 8 << 20

// Intensity implements Source.
func (s *SDK) Intensity(ctx context.Context, location string, from, to time.Time) (map[time.Time]float64, error) {
	if location == "" {
		return nil, &fault.NotFound{Kind: "carbon location", Name: location}
	}
	now := s.now()
	out := map[time.Time]float64{}
	var need []time.Time
	s.mu.Lock()
	for h := from.UTC().Truncate(time.Hour); h.Before(to) && !h.After(now); h = h.Add(time.Hour) {
		c, ok := s.cache[hourKey{location, h.Unix()}]
		ttl := s.keep
		if !c.final {
			ttl = s.refresh // asked while its figures could still move
		}
		if ok && now.Sub(c.at) < ttl {
			if !c.missing {
				out[h] = c.g
			}
			continue
		}
		need = append(need, h)
	}
	s.mu.Unlock()
	for len(need) > 0 {
		n := min(len(need), maxHours)
		got, err := s.ask(ctx, location, need[0], need[n-1].Add(time.Hour))
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		for _, h := range need[:n] {
			g, ok := got[h]
			s.cache[hourKey{location, h.Unix()}] = cached{g: g, missing: !ok, at: now, final: !now.Before(h.Add(time.Hour + publishLag))}
			if ok {
				out[h] = g
			}
		}
		// Figures past their keep go: the cache holds what is asked for.
		for k, c := range s.cache {
			if now.Sub(c.at) >= s.keep {
				delete(s.cache, k)
			}
		}
		s.mu.Unlock()
		need = need[n:]
	}
	return out, nil
}

// emissionsData is one figure of the Web API's answer.
type emissionsData struct {
	Location string    `json:"location"`
	Time     time.Time `json:"time"`
	Rating   float64   `json:"rating"`
	Duration string    `json:"duration"` // hh:mm:ss
}

// ask asks the Web API for [from, to) and averages its figures per hour,
// each weighted by how much of the hour it covers.
func (s *SDK) ask(ctx context.Context, location string, from, to time.Time) (map[time.Time]float64, error) {
	u := s.base.JoinPath("emissions", "bylocation")
	q := url.Values{"location": {location}, "time": {from.UTC().Format(time.RFC3339)}, "toTime": {to.UTC().Format(time.RFC3339)}}
	u.RawQuery = q.Encode()
	body, err := s.get(ctx, u, location)
	if err != nil {
		return nil, err
	}
	if body == nil {
		return map[time.Time]float64{}, nil
	}
	var data []emissionsData
	if err := json.Unmarshal(body, &data); err != nil {
		return nil, &fault.Unavailable{What: s.Name(), Err: fmt.Errorf("GET %s: %w", u.Path, err)}
	}
	points := make([]point, 0, len(data))
	for _, d := range data {
		points = append(points, point{d.Time, parseDuration(d.Duration), d.Rating})
	}
	return perHour(points), nil
}

// get asks the Web API for u: the body of a 200, nil for a 204 (no
// figures), *fault.NotFound for a location it does not know, and
// *fault.Unavailable for the rest.
func (s *SDK) get(ctx context.Context, u *url.URL, location string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("carbon: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, &fault.Unavailable{What: s.Name(), Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, &fault.Unavailable{What: s.Name(), Err: err}
	}
	if len(body) > maxBody {
		return nil, &fault.Unavailable{What: s.Name(), Err: fmt.Errorf("GET %s: an answer over %d MiB", u.Path, maxBody>>20)}
	}
	switch {
	case resp.StatusCode == http.StatusNoContent:
		return nil, nil
	case resp.StatusCode == http.StatusBadRequest && strings.Contains(strings.ToLower(string(body)), "location"):
		return nil, &fault.NotFound{Kind: "carbon location", Name: location}
	case resp.StatusCode != http.StatusOK:
		return nil, &fault.Unavailable{What: s.Name(), Err: fmt.Errorf("GET %s: %s", u.Path, resp.Status)}
	}
	return body, nil
}

// point is one figure of an answer: its start, how long it covers and
// its intensity.
type point struct {
	at    time.Time
	dur   time.Duration
	value float64
}

// perHour averages points per hour (UTC, its start), each weighted by how
// much of the hour it covers; a value outside 0–5000 gCO2e/kWh is dropped.
func perHour(points []point) map[time.Time]float64 {
	sum, weight := map[time.Time]float64{}, map[time.Time]float64{}
	for _, d := range points {
		if d.value < 0 || d.value > 5000 || math.IsNaN(d.value) {
			continue
		}
		// Spread over the hours the figure covers.
		for t, end := d.at.UTC(), d.at.UTC().Add(d.dur); t.Before(end); {
			h := t.Truncate(time.Hour)
			next := minTime(h.Add(time.Hour), end)
			w := next.Sub(t).Seconds()
			sum[h] += d.value * w
			weight[h] += w
			t = next
		}
	}
	out := map[time.Time]float64{}
	for h, w := range weight {
		if w > 0 {
			out[h] = sum[h] / w
		}
	}
	return out
}

// parseDuration reads the Web API's hh:mm:ss (a figure without one
// covers five minutes, WattTime's period).
func parseDuration(s string) time.Duration {
	var h, m, sec int
	if n, _ := fmt.Sscanf(s, "%d:%d:%d", &h, &m, &sec); n == 3 && h >= 0 && m >= 0 && sec >= 0 {
		if d := time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second; d > 0 && d <= 24*time.Hour {
			return d
		}
	}
	return 5 * time.Minute
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// forecastAnswer is one element of the forecast's answer.
type forecastAnswer struct {
	ForecastData []struct {
		Timestamp time.Time `json:"timestamp"`
		Duration  float64   `json:"duration"` // minutes
		Value     float64   `json:"value"`
	} `json:"forecastData"`
}

// Forecast implements Forecaster.
func (s *SDK) Forecast(ctx context.Context, location string, from, to time.Time) (map[time.Time]float64, error) {
	if location == "" {
		return nil, &fault.NotFound{Kind: "carbon location", Name: location}
	}
	now := s.now()
	s.mu.Lock()
	f, ok := s.forecasts[location]
	s.mu.Unlock()
	if !ok || now.Sub(f.at) >= s.refresh {
		hours, err := s.askForecast(ctx, location)
		if err != nil {
			return nil, err
		}
		f = forecast{hours: hours, at: now}
		s.mu.Lock()
		s.forecasts[location] = f
		s.mu.Unlock()
	}
	out := map[time.Time]float64{}
	for h, v := range f.hours {
		if !h.Before(from.UTC().Truncate(time.Hour)) && h.Before(to) {
			out[h] = v
		}
	}
	return out, nil
}

// askForecast asks the Web API for location's current forecast and
// averages its points per hour, each weighted by how much of the hour it
// covers.
func (s *SDK) askForecast(ctx context.Context, location string) (map[time.Time]float64, error) {
	u := s.base.JoinPath("emissions", "forecasts", "current")
	u.RawQuery = url.Values{"location": {location}}.Encode()
	body, err := s.get(ctx, u, location)
	if err != nil {
		return nil, err
	}
	if body == nil {
		return map[time.Time]float64{}, nil
	}
	var answers []forecastAnswer
	if err := json.Unmarshal(body, &answers); err != nil {
		return nil, &fault.Unavailable{What: s.Name(), Err: fmt.Errorf("GET %s: %w", u.Path, err)}
	}
	var points []point
	if len(answers) > 0 {
		for _, d := range answers[0].ForecastData {
			dur := time.Duration(d.Duration * float64(time.Minute))
			if dur <= 0 || dur > 24*time.Hour {
				dur = 5 * time.Minute
			}
			points = append(points, point{d.Timestamp, dur, d.Value})
		}
	}
	return perHour(points), nil
}
