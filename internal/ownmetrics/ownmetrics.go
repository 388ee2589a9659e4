// Package ownmetrics owns Gantry's own Prometheus metrics (GET /metrics):
// the API's requests by route, method and code and their durations, launches
// by outcome, approval decisions, and what the leader's loops did — idle and
// off-hours stops, budget alerts, webhook deliveries, expired approvals,
// workloads applied by the reconciler — with Go's and the process's
// collectors. Names follow Prometheus conventions (gantry_ prefix, _total
// counters, _seconds durations) and pass promtool check metrics.
package ownmetrics

import (
	"bytes"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

// Metrics is Gantry's registry and its instruments; the zero value is not
// usable, New makes one.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	launches *prometheus.CounterVec
	decided  *prometheus.CounterVec
	actions  *prometheus.CounterVec
}

// Loop actions, the action label of gantry_loop_actions_total.
const (
	IdleStops        = "idle_stop"
	BudgetAlerts     = "budget_alert"
	WebhooksSent     = "webhook_delivered"
	ApprovalsExpired = "approval_expired"
	Applied          = "workload_applied"
	Expired          = "max_runtime_stop"
)

// New registers Gantry's instruments and Go's and the process's collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_http_requests_total",
			Help: "HTTP requests served, by route (the API's path template), method and status code."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_http_request_duration_seconds",
			Help: "Time to serve an HTTP request, by route and method.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)}, []string{"route", "method"}),
		launches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_launches_total",
			Help: "Launches by outcome: started, held_for_approval, held_by_budget, replayed (an Idempotency-Key repeat) or refused."}, []string{"outcome"}),
		decided: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_approval_decisions_total",
			Help: "Approval decisions by team-admins and platform-admins: approved or denied."}, []string{"decision"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_loop_actions_total",
			Help: "What the leader's loops did: idle_stop, budget_alert, webhook_delivered, approval_expired, workload_applied, max_runtime_stop."}, []string{"action"}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.launches, m.decided, m.actions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Request records one served request.
func (m *Metrics) Request(route, method string, code int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route, method).Observe(took.Seconds())
}

// Launch records a launch's outcome.
func (m *Metrics) Launch(outcome string) { m.launches.WithLabelValues(outcome).Inc() }

// Decision records an approval decision.
func (m *Metrics) Decision(approved bool) {
	m.decided.WithLabelValues(map[bool]string{true: "approved", false: "denied"}[approved]).Inc()
}

// Loop records n actions of a loop.
func (m *Metrics) Loop(action string, n int) {
	if n > 0 {
		m.actions.WithLabelValues(action).Add(float64(n))
	}
}

// Text is the metrics in Prometheus's text exposition format.
func (m *Metrics) Text() ([]byte, error) {
	families, err := m.reg.Gather()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}
