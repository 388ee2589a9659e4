package telemetry

import (
	"context"
	"time"
)

// Target is the workload whose series a query asks for: its id (how Gantry's
// own store keys samples), and its namespace and object name (how a
// Prometheus that scrapes dcgm-exporter finds its pods: pods of a Job are
// named <name>-<5 chars>, of a StatefulSet <name>-<ordinal>, of a Deployment
// <name>-<hash>-<5 chars>).
type Target struct {
	ID        string
	Namespace string
	Name      string
}

// Query asks for a workload's series between From and To (inclusive of From,
// exclusive of To), one point per Step, for the given metrics (none: all).
type Query struct {
	Target  Target
	From    time.Time
	To      time.Time
	Step    time.Duration
	Metrics []Metric
}

// Point is one step of a series: the mean, the largest value and the 95th
// percentile of the samples in [T, T+Step). Over raw samples all three are
// exact; over rollups the mean is weighted by sample count, the max is
// exact, and the p95 is the largest p95 of the rollup buckets in the step
// (an upper bound).
type Point struct {
	T   time.Time `json:"t"`
	Avg float64   `json:"avg"`
	Max float64   `json:"max"`
	P95 float64   `json:"p95"`
	N   int       `json:"n"` // samples behind the point
}

// Series is one metric of one device of a workload.
type Series struct {
	Metric Metric
	Device Device
	Pod    PodRef
	Points []Point
}

// Source answers series queries. Gantry's own store is one; a Prometheus
// that scrapes dcgm-exporter (metrics.prometheus.url) is the other; the rest
// of Gantry cannot tell them apart (telemetry/sourcetest checks both alike).
type Source interface {
	Series(ctx context.Context, q Query) ([]Series, error)
}
