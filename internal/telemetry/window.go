package telemetry

import (
	"context"
	"errors"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// Defaults of a workload's metrics query.
const (
	// DefaultWindow is how far back a query without from reads.
	DefaultWindow = time.Hour
	// DefaultPoints is about how many points a query without a step gets,
	// at steps of at least MinDefaultStep.
	DefaultPoints  = 120
	MinDefaultStep = 10 * time.Second
)

// Window is what a caller asks of a workload's metrics. A zero field takes
// its default: the DefaultWindow up to now, about DefaultPoints points,
// every metric.
type Window struct {
	From, To time.Time
	Step     time.Duration
	Metrics  []Metric
	// NoMetrics asks for no series: only the window's defaults and checks
	// (a caller that reads other series over the same window).
	NoMetrics bool
}

// Answer is a workload's series and the query that read them.
type Answer struct {
	Query  Query
	Series []Series
	// Source names where the series were read ("gantry", "prometheus").
	Source string
	// Energy is the workload's per device and pod over the window, from
	// Gantry's own store whatever the Source; none when Window.NoMetrics.
	Energy []DeviceEnergy
}

// EnergySource is what a Reader reads energy from (Service.Energy).
type EnergySource interface {
	Energy(ctx context.Context, id string, from, to time.Time) ([]DeviceEnergy, error)
}

// ReaderOptions are what a Reader is made of; all are required.
type ReaderOptions struct {
	Source Source
	// Energy answers the energy per device (Gantry's own store).
	Energy EnergySource
	// SourceName says which Source it is ("gantry", "prometheus").
	SourceName string
	// Target resolves a workload the caller may read to where its series
	// are kept (*fault.NotFound for one they may not).
	Target func(ctx context.Context, id string) (Target, error)
	Now    func() time.Time
}

// Reader answers the metrics queries of one workload at a time: it resolves
// the workload, chooses the window's defaults and checks it.
type Reader struct{ o ReaderOptions }

// NewReader checks the options.
func NewReader(o ReaderOptions) (*Reader, error) {
	if o.Source == nil || o.Energy == nil || o.SourceName == "" || o.Target == nil || o.Now == nil {
		return nil, errors.New("telemetry: a Reader needs Source, Energy, SourceName, Target and Now")
	}
	return &Reader{o: o}, nil
}

// Workload reads the series of workload id over w.
func (r *Reader) Workload(ctx context.Context, id string, w Window) (Answer, error) {
	target, err := r.o.Target(ctx, id)
	if err != nil {
		return Answer{}, err
	}
	q := Query{Target: target, From: w.From, To: w.To, Step: w.Step, Metrics: w.Metrics}
	if q.To.IsZero() {
		q.To = r.o.Now().UTC()
	}
	if q.From.IsZero() {
		q.From = q.To.Add(-DefaultWindow)
	}
	if q.Step == 0 {
		q.Step = max(MinDefaultStep, (q.To.Sub(q.From) / DefaultPoints).Round(time.Second))
	}
	if err := CheckQuery(q); err != nil {
		return Answer{}, &fault.Invalid{Fields: []fault.Field{{Path: "from", Message: err.Error()}}}
	}
	series := []Series{}
	if !w.NoMetrics {
		if series, err = r.o.Source.Series(ctx, q); err != nil {
			return Answer{}, err
		}
	}
	energy := []DeviceEnergy{}
	if !w.NoMetrics { // asked for no GPU series, it gets no GPU energy
		if energy, err = r.o.Energy.Energy(ctx, target.ID, q.From, q.To); err != nil {
			return Answer{}, err
		}
	}
	return Answer{Query: q, Series: series, Source: r.o.SourceName, Energy: energy}, nil
}
