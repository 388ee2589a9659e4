package workload_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// BenchmarkShowback: GET /api/v1/costs's work over 100,000 workloads with a
// run each in the period (half still running), grouped by team and by cost
// center, against its natural baseline in the same run: reading the same
// runs from the store without metering or grouping them.
func BenchmarkShowback(b *testing.B) {
	h := newHarness(b)
	ctx := asAlice()
	const n = 100000
	start := h.clock()
	for i := range n {
		w := workload.Workload{ID: fmt.Sprintf("bench%05d", i), Name: "x", Team: team.Name(fmt.Sprintf("team%02d", i%40)), Owner: fmt.Sprintf("user%03d", i%300),
			Template: "vllm-inference", TemplateVersion: 1, Kind: "service", GPUClass: "H100-80GB", GPUCount: 1 + i%4, Parameters: map[string]string{},
			ObjectsHash: "h", Status: workload.Pending, PricePerHour: 6.9 * float64(1+i%4), CreatedAt: start, UpdatedAt: start}
		if err := h.store.CreateWorkload(ctx, w); err != nil {
			b.Fatal(err)
		}
		at := start.Add(time.Duration(i) * time.Second)
		move := func(st workload.Status, at time.Time) {
			if _, err := h.store.UpdateWorkload(ctx, w.ID, func(old workload.Workload) (workload.Workload, error) {
				out, _, err := workload.Transition(old, workload.Reported(st), "", at)
				return out, err
			}); err != nil {
				b.Fatal(err)
			}
		}
		move(workload.Running, at)
		if i%2 == 0 {
			move(workload.Succeeded, at.Add(time.Hour))
		}
	}
	from, to := start, start.Add(48*time.Hour)
	h.advance(30 * time.Hour)
	for _, by := range []string{"team", "costCenter"} {
		b.Run("costs-by-"+by, func(b *testing.B) {
			for b.Loop() {
				c, err := h.svc.Costs(ctx, from, to, by)
				if err != nil || c.Total <= 0 {
					b.Fatal(c.Total, err)
				}
			}
		})
	}
	b.Run("baseline=read-runs", func(b *testing.B) {
		for b.Loop() {
			runs, err := h.store.WorkloadRuns(ctx, from, to, nil)
			if err != nil || len(runs) != n {
				b.Fatal(len(runs), err)
			}
		}
	})
}
