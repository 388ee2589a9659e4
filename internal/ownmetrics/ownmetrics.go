// Package ownmetrics owns Gantry's own Prometheus metrics (GET /metrics):
// the API's requests by route, method and code and their durations, launches
// by outcome, approval decisions, and what the leader's loops did — idle and
// off-hours stops, budget alerts, webhook deliveries, expired approvals,
// workloads applied by the reconciler — how long applying to the cluster and
// waiting for Kueue's admission take, how far the informers lag behind the
// cluster, whether each worker cluster could be read, the controllers' work queues, and the image verifier's cache, with
// Go's and the process's collectors. Names follow Prometheus conventions (gantry_ prefix, _total
// counters, _seconds durations) and pass promtool check metrics.
package ownmetrics

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"k8s.io/client-go/util/workqueue"

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
	apply    *prometheus.HistogramVec
	admitted prometheus.Histogram
	lag      *prometheus.HistogramVec
	workerUp *prometheus.GaugeVec
	queue    queueMetrics
}

// queueMetrics are client-go work queues' instruments, by queue name.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

// Loop actions, the action label of gantry_loop_actions_total.
const (
	IdleStops        = "idle_stop"
	BudgetAlerts     = "budget_alert"
	WebhooksSent     = "webhook_delivered"
	ApprovalsExpired = "approval_expired"
	Applied          = "workload_applied"
	Expired          = "max_runtime_stop"
	Dispatched       = "dispatched"
	Quarantine       = "quarantine"        // a node marked or released, a workload moved
	Released         = "deferral_released" // a flexible launch released at its cleanest window
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
			Help: "Launches by outcome: started, held_for_approval, held_by_budget, held_for_cleaner_power, replayed (an Idempotency-Key repeat) or refused."}, []string{"outcome"}),
		decided: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_approval_decisions_total",
			Help: "Approval decisions by team-admins and platform-admins: approved or denied."}, []string{"decision"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_loop_actions_total",
			Help: "What the leader's loops did: idle_stop, budget_alert, webhook_delivered, approval_expired, workload_applied, max_runtime_stop, dispatched (a Workload nominated to a worker cluster), quarantine, deferral_released (a flexible launch released into its queue)."}, []string{"action"}),
	}
	m.apply = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_kube_apply_duration_seconds",
		Help: "Time to apply one workload's objects to the cluster (server-side apply), by outcome: ok or error.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}, []string{"outcome"})
	m.admitted = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gantry_kueue_admission_wait_seconds",
		Help: "Time from a Kueue Workload's creation to its admission (quota reserved and every admission check ready).", Buckets: prometheus.ExponentialBuckets(0.25, 4, 10)})
	m.lag = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_informer_lag_seconds",
		Help: "Time from a change in the cluster (a condition's last transition) to Gantry's informer seeing it, by resource.", Buckets: prometheus.ExponentialBuckets(0.25, 2, 10)}, []string{"resource"})
	m.workerUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gantry_worker_cluster_up",
		Help: "1 when Gantry read the worker cluster with its credentials at the last pass, 0 when it could not (an API server down, credentials refused: the log says which)."}, []string{"cluster"})
	q := []string{"queue"}
	m.queue = queueMetrics{
		depth:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gantry_workqueue_depth", Help: "Items waiting in a controller's work queue."}, q),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gantry_workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet done, summed over a queue's workers."}, q),
		longest:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gantry_workqueue_longest_running_processor_seconds", Help: "How long the longest-running worker of a queue has been at its item."}, q),
		adds:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_workqueue_adds_total", Help: "Items added to a controller's work queue."}, q),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_workqueue_retries_total", Help: "Items a controller's work queue took back to retry."}, q),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_workqueue_queue_duration_seconds",
			Help: "Time an item waits in a work queue before a worker takes it.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}, q),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_workqueue_work_duration_seconds",
			Help: "Time a worker spends on one item.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}, q),
	}
	m.reg.MustRegister(m.requests, m.duration, m.launches, m.decided, m.actions, m.apply, m.admitted, m.lag, m.workerUp,
		m.queue.depth, m.queue.unfinished, m.queue.longest, m.queue.adds, m.queue.retries, m.queue.latency, m.queue.work,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveApply records one workload's apply to the cluster.
func (m *Metrics) ObserveApply(took time.Duration, err error) {
	m.apply.WithLabelValues(map[bool]string{true: "ok", false: "error"}[err == nil]).Observe(took.Seconds())
}

// ObserveAdmission records how long a Kueue Workload waited for admission.
func (m *Metrics) ObserveAdmission(wait time.Duration) { m.admitted.Observe(max(wait, 0).Seconds()) }

// ObserveLag records how far behind the cluster an informer saw a change of
// resource.
func (m *Metrics) ObserveLag(resource string, lag time.Duration) {
	m.lag.WithLabelValues(resource).Observe(max(lag, 0).Seconds())
}

// WorkerUp records whether a worker cluster could be read at the last pass.
func (m *Metrics) WorkerUp(cluster string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.workerUp.WithLabelValues(cluster).Set(v)
}

// ImageCache exports the image verifier's cache hits and misses (counts the
// verifier keeps) as gantry_image_verifications_total{result}.
func (m *Metrics) ImageCache(hits, misses func() uint64) {
	for result, f := range map[string]func() uint64{"cache_hit": hits, "verified": misses} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gantry_image_verifications_total",
			Help:        "Image verifications asked of the verifier: cache_hit (a digest verified within images.cacheTTL) or verified (signatures and attestations checked against the registry).",
			ConstLabels: prometheus.Labels{"result": result}}, func() float64 { return float64(f()) }))
	}
}

// ReadGate exports how many of the API's reads of the database run now and
// how many wait their turn (the API's read gate keeps the counts).
func (m *Metrics) ReadGate(running, waiting func() float64) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gantry_api_reads_running",
			Help: "API reads the database alone answers, running now (at most maxConcurrentReads)."}, running),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gantry_api_reads_waiting",
			Help: "API reads waiting their turn to run, in arrival order (maxConcurrentReads run at a time)."}, waiting))
}

// Queues is a client-go workqueue.MetricsProvider: each named queue's
// depth, adds, waits, work and retries.
func (m *Metrics) Queues() workqueue.MetricsProvider { return m.queue }

func (q queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}
func (q queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}
func (q queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}
func (q queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name)
}
func (q queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}
func (q queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}
func (q queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}

// Request records one served request.
func (m *Metrics) Request(route, method string, code int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	method = Method(method)
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route, method).Observe(took.Seconds())
}

// StandardMethod says whether method is one of HTTP's own (RFC 9110 and
// PATCH).
func StandardMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return true
	}
	return false
}

// Method is method as a label: itself when standard, else "OTHER" — a
// client chooses the method, and a label per made-up method would grow
// without bound.
func Method(method string) string {
	if StandardMethod(method) {
		return method
	}
	return "OTHER"
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
