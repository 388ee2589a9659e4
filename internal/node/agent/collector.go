package agent

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// Labels are dcgm-exporter's, so that a cluster's dashboards and alerts work
// unchanged on gantry-agent's /metrics.
var (
	deviceLabels = []string{"gpu", "UUID", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID", "pod", "namespace", "container"}
	gpuLabels    = []string{"gpu", "UUID", "modelName", "Hostname"}
)

var metricDescs = func() [telemetry.NumMetrics]*prometheus.Desc {
	var out [telemetry.NumMetrics]*prometheus.Desc
	for _, m := range telemetry.AllMetrics() {
		info := m.Info()
		out[m] = prometheus.NewDesc(info.DCGM, info.Help+" ("+info.Unit+").", deviceLabels, nil)
	}
	return out
}()

// Health counters, per physical GPU, under dcgm-exporter's names.
var (
	eccSBE        = prometheus.NewDesc("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Single-bit (corrected) ECC errors since the driver loaded.", gpuLabels, nil)
	eccDBE        = prometheus.NewDesc("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Double-bit (uncorrectable) ECC errors since the driver loaded.", gpuLabels, nil)
	eccSBEAgg     = prometheus.NewDesc("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Single-bit ECC errors over the GPU's life.", gpuLabels, nil)
	eccDBEAgg     = prometheus.NewDesc("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Double-bit ECC errors over the GPU's life.", gpuLabels, nil)
	remapCorr     = prometheus.NewDesc("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Rows remapped for correctable errors.", gpuLabels, nil)
	remapUncorr   = prometheus.NewDesc("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Rows remapped for uncorrectable errors.", gpuLabels, nil)
	remapFailure  = prometheus.NewDesc("DCGM_FI_DEV_ROW_REMAP_FAILURE", "1 if a row remapping failed.", gpuLabels, nil)
	xidLast       = prometheus.NewDesc("DCGM_FI_DEV_XID_ERRORS", "The last XID error seen (0: none).", gpuLabels, nil)
	unsupportedMt = prometheus.NewDesc("gantry_agent_unsupported", "1 for each reading a GPU or its driver does not provide (exported as absent, never zero).", append(gpuLabels, "what"), nil)
)

// collector exports the agent's last pass.
type collector struct{ a *Agent }

// Describe sends nothing: the metrics a GPU supports are known only once it
// is read (an unchecked collector).
func (collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.mu.Lock()
	readings, gpus := a.last, a.gpus
	xids := make(map[string]uint64, len(a.lastXID))
	for k, v := range a.lastXID {
		xids[k] = v
	}
	a.mu.Unlock()
	node := a.o.Node
	models := map[string]string{}
	for _, g := range gpus {
		models[g.GPU] = g.Model
	}
	for _, r := range readings {
		d := r.Device
		model := d.Model
		if model == "" {
			model = models[d.GPU]
		}
		profile, instance := "", ""
		if d.MIG != nil {
			profile, instance = d.MIG.Profile, strconv.Itoa(d.MIG.InstanceID)
		}
		labels := []string{strconv.Itoa(d.Index), d.GPU, model, node, profile, instance, r.Pod.Name, r.Pod.Namespace, r.Pod.Container}
		for m, v := range r.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue // not measured: absent, never zero
			}
			ch <- prometheus.MustNewConstMetric(metricDescs[m], prometheus.GaugeValue, v, labels...)
		}
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, g := range gpus {
		labels := []string{strconv.Itoa(g.Index), g.GPU, g.Model, node}
		for _, m := range []struct {
			d *prometheus.Desc
			v float64
		}{
			{eccSBE, float64(g.ECC.VolatileSBE)}, {eccDBE, float64(g.ECC.VolatileDBE)},
			{eccSBEAgg, float64(g.ECC.AggregateSBE)}, {eccDBEAgg, float64(g.ECC.AggregateDBE)},
			{remapCorr, float64(g.Remap.Correctable)}, {remapUncorr, float64(g.Remap.Uncorrectable)},
			{remapFailure, b(g.Remap.Failure)}, {xidLast, float64(xids[g.GPU])},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, m.v, labels...)
		}
		for _, u := range g.Unsupported {
			ch <- prometheus.MustNewConstMetric(unsupportedMt, prometheus.GaugeValue, 1, append(labels, u)...)
		}
	}
}
