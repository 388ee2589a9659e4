package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Store keeps samples, rollups and the nodes' GPUs. Gantry's SQL store
// implements it for SQLite and PostgreSQL.
type Store interface {
	// AppendSamples stores readings in one transaction: their series
	// (created when new), the samples (a repeated series and time is
	// ignored), and each rollup period they fall in marked pending.
	AppendSamples(ctx context.Context, rs []Stored) error
	// PendingRollups lists the periods of res with samples whose rollups
	// are due, oldest first, those that ended before closedBefore only.
	PendingRollups(ctx context.Context, res time.Duration, closedBefore time.Time, limit int) ([]Pending, error)
	// SamplesBetween calls fn with every sample in [from, to), ordered by
	// series and time.
	SamplesBetween(ctx context.Context, from, to time.Time, fn func(Sample) error) error
	// WriteRollups replaces the rollups of one period and clears its pending
	// mark unless samples marked it again since p was read, in one
	// transaction.
	WriteRollups(ctx context.Context, res time.Duration, p Pending, rs []Rollup) error
	// DeleteSamplesBefore deletes at most about limit of the oldest samples
	// older than cutoff; DeleteRollupsBefore does the same for rollups of res.
	DeleteSamplesBefore(ctx context.Context, cutoff time.Time, limit int) (int64, error)
	DeleteRollupsBefore(ctx context.Context, res time.Duration, cutoff time.Time, limit int) (int64, error)
	// DeleteOrphanSeries deletes series with neither samples nor rollups.
	DeleteOrphanSeries(ctx context.Context) (int64, error)
	// WorkloadSeries lists the series attributed to a workload.
	WorkloadSeries(ctx context.Context, workload string) ([]SeriesRecord, error)
	// Samples and Rollups read the given series in [from, to).
	Samples(ctx context.Context, series []int64, from, to time.Time, fn func(Sample) error) error
	Rollups(ctx context.Context, res time.Duration, series []int64, from, to time.Time, fn func(Rollup) error) error
	// SeriesEnergy sums the given series' one-minute rollups whose minute
	// starts in [from, to): one EnergySum a series with any.
	SeriesEnergy(ctx context.Context, series []int64, from, to time.Time) (map[int64]EnergySum, error)
	// UpdateNodeGPUs replaces a node's GPU records with what fn returns,
	// given the current ones, in one transaction.
	UpdateNodeGPUs(ctx context.Context, node string, fn func(old []GPURecord) ([]GPURecord, error)) error
	// NodeGPUs lists the GPU records of one node ("" for every node).
	NodeGPUs(ctx context.Context, node string) ([]GPURecord, error)
	// LatestSamples returns the newest sample of each series of a node seen
	// since a time, with its series.
	LatestSamples(ctx context.Context, node string, since time.Time) ([]Latest, error)
}

// SeriesKey is what a series is: a device on a node, held by a container,
// attributed to a workload.
type SeriesKey struct {
	Node     string
	Device   Device
	Pod      PodRef
	Workload string
}

// ID is the series' stable id: the first 63 bits of a SHA-256 over the key,
// so that every replica names a series alike without asking the database.
func (k SeriesKey) ID() int64 {
	h := sha256.New()
	for _, s := range []string{k.Node, k.Device.ID(), k.Pod.Namespace, k.Pod.Name, k.Pod.Container, k.Workload} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return int64(binary.BigEndian.Uint64(h.Sum(nil)) >> 1)
}

// SeriesRecord is a stored series.
type SeriesRecord struct {
	ID          int64
	Key         SeriesKey
	Attribution string
}

// Stored is a reading as it is stored: its series and sample.
type Stored struct {
	Series      SeriesKey
	Attribution string
	Time        time.Time
	Share       float64
	Values      Values
}

// Pending is a period whose rollups are due, and how many times samples
// marked it.
type Pending struct {
	Bucket time.Time
	Mark   int64
}

// Sample is one stored sample of a series.
type Sample struct {
	Series int64
	Time   time.Time
	// Share is the pod's part of the device's activity (1: it holds it
	// alone), as the reading said.
	Share  float64
	Values Values
}

// Rollup summarises a series over one period: N samples, and per metric
// their mean, largest value and 95th percentile (NaN: not measured).
type Rollup struct {
	Series int64
	Bucket time.Time
	N      int
	Avg    Values
	Max    Values
	P95    Values
	// Joules is the energy the series' pod used in the period
	// (IntervalJoules over each interval that ends in it, the interval
	// from the last sample before the period included); NaN when no
	// interval could say.
	Joules float64
}

// EnergySum is a series' one-minute rollups over a window: the joules of
// those with energy, how many had it and how many had none.
type EnergySum struct {
	Joules              float64
	Minutes, Unmeasured int
}

// Activity is when a workload's GPUs were sampled within a window: its
// first and newest samples, and the newest with a GPU in use (zero: none).
type Activity struct {
	First, Last, LastActive time.Time
}

// Latest is a series' newest sample.
type Latest struct {
	Series SeriesRecord
	Sample Sample
}

// GPURecord is a GPU as its node's agent last reported it, and its health.
type GPURecord struct {
	Node    string
	State   GPUState
	Agent   string
	SeenAt  time.Time
	Healthy bool
	Reason  string    // why not healthy ("" when healthy)
	Since   time.Time // when Healthy last changed
	XID     uint64    // the last critical XID (0: none) and when
	XIDAt   time.Time
}
