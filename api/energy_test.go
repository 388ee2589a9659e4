package api_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// TestEnergyInSeries: the metrics endpoint gives a workload's GPU energy per
// device and pod — the kWh of its one-minute rollups in the window, the
// minutes measured and not, and how the device's energy was split to the
// pod — and a window before it ran holds none, nor a request for the run's
// metrics alone.
func TestEnergyInSeries(t *testing.T) {
	g := servertest.WithOverrides(t, server.Overrides{Identify: alice})
	e := envAt(t, g.URL, nil, string(g.Config.Database.DSN))
	ctx := t.Context()
	launched := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "pytorch-train", Team: "vision", Gpu: &model.GPUChoice{Count: new(1)}}))(t)
	if launched.JSON201 == nil {
		t.Fatalf("launch: %d %s", launched.StatusCode(), launched.Body)
	}
	wid := launched.JSON201.Id

	// Ten minutes of 10-second samples ending two minutes ago: a whole
	// GPU at 300 W (its counter rising 3 kJ a sample), and a MIG instance
	// with neither a counter nor power.
	start := time.Now().UTC().Truncate(time.Minute).Add(-12 * time.Minute)
	gpu := telemetry.Device{GPU: "GPU-en0", Index: 0, Model: "NVIDIA H100 80GB HBM3"}
	mig := telemetry.Device{GPU: "GPU-en1", Index: 1, Model: "NVIDIA H100 80GB HBM3", MIG: &telemetry.MIGInstance{UUID: "MIG-en1", Profile: "1g.10gb", InstanceID: 7}}
	pod := telemetry.PodRef{Namespace: "gantry-vision", Name: "train-0", Container: "main"}
	var rs []telemetry.Stored
	for i := range 60 {
		at := start.Add(time.Duration(i) * 10 * time.Second)
		v := telemetry.NoValues()
		v[telemetry.Power], v[telemetry.Energy] = 300, float64(i)*3e6 // mJ
		rs = append(rs, telemetry.Stored{Series: telemetry.SeriesKey{Node: "n1", Device: gpu, Pod: pod, Workload: wid}, Attribution: "exclusive", Time: at, Share: 1, Values: v},
			telemetry.Stored{Series: telemetry.SeriesKey{Node: "n1", Device: mig, Pod: pod, Workload: wid}, Attribution: "exclusive", Time: at, Share: 1, Values: telemetry.NoValues()})
	}
	if err := g.Store.AppendSamples(ctx, rs); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := g.Telemetry.RollUp(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}

	read := func(from, to time.Time, series ...string) *model.MetricSeriesList {
		t.Helper()
		if len(series) == 0 {
			series = []string{"power"}
		}
		r := servertest.Must(e.api.GetWorkloadMetricsWithResponse(ctx, wid, &model.GetWorkloadMetricsParams{From: &from, To: &to, Step: new("1m"), Series: &series[0]}))(t)
		if r.StatusCode() != http.StatusOK || r.JSON200 == nil {
			t.Fatalf("metrics: %d %s", r.StatusCode(), r.Body)
		}
		return r.JSON200
	}
	got := read(start, start.Add(10*time.Minute))
	if len(got.Energy) != 2 {
		t.Fatalf("energy on %d devices, want the GPU and the MIG instance: %+v", len(got.Energy), got.Energy)
	}
	for _, d := range got.Energy {
		if d.Node != "n1" || servertest.Deref(servertest.Deref(d.Pod).Pod) != "train-0" {
			t.Errorf("energy %+v: want node n1, pod train-0", d)
		}
		switch d.Device.Gpu {
		case "GPU-en0":
			// 59 intervals of 10 s at 300 W: 177 kJ, 0.049167 kWh, over
			// the 10 minutes (the first minute's first sample has no
			// interval before it).
			if d.How != model.WholeGpu || d.Minutes != 10 || d.UnmeasuredMinutes != 0 || math.Abs(d.KWh-177e3/3.6e6) > 1e-6 {
				t.Errorf("the GPU: %s, %.6f kWh over %d minutes (%d unmeasured); want whole-gpu, 0.049167 over 10", d.How, d.KWh, d.Minutes, d.UnmeasuredMinutes)
			}
		case "GPU-en1":
			if d.How != model.MigInstance || d.Device.Mig == nil || d.Device.Mig.Profile != "1g.10gb" || d.KWh != 0 || d.Minutes != 0 || d.UnmeasuredMinutes != 10 {
				t.Errorf("the MIG instance: %+v; want mig-instance, none of 10 minutes measured", d)
			}
		default:
			t.Errorf("energy of an unknown device %+v", d)
		}
	}
	if before := read(start.Add(-time.Hour), start); len(before.Energy) != 0 {
		t.Errorf("the hour before it ran: %+v, want no energy", before.Energy)
	}
	if runOnly := read(start, start.Add(10*time.Minute), "run:*"); len(runOnly.Energy) != 0 {
		t.Errorf("only the run's metrics asked for: energy %+v, want none", runOnly.Energy)
	}
}
