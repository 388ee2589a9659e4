package advice

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/workload"
)

// Service advises on live workloads from their series, recomputing as
// samples arrive (cached for a minute per workload).
type Service struct {
	source  telemetry.Source
	classes *gpu.Catalog
	// health says why GPUs a workload runs on are unhealthy (none: nil).
	health func(ctx context.Context, workloadID string) ([]string, error)
	now    func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	report Report
	at     time.Time
}

// cacheFor is how long a report serves: samples arrive every 10 s, advice
// rests on hours of them.
const cacheFor = time.Minute

// Lookback is the most of a workload's life advice looks at.
const Lookback = 24 * time.Hour

// NewService builds the service; a source and the GPU classes are required.
func NewService(source telemetry.Source, classes *gpu.Catalog, health func(context.Context, string) ([]string, error), now func() time.Time) (*Service, error) {
	if source == nil || classes == nil {
		return nil, fmt.Errorf("advice: a telemetry source and the GPU classes are required")
	}
	if now == nil {
		now = time.Now
	}
	return &Service{source: source, classes: classes, health: health, now: now, cache: map[string]cached{}}, nil
}

// Report is the advice on one workload.
type Report struct {
	Workload string
	From, To time.Time
	Step     time.Duration
	Findings []Finding
}

// Workload advises on w (whose namespace is ns): its series since it was
// created (at most Lookback), at 10 s steps up to six hours and one-minute
// steps beyond.
func (s *Service) Workload(ctx context.Context, w workload.Workload, ns string) (Report, error) {
	now := s.now().UTC()
	s.mu.Lock()
	if c, ok := s.cache[w.ID]; ok && now.Sub(c.at) < cacheFor {
		s.mu.Unlock()
		return c.report, nil
	}
	s.mu.Unlock()
	class, ok := s.classes.Get(w.GPUClass)
	if !ok {
		return Report{}, fmt.Errorf("workload %s: GPU class %q is not in the catalog", w.ID, w.GPUClass)
	}
	from := w.CreatedAt.UTC()
	if now.Sub(from) > Lookback {
		from = now.Add(-Lookback)
	}
	step := 10 * time.Second
	if now.Sub(from) > 6*time.Hour {
		step = time.Minute
	}
	from = from.Truncate(step)
	to := now.Truncate(step).Add(step)
	series, err := s.source.Series(ctx, telemetry.Query{Target: telemetry.Target{ID: w.ID, Namespace: ns, Name: w.Name}, From: from, To: to, Step: step})
	if err != nil {
		return Report{}, err
	}
	in := Input{Workload: w.ID, Class: class, Count: w.GPUCount, Profile: w.MIGProfile, Series: series, From: from, To: to, Step: step}
	if s.health != nil {
		if in.Unhealthy, err = s.health(ctx, w.ID); err != nil {
			return Report{}, err
		}
	}
	r := Report{Workload: w.ID, From: from, To: to, Step: step, Findings: Advise(in)}
	s.mu.Lock()
	if len(s.cache) > 10000 {
		s.cache = map[string]cached{}
	}
	s.cache[w.ID] = cached{report: r, at: now}
	s.mu.Unlock()
	return r, nil
}

// SeriesURL is the metrics endpoint that shows a finding's evidence.
func SeriesURL(workloadID string, f Finding) string {
	q := url.Values{}
	q.Set("from", f.From.UTC().Format(time.RFC3339))
	q.Set("to", f.To.UTC().Format(time.RFC3339))
	if len(f.Series) > 0 {
		q.Set("series", strings.Join(f.Series, ","))
	}
	return "/api/v1/workloads/" + url.PathEscape(workloadID) + "/metrics?" + q.Encode()
}
