package store_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/store/stores"
	"github.com/gantryhq/gantry/internal/telemetry"
)

func telemetryValues(util, fb float64) telemetry.Values {
	v := telemetry.NoValues()
	v[telemetry.GPUUtil], v[telemetry.FBUsed] = util, fb
	return v
}

// testTelemetry is the telemetry part of the conformance suite: samples,
// rollups and their pending marks, retention in batches, GPU records.
func testTelemetry(t *testing.T, s *stores.All) {
	ctx := context.Background()
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	whole := telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-a", Index: 0, Model: "NVIDIA H100"},
		Pod: telemetry.PodRef{Namespace: "gantry-vision", Name: "train-abcde", Container: "main"}, Workload: "w1"}
	mig := telemetry.SeriesKey{Node: "n1", Device: telemetry.Device{GPU: "GPU-b", Index: 1, MIG: &telemetry.MIGInstance{UUID: "MIG-b1", Profile: "1g.10gb", InstanceID: 9}}}
	var rs []telemetry.Stored
	for i := 0; i < 12; i++ { // 10 s apart: two minutes
		at := base.Add(time.Duration(i) * 10 * time.Second)
		rs = append(rs, telemetry.Stored{Series: whole, Attribution: "exclusive", Time: at, Share: 1, Values: telemetryValues(float64(i), 1000)})
		rs = append(rs, telemetry.Stored{Series: mig, Time: at, Share: 1, Values: telemetry.NoValues()})
	}
	if err := s.AppendSamples(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendSamples(ctx, rs[:4]); err != nil { // a repeated push
		t.Fatalf("a repeated sample must be ignored: %v", err)
	}
	// GPU activity: utilization i at sample i, so the GPU is in use (above
	// 1 %) from the third sample to the last.
	act, err := s.GPUActivity(ctx, "w1", base)
	if err != nil || !act.First.Equal(base) || !act.Last.Equal(base.Add(110*time.Second)) || !act.LastActive.Equal(base.Add(110*time.Second)) {
		t.Fatalf("GPU activity %+v %v", act, err)
	}
	if act, err := s.GPUActivity(ctx, "w1", base.Add(time.Hour)); err != nil || !act.First.IsZero() || !act.LastActive.IsZero() {
		t.Fatalf("GPU activity after the samples: %+v %v", act, err)
	}

	series, err := s.WorkloadSeries(ctx, "w1")
	if err != nil || len(series) != 1 || series[0].ID != whole.ID() || series[0].Key.Pod != whole.Pod || series[0].Key.Device.MIG != nil || series[0].Attribution != "exclusive" {
		t.Fatalf("workload series: %+v %v", series, err)
	}
	var got []telemetry.Sample
	err = s.Samples(ctx, []int64{whole.ID(), mig.ID()}, base, base.Add(time.Minute), func(sm telemetry.Sample) error { got = append(got, sm); return nil })
	if err != nil || len(got) != 12 {
		t.Fatalf("samples of the first minute: %d, %v (want 6 of each series)", len(got), err)
	}
	for _, sm := range got {
		if sm.Series == mig.ID() && !math.IsNaN(sm.Values[telemetry.GPUUtil]) {
			t.Fatalf("a value not measured must come back as NaN, not %v", sm.Values[telemetry.GPUUtil])
		}
		if sm.Series == whole.ID() && (sm.Values[telemetry.FBUsed] != 1000 || !math.IsNaN(sm.Values[telemetry.SMActive])) {
			t.Fatalf("sample values: %v", sm.Values)
		}
	}

	// Rollups: both minutes are pending once closed; the hour is not.
	pend, err := s.PendingRollups(ctx, telemetry.Minute, base.Add(2*time.Minute), 10)
	if err != nil || len(pend) != 2 || !pend[0].Bucket.Equal(base) {
		t.Fatalf("pending minutes: %+v %v", pend, err)
	}
	if hp, err := s.PendingRollups(ctx, telemetry.Hour, base.Add(2*time.Minute), 10); err != nil || len(hp) != 0 {
		t.Fatalf("an hour that has not closed is not due: %+v %v", hp, err)
	}
	roll := telemetry.Rollup{Series: whole.ID(), Bucket: base, N: 6, Avg: telemetryValues(2.5, 1000), Max: telemetryValues(5, 1000), P95: telemetryValues(4.75, 1000)}
	// A sample arriving after the pending mark was read marks it again:
	// writing the rollup must not clear the newer mark.
	if err := s.AppendSamples(ctx, []telemetry.Stored{{Series: whole, Time: base.Add(59 * time.Second), Share: 1, Values: telemetryValues(1, 1)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRollups(ctx, telemetry.Minute, pend[0], []telemetry.Rollup{roll}); err != nil {
		t.Fatal(err)
	}
	again, err := s.PendingRollups(ctx, telemetry.Minute, base.Add(2*time.Minute), 10)
	if err != nil || len(again) != 2 || again[0].Mark <= pend[0].Mark {
		t.Fatalf("a period marked again while it was rolled up must stay pending: %+v %v", again, err)
	}
	if err := s.WriteRollups(ctx, telemetry.Minute, again[0], []telemetry.Rollup{roll}); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.PendingRollups(ctx, telemetry.Minute, base.Add(2*time.Minute), 10); len(left) != 1 || !left[0].Bucket.Equal(base.Add(time.Minute)) {
		t.Fatalf("after writing: %+v", left)
	}
	var rolls []telemetry.Rollup
	err = s.Rollups(ctx, telemetry.Minute, []int64{whole.ID()}, base, base.Add(time.Hour), func(r telemetry.Rollup) error { rolls = append(rolls, r); return nil })
	if err != nil || len(rolls) != 1 || rolls[0].N != 6 || rolls[0].P95[telemetry.GPUUtil] != 4.75 || !math.IsNaN(rolls[0].Avg[telemetry.SMActive]) || !rolls[0].Bucket.Equal(base) {
		t.Fatalf("rollups read back: %+v %v", rolls, err)
	}

	// Retention deletes in batches, oldest first.
	n, err := s.DeleteSamplesBefore(ctx, base.Add(time.Minute), 4)
	if err != nil || n < 1 || n > 6 {
		t.Fatalf("a batch of about 4 (two series per time): deleted %d, %v", n, err)
	}
	total := n
	for {
		n, err := s.DeleteSamplesBefore(ctx, base.Add(time.Minute), 4)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != 13 { // 12 of the first minute and the late one
		t.Fatalf("deleted %d samples older than a minute, want 13", total)
	}
	var left int
	s.SamplesBetween(ctx, base, base.Add(time.Hour), func(telemetry.Sample) error { left++; return nil })
	if left != 12 {
		t.Fatalf("%d samples left, want the second minute's 12", left)
	}
	if n, err := s.DeleteRollupsBefore(ctx, telemetry.Minute, base.Add(time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("rollups deleted: %d %v", n, err)
	}

	// Latest samples per series of a node.
	latest, err := s.LatestSamples(ctx, "n1", base)
	if err != nil || len(latest) != 2 {
		t.Fatalf("latest: %+v %v", latest, err)
	}
	for _, l := range latest {
		if !l.Sample.Time.Equal(base.Add(110*time.Second)) || (l.Series.Key.Device.MIG != nil) != (l.Series.ID == mig.ID()) {
			t.Fatalf("latest of %d: %+v", l.Series.ID, l)
		}
	}

	// Series go once they have neither samples nor rollups.
	if n, err := s.DeleteOrphanSeries(ctx); err != nil || n != 0 {
		t.Fatalf("series with samples deleted: %d %v", n, err)
	}
	for {
		n, err := s.DeleteSamplesBefore(ctx, base.Add(time.Hour), 100)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if n, err := s.DeleteOrphanSeries(ctx); err != nil || n != 2 {
		t.Fatalf("series without data deleted: %d %v", n, err)
	}
	if series, err := s.WorkloadSeries(ctx, "w1"); err != nil || len(series) != 0 {
		t.Fatalf("series left: %+v %v", series, err)
	}
	// Written again, a series comes back (the store forgot it had one).
	if err := s.AppendSamples(ctx, rs[:2]); err != nil {
		t.Fatal(err)
	}
	if series, err := s.WorkloadSeries(ctx, "w1"); err != nil || len(series) != 1 {
		t.Fatalf("series written again: %+v %v", series, err)
	}

	// GPU records: replaced in one transaction, given the old ones.
	rec := telemetry.GPURecord{Node: "n1", State: telemetry.GPUState{Device: telemetry.Device{GPU: "GPU-a"}, MemoryMiB: 81559, ECC: telemetry.ECC{VolatileDBE: 2}},
		Agent: "v1", SeenAt: base, Healthy: false, Reason: "ecc", Since: base, XID: 79, XIDAt: base}
	err = s.UpdateNodeGPUs(ctx, "n1", func(old []telemetry.GPURecord) ([]telemetry.GPURecord, error) {
		if len(old) != 0 {
			t.Errorf("old records of a new node: %+v", old)
		}
		return []telemetry.GPURecord{rec}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.UpdateNodeGPUs(ctx, "n1", func(old []telemetry.GPURecord) ([]telemetry.GPURecord, error) {
		if len(old) != 1 || old[0].State.ECC.VolatileDBE != 2 || old[0].XID != 79 || !old[0].XIDAt.Equal(base) || old[0].Healthy {
			t.Errorf("old records: %+v", old)
		}
		return nil, context.Canceled // refused: nothing changes
	})
	if err == nil {
		t.Fatal("an update fn's error must be returned")
	}
	all, err := s.NodeGPUs(ctx, "")
	if err != nil || len(all) != 1 || all[0].Reason != "ecc" || all[0].State.MemoryMiB != 81559 {
		t.Fatalf("GPUs after a refused update: %+v %v", all, err)
	}
	if none, err := s.NodeGPUs(ctx, "n2"); err != nil || len(none) != 0 {
		t.Fatalf("another node: %+v %v", none, err)
	}
}

// BenchmarkIngest measures the telemetry write path on both backends: a
// batch from one node with 8 GPUs × 7 MIG instances, 10 samples each (what
// an agent pushes after 100 s), through telemetry.Service.Ingest (checks,
// series, samples, pending rollups in one transaction), next to the natural
// baseline: the same rows INSERTed one statement each in one transaction
// with database/sql. samples/s counts device readings (15 metrics each).
// ingestBatch numbers the benchmark's batches across runs (-count), so no
// run writes samples an earlier run wrote to the same database.
var ingestBatch int

func BenchmarkIngest(b *testing.B) {
	ctx := context.Background()
	for name, open := range backends(b) {
		b.Run(name, func(b *testing.B) {
			s := open(b)
			start := time.Now().Add(-47 * time.Hour).Truncate(time.Second)
			batch := func(k int) telemetry.Batch {
				bt := telemetry.Batch{Node: "n1"}
				for i := 0; i < 10; i++ {
					at := start.Add(time.Duration(k*10+i) * 10 * time.Millisecond)
					for g := 0; g < 8; g++ {
						for m := 0; m < 7; m++ {
							v := telemetry.NoValues()
							for j := range v {
								v[j] = float64((i+g+m+j)%100) / 100
							}
							dev := telemetry.Device{GPU: fmt.Sprintf("GPU-%d", g), Index: g, MIG: &telemetry.MIGInstance{UUID: fmt.Sprintf("MIG-%d-%d", g, m), Profile: "1g.10gb", InstanceID: m}}
							bt.Readings = append(bt.Readings, telemetry.Reading{Time: at, Device: dev, Share: 1, Values: v})
						}
					}
				}
				return bt
			}
			b.Run("Gantry", func(b *testing.B) {
				svc, err := telemetry.New(telemetry.Options{Store: s.Telemetry, Now: time.Now})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for b.Loop() {
					bt := batch(ingestBatch)
					ingestBatch++
					if _, err := svc.Ingest(ctx, "n1", bt); err != nil {
						b.Fatal(err)
					}
					n += len(bt.Readings)
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "samples/s")
			})
			b.Run("DirectInsert", func(b *testing.B) {
				db := rawDB(b, name)
				// Every metric's column, as the store's schema names them.
				cols, marks := []string{"series_id", "t", "share"}, []string{"$1", "$2", "$3"}
				for _, m := range telemetry.AllMetrics() {
					cols = append(cols, m.Info().Name)
					marks = append(marks, fmt.Sprintf("$%d", len(cols)))
				}
				if name != "postgres" {
					for i := range marks {
						marks[i] = "?"
					}
				}
				q := "INSERT INTO gpu_samples (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(marks, ", ") + ")"
				n := 0
				for b.Loop() {
					bt := batch(ingestBatch)
					ingestBatch++
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					st, err := tx.PrepareContext(ctx, q)
					if err != nil {
						b.Fatal(err)
					}
					for i, r := range bt.Readings {
						args := []any{int64(i%56 + 1000), r.Time.UnixMilli(), r.Share}
						for _, v := range r.Values {
							args = append(args, v)
						}
						if _, err := st.ExecContext(ctx, args...); err != nil {
							b.Fatal(err)
						}
					}
					st.Close()
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
					n += len(bt.Readings)
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "samples/s")
			})
		})
	}
}

// testConcurrentPushes is nodes pushing at once, each push's samples
// spread over the same minutes and hours, so every push marks the same
// rollup periods pending: each must be stored (on PostgreSQL, two pushes
// that lock those rows in different orders deadlock, and one is refused).
func testConcurrentPushes(t *testing.T, s *stores.All) {
	ctx := context.Background()
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	const nodes, rounds, minutes = 8, 6, 90
	errs := make(chan error, nodes*rounds)
	var wg sync.WaitGroup
	for n := range nodes {
		wg.Go(func() {
			key := telemetry.SeriesKey{Node: fmt.Sprintf("push-%d", n), Device: telemetry.Device{GPU: fmt.Sprintf("GPU-push-%d", n), Model: "NVIDIA H100"}}
			for r := range rounds {
				var rs []telemetry.Stored
				for m := range minutes {
					at := base.Add(time.Duration(m)*time.Minute + time.Duration(r)*time.Second)
					rs = append(rs, telemetry.Stored{Series: key, Time: at, Share: 1, Values: telemetryValues(50, 1000)})
				}
				errs <- s.AppendSamples(ctx, rs)
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	var first error
	for err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d concurrent pushes failed; the first: %v", failed, nodes*rounds, first)
	}

	// The same new series in several pushes at once (an agent's retry
	// beside its first try): every push is stored (the loser of the race
	// for the series' row was refused on gpu_series_key).
	const series, each = 10, 4
	for n := range series {
		key := telemetry.SeriesKey{Node: "twice", Device: telemetry.Device{GPU: fmt.Sprintf("GPU-twice-%d", n), Model: "NVIDIA H100"}}
		err := atOnce(each, func(i int) error {
			return s.AppendSamples(ctx, []telemetry.Stored{{Series: key, Time: base.Add(time.Duration(i) * time.Minute), Share: 1, Values: telemetryValues(50, 1000)}})
		})
		if err != nil {
			t.Fatalf("series %d: one of %d pushes of it at once: %v", n, each, err)
		}
		stored := 0
		if err := s.Samples(ctx, []int64{key.ID()}, base, base.Add(time.Hour), func(telemetry.Sample) error { stored++; return nil }); err != nil || stored != each {
			t.Fatalf("series %d after %d pushes at once: %d samples stored (%v)", n, each, stored, err)
		}
	}
}
