package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// noTelemetry answers telemetry requests on a server built without it.
var noTelemetry = &fault.Unavailable{What: "telemetry", Err: errors.New("not configured on this server")}

func (s *server) PushTelemetry(ctx context.Context, req gen.PushTelemetryRequestObject) (gen.PushTelemetryResponseObject, error) {
	if s.o.Telemetry == nil {
		return nil, noTelemetry
	}
	id, _ := identity.From(ctx) // the gate let only an agent through
	b, err := batchIn(req.Body)
	if err != nil {
		return nil, err
	}
	res, err := s.o.Telemetry.Ingest(ctx, id.Node, b)
	if err != nil {
		return nil, err
	}
	return gen.PushTelemetry202JSONResponse{Accepted: res.Accepted, Unattributed: res.Unattributed}, nil
}

// batchIn converts a pushed batch; a metric Gantry does not know is named.
func batchIn(in *model.TelemetryBatch) (telemetry.Batch, error) {
	readings := deref(in.Readings)
	b := telemetry.Batch{Node: in.Node, Agent: deref(in.Agent), Dropped: uint64(deref(in.Dropped)), Readings: make([]telemetry.Reading, len(readings))}
	var errs fault.List
	for i, r := range readings {
		out := telemetry.Reading{Time: r.T, Device: deviceIn(r.Device), Share: 1, Values: telemetry.NoValues()}
		if r.Share != nil {
			out.Share = *r.Share
		}
		if r.Attribution != nil {
			out.Attribution = string(*r.Attribution)
		}
		if p := r.Pod; p != nil {
			out.Pod = telemetry.PodRef{Namespace: deref(p.Namespace), Name: deref(p.Pod), Container: deref(p.Container)}
		}
		for name, v := range r.Values {
			m, ok := telemetry.ParseMetric(name)
			if !ok {
				errs.Addf(fmt.Sprintf("readings[%d].values.%s", i, name), "unknown metric (known: %s)", strings.Join(metricNames(), ", "))
				continue
			}
			out.Values[m] = v
		}
		b.Readings[i] = out
	}
	for _, g := range deref(in.Gpus) {
		st := telemetry.GPUState{Device: telemetry.Device{GPU: g.Gpu, Index: g.Index, Model: deref(g.Model)},
			MemoryMiB: uint64(max(0, deref(g.MemoryMiB))), MIGEnabled: deref(g.MigEnabled), Unsupported: deref(g.Unsupported)}
		for _, m := range deref(g.MigInstances) {
			st.MIG = append(st.MIG, telemetry.MIGInstance{UUID: m.Uuid, Profile: m.Profile, InstanceID: m.InstanceId})
		}
		if e := g.Ecc; e != nil {
			st.ECC = telemetry.ECC{VolatileSBE: count(e.VolatileSingleBit), VolatileDBE: count(e.VolatileDoubleBit),
				AggregateSBE: count(e.AggregateSingleBit), AggregateDBE: count(e.AggregateDoubleBit)}
		}
		if r := g.Remap; r != nil {
			st.Remap = telemetry.Remap{Correctable: count(r.Correctable), Uncorrectable: count(r.Uncorrectable), Pending: deref(r.Pending), Failure: deref(r.Failure)}
		}
		b.GPUs = append(b.GPUs, st)
	}
	for _, e := range deref(in.Events) {
		b.Events = append(b.Events, telemetry.Event{Time: e.T, GPU: e.Gpu, XID: uint64(max(0, e.Xid)), Detail: deref(e.Detail)})
	}
	return b, errs.Err()
}

func count(p *int) uint64 { return uint64(max(0, deref(p))) }

func deviceIn(d model.Device) telemetry.Device {
	out := telemetry.Device{GPU: d.Gpu, Index: d.Index, Model: deref(d.Model)}
	if d.Mig != nil {
		out.MIG = &telemetry.MIGInstance{UUID: d.Mig.Uuid, Profile: d.Mig.Profile, InstanceID: d.Mig.InstanceId}
	}
	return out
}

func deviceOut(d telemetry.Device) model.Device {
	out := model.Device{Gpu: d.GPU, Index: d.Index}
	if d.Model != "" {
		out.Model = ptr(d.Model)
	}
	if d.MIG != nil {
		out.Mig = &model.MIGInstance{Uuid: d.MIG.UUID, Profile: d.MIG.Profile, InstanceId: d.MIG.InstanceID}
	}
	return out
}

func podOut(p telemetry.PodRef) *model.PodRef {
	if p.Name == "" {
		return nil
	}
	return &model.PodRef{Namespace: ptr(p.Namespace), Pod: ptr(p.Name), Container: ptr(p.Container)}
}

func valuesOut(v telemetry.Values) model.MetricValues {
	out := model.MetricValues{}
	for m := telemetry.Metric(0); m < telemetry.NumMetrics; m++ {
		if !math.IsNaN(v[m]) {
			out[m.String()] = v[m]
		}
	}
	return out
}

func metricNames() []string {
	var out []string
	for _, m := range telemetry.AllMetrics() {
		out = append(out, m.String())
	}
	return out
}

func (s *server) GetWorkloadMetrics(ctx context.Context, req gen.GetWorkloadMetricsRequestObject) (gen.GetWorkloadMetricsResponseObject, error) {
	if s.o.Metrics == nil {
		return nil, noTelemetry
	}
	p := req.Params
	var w telemetry.Window
	var errs fault.List
	w.To = momentParam(&errs, "to", p.To, time.Time{})
	w.From = momentParam(&errs, "from", p.From, time.Time{})
	if p.Step != nil {
		d, err := time.ParseDuration(*p.Step)
		if err != nil || d < time.Second {
			errs.Addf("step", "%q is not a step of at least 1s, such as 10s, 1m or 1h", *p.Step)
		}
		w.Step = d
	}
	// The run's own metrics: run:NAME, run:* for all; with no series
	// asked for, every GPU metric and every run metric.
	var runMetrics []string
	allRun := p.Series == nil
	if p.Series != nil {
		for _, name := range strings.Split(*p.Series, ",") {
			name = strings.TrimSpace(name)
			if rest, ok := strings.CutPrefix(name, "run:"); ok {
				switch {
				case rest == "*":
					allRun = true
				case !runs.MetricName(rest):
					errs.Addf("series", "%q is not a run metric (run:NAME, NAME a letter or _ then up to 63 letters, digits or _ . / -; run:* for all)", name)
				case !slices.Contains(runMetrics, rest):
					runMetrics = append(runMetrics, rest)
				}
				continue
			}
			m, ok := telemetry.ParseMetric(name)
			if !ok {
				errs.Addf("series", "unknown metric %q (known: %s; a run's own as run:NAME)", name, strings.Join(metricNames(), ", "))
				continue
			}
			if !slices.Contains(w.Metrics, m) {
				w.Metrics = append(w.Metrics, m)
			}
		}
		w.NoMetrics = len(w.Metrics) == 0
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	a, err := s.o.Metrics.Workload(ctx, req.Id, w)
	if err != nil {
		return nil, err
	}
	q := a.Query
	out := model.MetricSeriesList{From: q.From, To: q.To, Step: q.Step.String(), Source: model.MetricSeriesListSource(a.Source), Series: []model.MetricSeries{}, Run: []model.RunMetricSeries{}}
	if s.o.Runs != nil && (allRun || len(runMetrics) > 0) {
		rq := runs.SeriesQuery{From: q.From, To: q.To, Step: q.Step}
		if !allRun {
			rq.Metrics = runMetrics
		}
		rss, err := s.o.Runs.Series(ctx, req.Id, rq)
		if err != nil {
			return nil, err
		}
		for _, rs := range rss {
			out.Run = append(out.Run, model.RunMetricSeries{Metric: rs.Metric, Points: pointsOut(rs.Points)})
		}
	}
	out.Energy = make([]model.DeviceEnergy, len(a.Energy))
	for i, e := range a.Energy {
		out.Energy[i] = model.DeviceEnergy{Node: e.Node, Device: deviceOut(e.Device), Pod: podOut(e.Pod), How: model.DeviceEnergyHow(e.How),
			KWh: math.Round(e.KWh*1e6) / 1e6, Minutes: e.Minutes, UnmeasuredMinutes: e.Unmeasured}
	}
	for _, se := range a.Series {
		info := se.Metric.Info()
		out.Series = append(out.Series, model.MetricSeries{Metric: info.Name, Dcgm: info.DCGM, Unit: info.Unit, Device: deviceOut(se.Device), Pod: podOut(se.Pod), Points: pointsOut(se.Points)})
	}
	return gen.GetWorkloadMetrics200JSONResponse(out), nil
}

func pointsOut(ps []telemetry.Point) []model.MetricPoint {
	out := make([]model.MetricPoint, len(ps))
	for i, pt := range ps {
		out[i] = model.MetricPoint{T: pt.T, Avg: pt.Avg, Max: pt.Max, P95: pt.P95, N: pt.N}
	}
	return out
}

func (s *server) ListNodes(ctx context.Context, _ gen.ListNodesRequestObject) (gen.ListNodesResponseObject, error) {
	if s.o.Telemetry == nil {
		return nil, noTelemetry
	}
	nodes, err := s.o.Telemetry.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := model.NodeList{Items: make([]model.Node, len(nodes))}
	for i, n := range nodes {
		out.Items[i] = nodeOut(n)
	}
	return gen.ListNodes200JSONResponse(out), nil
}

func (s *server) GetNode(ctx context.Context, req gen.GetNodeRequestObject) (gen.GetNodeResponseObject, error) {
	if s.o.Telemetry == nil {
		return nil, noTelemetry
	}
	n, err := s.o.Telemetry.Node(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return gen.GetNode200JSONResponse(nodeOut(n)), nil
}

func nodeOut(n telemetry.Node) model.Node {
	out := model.Node{Name: n.Name, Healthy: n.Healthy, Stale: n.Stale, SeenAt: n.SeenAt, Gpus: []model.NodeGPU{}, Devices: []model.DeviceUse{}}
	if n.Agent != "" {
		out.Agent = ptr(n.Agent)
	}
	for _, g := range n.GPUs {
		st := g.State
		ng := model.NodeGPU{Gpu: st.GPU, Index: st.Index, Healthy: g.Healthy, SeenAt: g.SeenAt, Since: ptr(g.Since),
			MemoryMiB: ptr(int(st.MemoryMiB)), MigEnabled: ptr(st.MIGEnabled),
			Ecc: &map[string]int{"volatileSingleBit": int(st.ECC.VolatileSBE), "volatileDoubleBit": int(st.ECC.VolatileDBE),
				"aggregateSingleBit": int(st.ECC.AggregateSBE), "aggregateDoubleBit": int(st.ECC.AggregateDBE)},
			Remap: &map[string]any{"correctable": st.Remap.Correctable, "uncorrectable": st.Remap.Uncorrectable, "pending": st.Remap.Pending, "failure": st.Remap.Failure}}
		if st.Model != "" {
			ng.Model = ptr(st.Model)
		}
		if g.Reason != "" {
			ng.Reason = ptr(g.Reason)
		}
		if len(st.MIG) > 0 {
			mig := make([]model.MIGInstance, len(st.MIG))
			for i, m := range st.MIG {
				mig[i] = model.MIGInstance{Uuid: m.UUID, Profile: m.Profile, InstanceId: m.InstanceID}
			}
			sort.Slice(mig, func(i, j int) bool { return mig[i].InstanceId < mig[j].InstanceId })
			ng.MigInstances = &mig
		}
		if len(st.Unsupported) > 0 {
			ng.Unsupported = ptr(st.Unsupported)
		}
		out.Gpus = append(out.Gpus, ng)
	}
	for _, ls := range [][]telemetry.Latest{n.InUse, n.Idle} {
		for _, l := range ls {
			du := model.DeviceUse{Device: deviceOut(l.Series.Key.Device), Pod: podOut(l.Series.Key.Pod), T: l.Sample.Time, Values: valuesOut(l.Sample.Values)}
			if l.Series.Key.Workload != "" {
				du.Workload = ptr(l.Series.Key.Workload)
			}
			out.Devices = append(out.Devices, du)
		}
	}
	return out
}
