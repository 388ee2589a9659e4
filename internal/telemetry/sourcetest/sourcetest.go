// Package sourcetest is the one suite every telemetry.Source runs — Gantry's
// own store and the Prometheus source — so the rest of Gantry cannot tell
// them apart: the same readings go in, the same series must come out.
package sourcetest

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// Loader stores readings (all of node "n1", Workload set to the workload
// the pod belongs to) in a fresh source and returns it.
type Loader func(t *testing.T, readings []telemetry.Reading) telemetry.Source

// The suite's workloads: "train" (a Job's pod, two devices: a whole GPU and
// a MIG instance), "train-2", whose name has train's as a prefix, and
// another "train" in another namespace; the series of neither may show up
// in train's.
var (
	Train      = telemetry.Target{ID: "w-train", Namespace: "gantry-vision", Name: "train"}
	Train2     = telemetry.Target{ID: "w-train-2", Namespace: "gantry-vision", Name: "train-2"}
	AudioTrain = telemetry.Target{ID: "w-audio-train", Namespace: "gantry-audio", Name: "train"}
)

var (
	trainPod  = telemetry.PodRef{Namespace: "gantry-vision", Name: "train-x7k2p", Container: "main"}
	train2Pod = telemetry.PodRef{Namespace: "gantry-vision", Name: "train-2-q9w4z", Container: "main"}
	audioPod  = telemetry.PodRef{Namespace: "gantry-audio", Name: "train-m4n8d", Container: "main"}
	other     = telemetry.Device{GPU: "GPU-00000000-0000-0000-0000-00000000dddd", Index: 2, Model: "NVIDIA A100-SXM4-80GB"}
	whole     = telemetry.Device{GPU: "GPU-00000000-0000-0000-0000-00000000aaaa", Index: 0, Model: "NVIDIA H100 80GB HBM3"}
	mig       = telemetry.Device{GPU: "GPU-00000000-0000-0000-0000-00000000bbbb", Index: 1, Model: "NVIDIA H100 80GB HBM3",
		MIG: &telemetry.MIGInstance{UUID: "MIG-00000000-0000-0000-0000-00000000cccc", Profile: "1g.10gb", InstanceID: 9}}
)

// value is the suite's deterministic value of a metric at sample i.
func value(m telemetry.Metric, dev int, i int) float64 {
	x := float64((i*37+dev*11)%101) / 100 // 0..1, irregular
	switch m {
	case telemetry.GPUUtil:
		return math.Round(100 * x)
	case telemetry.SMActive:
		return x
	case telemetry.FBUsed:
		return math.Round(1000 + 9000*x)
	}
	return math.NaN() // not measured
}

// Readings are the suite's samples: every 10 s for 30 minutes from start
// (3 s past a minute, so never on a step boundary), gpu_util, sm_active and
// fb_used on train's two devices, train-2's one and the other namespace's
// train's one. Train's MIG instance has none from minute 12 to 15 (steps
// without samples have no point).
func Readings(start time.Time) []telemetry.Reading {
	var out []telemetry.Reading
	for i := 0; i < 180; i++ {
		at := start.Add(time.Duration(i) * 10 * time.Second)
		for d, x := range []struct {
			dev telemetry.Device
			pod telemetry.PodRef
			wl  string
		}{{whole, trainPod, Train.ID}, {mig, trainPod, Train.ID}, {whole, train2Pod, Train2.ID}, {other, audioPod, AudioTrain.ID}} {
			if x.dev.MIG != nil && i >= 72 && i < 90 {
				continue
			}
			v := telemetry.NoValues()
			for _, m := range []telemetry.Metric{telemetry.GPUUtil, telemetry.SMActive, telemetry.FBUsed} {
				v[m] = value(m, d, i)
			}
			out = append(out, telemetry.Reading{Time: at, Device: x.dev, Pod: x.pod, Share: 1, Attribution: "exclusive", Values: v, Workload: x.wl})
		}
	}
	return out
}

// Start is when the suite's samples begin: within the last hour, whole
// seconds, 3 s past a minute.
func Start(now time.Time) time.Time {
	return now.Add(-50 * time.Minute).Truncate(time.Minute).Add(3 * time.Second)
}

// key names a series the same way for every source: the device by its GPU
// and MIG instance (dcgm-exporter's labels carry no MIG UUID), the pod.
func key(m telemetry.Metric, d telemetry.Device, p telemetry.PodRef) string {
	inst := ""
	if d.MIG != nil {
		inst = fmt.Sprintf("/%s/%d", d.MIG.Profile, d.MIG.InstanceID)
	}
	return fmt.Sprintf("%s %s%s %s/%s/%s", m, d.GPU, inst, p.Namespace, p.Name, p.Container)
}

// expect computes what a source must answer from the readings themselves.
func expect(rs []telemetry.Reading, q telemetry.Query) map[string][]telemetry.Point {
	want := map[string][]telemetry.Point{}
	metrics := q.Metrics
	if len(metrics) == 0 {
		metrics = telemetry.AllMetrics()
	}
	type cell struct{ xs []float64 }
	cells := map[string]map[int]*cell{}
	for _, r := range rs {
		if r.Workload != q.Target.ID || r.Time.Before(q.From) || !r.Time.Before(q.To) {
			continue
		}
		k := int(r.Time.Sub(q.From) / q.Step)
		for _, m := range metrics {
			if math.IsNaN(r.Values[m]) {
				continue
			}
			sk := key(m, r.Device, r.Pod)
			if cells[sk] == nil {
				cells[sk] = map[int]*cell{}
			}
			if cells[sk][k] == nil {
				cells[sk][k] = &cell{}
			}
			cells[sk][k].xs = append(cells[sk][k].xs, r.Values[m])
		}
	}
	for sk, byStep := range cells {
		var steps []int
		for k := range byStep {
			steps = append(steps, k)
		}
		sort.Ints(steps)
		for _, k := range steps {
			xs := byStep[k].xs
			sort.Float64s(xs)
			sum := 0.0
			for _, x := range xs {
				sum += x
			}
			want[sk] = append(want[sk], telemetry.Point{T: q.From.Add(time.Duration(k) * q.Step), Avg: sum / float64(len(xs)), Max: xs[len(xs)-1],
				P95: telemetry.Quantile(xs, 0.95), N: len(xs)})
		}
	}
	return want
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b))
}

// Run runs the suite against the source load makes.
func Run(t *testing.T, load Loader) {
	now := time.Now().UTC()
	start := Start(now)
	rs := Readings(start)
	src := load(t, rs)
	ctx := context.Background()
	from := start.Truncate(time.Minute)
	for _, tc := range []struct {
		name  string
		query telemetry.Query
	}{
		{"10 s steps, every metric", telemetry.Query{Target: Train, From: from, To: from.Add(10 * time.Minute), Step: 10 * time.Second}},
		{"1 min steps, two metrics", telemetry.Query{Target: Train, From: from, To: from.Add(30 * time.Minute), Step: time.Minute,
			Metrics: []telemetry.Metric{telemetry.SMActive, telemetry.FBUsed}}},
		{"5 min steps, one metric", telemetry.Query{Target: Train, From: from, To: from.Add(35 * time.Minute), Step: 5 * time.Minute,
			Metrics: []telemetry.Metric{telemetry.GPUUtil}}},
		{"30 s steps from 7 s past a minute", telemetry.Query{Target: Train, From: from.Add(7 * time.Second), To: from.Add(17*time.Minute + 7*time.Second), Step: 30 * time.Second}},
		{"10 s steps across the MIG instance's gap", telemetry.Query{Target: Train, From: from.Add(11 * time.Minute), To: from.Add(16 * time.Minute), Step: 10 * time.Second,
			Metrics: []telemetry.Metric{telemetry.SMActive}}},
		{"only a metric nobody measured", telemetry.Query{Target: Train, From: from, To: from.Add(30 * time.Minute), Step: time.Minute,
			Metrics: []telemetry.Metric{telemetry.Power}}},
		{"the other workload", telemetry.Query{Target: Train2, From: from, To: from.Add(30 * time.Minute), Step: 3 * time.Minute}},
		{"the same name in another namespace", telemetry.Query{Target: AudioTrain, From: from, To: from.Add(30 * time.Minute), Step: 2 * time.Minute}},
		{"a workload without samples", telemetry.Query{Target: telemetry.Target{ID: "w-none", Namespace: "gantry-vision", Name: "tra"}, From: from, To: from.Add(30 * time.Minute), Step: time.Minute}},
		{"a window with no samples", telemetry.Query{Target: Train, From: from.Add(-3 * time.Hour), To: from.Add(-2 * time.Hour), Step: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := src.Series(ctx, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			want := expect(rs, tc.query)
			seen := map[string]bool{}
			for _, s := range got {
				k := key(s.Metric, s.Device, s.Pod)
				if seen[k] {
					t.Errorf("series %s twice", k)
				}
				seen[k] = true
				w, ok := want[k]
				if !ok {
					t.Errorf("series %s should not be there (%d points)", k, len(s.Points))
					continue
				}
				if len(s.Points) != len(w) {
					t.Errorf("%s: %d points, want %d", k, len(s.Points), len(w))
					continue
				}
				for i, p := range s.Points {
					e := w[i]
					if !p.T.Equal(e.T) || p.N != e.N || !near(p.Avg, e.Avg) || !near(p.Max, e.Max) || !near(p.P95, e.P95) {
						t.Errorf("%s point %d: %+v, want %+v", k, i, p, e)
						break
					}
				}
			}
			for k := range want {
				if !seen[k] {
					t.Errorf("series %s missing", k)
				}
			}
		})
	}
	t.Run("a device's identity", func(t *testing.T) {
		got, err := src.Series(ctx, telemetry.Query{Target: Train, From: from, To: from.Add(time.Minute), Step: time.Minute, Metrics: []telemetry.Metric{telemetry.GPUUtil}})
		if err != nil {
			t.Fatal(err)
		}
		var migs, wholes int
		for _, s := range got {
			switch {
			case s.Device.MIG != nil && s.Device.MIG.Profile == "1g.10gb" && s.Device.MIG.InstanceID == 9 && s.Device.GPU == mig.GPU && s.Device.Index == 1:
				migs++
			case s.Device.MIG == nil && s.Device.GPU == whole.GPU && s.Device.Index == 0 && s.Device.Model == whole.Model:
				wholes++
			default:
				t.Errorf("unexpected device %+v", s.Device)
			}
			if s.Pod != trainPod {
				t.Errorf("pod %+v, want %+v", s.Pod, trainPod)
			}
		}
		if migs != 1 || wholes != 1 {
			t.Errorf("%d MIG and %d whole series, want one each", migs, wholes)
		}
	})
}
