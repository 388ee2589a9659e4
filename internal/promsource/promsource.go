// Package promsource is the telemetry.Source for clusters that already run
// Prometheus with dcgm-exporter (or scrape gantry-agent): it reads a
// workload's series with PromQL range queries over dcgm-exporter's metric
// names and labels, finding the workload's pods by namespace and name, and
// answers exactly as Gantry's own store does (internal/telemetry/sourcetest).
package promsource

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// Source reads series from one Prometheus.
type Source struct {
	api  v1.API
	host string // for errors: the URL without credentials

	mu       sync.Mutex
	versions bool // leftOpen has been learnt from the server's build info
	leftOpen bool // range selectors exclude their start (Prometheus 3 and later)
}

// Options are what a Source is made of.
type Options struct {
	// URL is the Prometheus (http or https; user:password@ in it is sent as
	// basic auth and never shown in errors). Required.
	URL string
	// Transport for its requests (default: the Prometheus client's).
	Transport http.RoundTripper
}

// New connects to the Prometheus at o.URL.
func New(o Options) (*Source, error) {
	rawURL, rt := o.URL, o.Transport
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("metrics.prometheusURL %q is not an http(s) URL", redact(rawURL))
	}
	if rt == nil {
		rt = api.DefaultRoundTripper
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		rt = basicAuth{user: u.User.Username(), password: pw, next: rt}
		u.User = nil
	}
	c, err := api.NewClient(api.Config{Address: u.String(), RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", u.Redacted(), err)
	}
	return &Source{api: v1.NewAPI(c), host: u.Redacted()}, nil
}

func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}

type basicAuth struct {
	user, password string
	next           http.RoundTripper
}

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.password)
	return b.next.RoundTrip(r)
}

// PodPattern is the regular expression that matches a workload's pods by
// name: a Job's <name>-<5 chars>, a StatefulSet's <name>-<ordinal>, a
// Deployment's <name>-<pod-template-hash>-<5 chars>.
func PodPattern(name string) string {
	n := regexp.QuoteMeta(name)
	return n + `-([a-z0-9]{5}|[0-9]+|[a-z0-9]{6,10}-[a-z0-9]{5})`
}

// selector is the series selector of a metric for a workload.
func selector(metric string, t telemetry.Target) string {
	return fmt.Sprintf(`%s{namespace=%s,pod=~%s}`, metric, strconv.Quote(t.Namespace), strconv.Quote(PodPattern(t.Name)))
}

// stats are the four range functions a point is made of.
var stats = []string{"avg", "max", "p95", "n"}

// Query is the PromQL of one statistic over a window ending at each
// evaluation.
func Query(stat, metric string, t telemetry.Target, window time.Duration) string {
	sel := fmt.Sprintf("%s[%s]", selector(metric, t), model.Duration(window))
	switch stat {
	case "avg":
		return "avg_over_time(" + sel + ")"
	case "max":
		return "max_over_time(" + sel + ")"
	case "p95":
		return "quantile_over_time(0.95, " + sel + ")"
	}
	return "count_over_time(" + sel + ")"
}

// Series implements telemetry.Source. A step's point covers the samples in
// [T, T+step) at Prometheus's millisecond resolution: each is evaluated at
// T+step−1 ms over a window that reaches back to T — step−1 ms on
// Prometheus 2, whose range selectors include their start, the whole step on
// Prometheus 3, whose ranges are left-open.
func (s *Source) Series(ctx context.Context, q telemetry.Query) ([]telemetry.Series, error) {
	if err := telemetry.CheckQuery(q); err != nil {
		return nil, err
	}
	if q.Step < 2*time.Millisecond || q.Step%time.Millisecond != 0 {
		return nil, fmt.Errorf("step %s: a Prometheus source needs whole milliseconds, 2ms or more", q.Step)
	}
	window := q.Step
	if !s.rangesLeftOpen(ctx) {
		window -= time.Millisecond
	}
	metrics := q.Metrics
	if len(metrics) == 0 {
		metrics = telemetry.AllMetrics()
	}
	steps := int(q.To.Sub(q.From) / q.Step)
	if q.To.Sub(q.From)%q.Step != 0 {
		steps++
	}
	r := v1.Range{Start: q.From.Add(q.Step - time.Millisecond), End: q.From.Add(time.Duration(steps)*q.Step - time.Millisecond), Step: q.Step}
	type result struct {
		m    telemetry.Metric
		stat int
		mat  model.Matrix
	}
	var mu sync.Mutex
	var results []result
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, m := range metrics {
		for i, stat := range stats {
			g.Go(func() error {
				v, _, _, err := s.api.QueryRange(gctx, Query(stat, m.Info().DCGM, q.Target, window), r)
				if err != nil {
					return &fault.Unavailable{What: "prometheus " + s.host, Err: err}
				}
				mat, ok := v.(model.Matrix)
				if !ok {
					return fmt.Errorf("prometheus %s answered a %s, not a matrix", s.host, v.Type())
				}
				mu.Lock()
				results = append(results, result{m, i, mat})
				mu.Unlock()
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// Series by metric and label set; points by step.
	type cell struct {
		vals [4]float64
		has  [4]bool
	}
	type acc struct {
		s     telemetry.Series
		cells map[int]*cell
	}
	all := map[string]*acc{}
	for _, res := range results {
		for _, ss := range res.mat {
			k := res.m.String() + "|" + ss.Metric.String()
			a := all[k]
			if a == nil {
				d, p := labelsOf(ss.Metric)
				a = &acc{s: telemetry.Series{Metric: res.m, Device: d, Pod: p}, cells: map[int]*cell{}}
				all[k] = a
			}
			for _, sp := range ss.Values {
				t := sp.Timestamp.Time().Add(time.Millisecond - q.Step)
				idx := int(t.Sub(q.From) / q.Step)
				c := a.cells[idx]
				if c == nil {
					c = &cell{}
					a.cells[idx] = c
				}
				c.vals[res.stat], c.has[res.stat] = float64(sp.Value), true
			}
		}
	}
	out := []telemetry.Series{}
	for _, a := range all {
		idx := make([]int, 0, len(a.cells))
		for i := range a.cells {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for _, i := range idx {
			c := a.cells[i]
			if !c.has[3] || c.vals[3] == 0 || math.IsNaN(c.vals[0]) {
				continue
			}
			a.s.Points = append(a.s.Points, telemetry.Point{T: q.From.Add(time.Duration(i) * q.Step), Avg: c.vals[0], Max: c.vals[1], P95: c.vals[2], N: int(c.vals[3])})
		}
		if len(a.s.Points) > 0 {
			out = append(out, a.s)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Device.ID() != b.Device.ID() {
			return a.Device.ID() < b.Device.ID()
		}
		if a.Pod != b.Pod {
			return a.Pod.Name+"/"+a.Pod.Container < b.Pod.Name+"/"+b.Pod.Container
		}
		return a.Metric < b.Metric
	})
	return out, nil
}

// rangesLeftOpen asks the server's version once: Prometheus 3 made range
// selectors left-open ((t−w, t]; Prometheus 2's are [t−w, t]). A server that
// does not say (an error, a backend without build info) is taken for
// Prometheus 2 and asked again at the next query.
func (s *Source) rangesLeftOpen(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.versions {
		bi, err := s.api.Buildinfo(ctx)
		if err != nil {
			return false
		}
		major, _, _ := strings.Cut(strings.TrimPrefix(bi.Version, "v"), ".")
		n, err := strconv.Atoi(major)
		s.leftOpen, s.versions = err == nil && n >= 3, true
	}
	return s.leftOpen
}

// labelsOf reads a device and pod from dcgm-exporter's labels. dcgm-exporter
// names no MIG instance's UUID: it is "<GPU UUID>/<GPU_I_ID>" here.
func labelsOf(l model.Metric) (telemetry.Device, telemetry.PodRef) {
	idx, _ := strconv.Atoi(string(l["gpu"]))
	d := telemetry.Device{GPU: string(l["UUID"]), Index: idx, Model: string(l["modelName"])}
	if prof := string(l["GPU_I_PROFILE"]); prof != "" {
		gi, _ := strconv.Atoi(string(l["GPU_I_ID"]))
		d.MIG = &telemetry.MIGInstance{UUID: d.GPU + "/" + string(l["GPU_I_ID"]), Profile: prof, InstanceID: gi}
	}
	return d, telemetry.PodRef{Namespace: string(l["namespace"]), Name: string(l["pod"]), Container: string(l["container"])}
}

// OpenMetrics writes readings as dcgm-exporter would have exposed them,
// with their timestamps (OpenMetrics, for promtool's backfill), for tests
// and for moving Gantry's own history into a Prometheus.
func OpenMetrics(node string, rs []telemetry.Reading) []byte {
	var b strings.Builder
	// OpenMetrics wants each series' samples together, oldest first.
	sorted := append([]telemetry.Reading(nil), rs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Time.Before(sorted[j].Time) })
	rs = sorted
	byMetric := map[telemetry.Metric]map[string][]string{}
	for _, r := range rs {
		d := r.Device
		prof, gi := "", ""
		if d.MIG != nil {
			prof, gi = d.MIG.Profile, strconv.Itoa(d.MIG.InstanceID)
		}
		labels := fmt.Sprintf(`gpu=%q,UUID=%q,modelName=%q,Hostname=%q,GPU_I_PROFILE=%q,GPU_I_ID=%q,pod=%q,namespace=%q,container=%q`,
			strconv.Itoa(d.Index), d.GPU, d.Model, node, prof, gi, r.Pod.Name, r.Pod.Namespace, r.Pod.Container)
		for m, v := range r.Values {
			if math.IsNaN(v) {
				continue
			}
			mt := telemetry.Metric(m)
			if byMetric[mt] == nil {
				byMetric[mt] = map[string][]string{}
			}
			byMetric[mt][labels] = append(byMetric[mt][labels], fmt.Sprintf("%s{%s} %s %s\n", mt.Info().DCGM, labels,
				strconv.FormatFloat(v, 'g', -1, 64), strconv.FormatFloat(float64(r.Time.UnixMilli())/1000, 'f', 3, 64)))
		}
	}
	for _, m := range telemetry.AllMetrics() {
		series := byMetric[m]
		if len(series) == 0 {
			continue
		}
		fmt.Fprintf(&b, "# TYPE %s gauge\n", m.Info().DCGM)
		keys := make([]string, 0, len(series))
		for k := range series {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			for _, l := range series[k] {
				b.WriteString(l)
			}
		}
	}
	b.WriteString("# EOF\n")
	return []byte(b.String())
}
