package trial

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/workload"
)

// Results are what a trial's runs measured, run by run in the trial's
// order, and the choice they point to.
type Results struct {
	Runs []Measured
	// Done: every run has ended (or was never launched).
	Done bool
	// Best is the index in Runs of the cheapest full run that meets the
	// deadline (the fastest of equal cost), -1 when none can be said;
	// Why says why, either way.
	Best int
	Why  string
}

// Measured is one run of a trial and what its reports say.
type Measured struct {
	Run
	Status       workload.Status
	Reason       string
	PricePerHour float64 // the run's price an hour (its GPUs')
	CostSoFar    float64 // what the trial's run has cost
	// Reports is how many reports the run made; Intervals how many steps
	// apart pairs of them the step time comes from (the first interval, a
	// warm-up, is left out once there are three).
	Reports   int64
	Intervals int
	LastStep  int64
	// StepSeconds is the median seconds a step took, P10 and P90 their
	// spread (0: not measured).
	StepSeconds, StepSecondsP10, StepSecondsP90 float64
	// Throughput is the median of what the run reported of ThroughputMetric
	// (samples_per_s, else tokens_per_s), or steps a second from the step
	// time when it reported neither.
	Throughput       float64
	ThroughputMetric string
	// Scaling is the full run's speed-up over the same class's fewest
	// whole GPUs measured, per GPU added (1: perfect); 0 for the fewest,
	// for a MIG slice, or when not measured.
	Scaling float64
	// FullSteps is the full run's steps (the trial's, else what the run
	// reported as its total); FullTime and FullCost the full run at the
	// measured step time and the run's price (0: cannot be said).
	FullSteps int64
	FullTime  time.Duration
	FullCost  float64
	// MeetsDeadline is nil without a deadline or a full time.
	MeetsDeadline *bool
}

// How many reports a trial reads in all, shared by its runs (each run's
// newest of its current attempt), and at least how many a run.
const (
	maxReports    = 2400
	minRunReports = 100
)

// maxFullSeconds bounds an extrapolated full run (ten years): past it a
// run's reported total is taken for a mistake, not a plan.
const maxFullSeconds = 10 * 365 * 24 * 3600.0

// measure reads the trial's runs and their reports (as Gantry: the caller
// may read the team).
func (s *Service) measure(ctx context.Context, tr Trial) (Results, error) {
	ws, err := s.o.Records.ListWorkloads(ctx, workload.Filter{Trial: tr.ID, Limit: workload.MaxLimit})
	if err != nil {
		return Results{}, fmt.Errorf("trial %s: read its runs: %w", tr.ID, err)
	}
	byID := map[string]workload.Workload{}
	var ids []string
	for _, w := range ws {
		byID[w.ID] = w
		ids = append(ids, w.ID)
	}
	// A run whose launch was not recorded on the trial (Gantry stopped
	// between the two) is found by its choice.
	for i, r := range tr.Runs {
		if r.Workload != "" {
			continue
		}
		for _, w := range ws {
			if w.GPUClass == r.Class && w.GPUCount == r.GPUs && w.MIGProfile == r.MIGProfile {
				tr.Runs[i].Workload, tr.Runs[i].Error = w.ID, ""
			}
		}
	}
	sums, err := s.o.Reports.RunSummaries(ctx, ids)
	if err != nil {
		return Results{}, fmt.Errorf("trial %s: read its runs' progress: %w", tr.ID, err)
	}
	now := s.o.Now()
	perRun := max(minRunReports, maxReports/max(1, len(tr.Runs)))
	ms := make([]Measured, len(tr.Runs))
	for i, r := range tr.Runs {
		m := Measured{Run: r}
		w, ok := byID[r.Workload]
		if ok {
			m.Status, m.Reason, m.PricePerHour, m.CostSoFar = w.Status, w.Reason, w.RunPricePerHour(), w.CostAt(now)
		} else if r.Workload != "" {
			m.Status, m.Reason = workload.Deleted, "its record is gone"
		}
		sum, reported := sums[r.Workload]
		if ok && reported {
			rs, err := s.o.Reports.RunReports(ctx, r.Workload, sum.RunFrom, perRun)
			if err != nil {
				return Results{}, fmt.Errorf("trial %s: read the reports of %s: %w", tr.ID, r.Workload, err)
			}
			m.observe(sum, rs, tr.Spec.Steps)
		}
		ms[i] = m
	}
	return judge(tr.Spec, ms), nil
}

// observe measures a run from its summary and reports (oldest first). A
// total it reported at or under the trial's steps is the trial's own (a
// script that ends at GANTRY_TRIAL_STEPS says so), not the full run's.
func (m *Measured) observe(sum runs.Summary, rs []runs.Report, trialSteps int64) {
	m.Reports, m.LastStep = sum.Reports, sum.Step
	if sum.TotalSteps > trialSteps {
		m.FullSteps = sum.TotalSteps
	}
	rs = currentRun(rs)
	var per []float64
	for i := 1; i < len(rs); i++ {
		dt, ds := rs[i].Time.Sub(rs[i-1].Time).Seconds(), rs[i].Step-rs[i-1].Step
		if ds > 0 && dt > 0 {
			per = append(per, dt/float64(ds))
		}
	}
	if len(per) >= 3 {
		per = per[1:] // the first interval: compiling, loading data, warming caches
	}
	m.Intervals = len(per)
	if len(per) > 0 {
		m.StepSeconds, m.StepSecondsP10, m.StepSecondsP90 = quantile(per, 0.5), quantile(per, 0.1), quantile(per, 0.9)
	}
	for _, name := range []string{"samples_per_s", "tokens_per_s"} {
		var vs []float64
		for i, r := range rs {
			if v, ok := r.Metrics[name]; ok && (i > 0 || len(rs) == 1) && v > 0 && !math.IsInf(v, 0) {
				vs = append(vs, v)
			}
		}
		if len(vs) > 0 {
			m.Throughput, m.ThroughputMetric = quantile(vs, 0.5), name
			return
		}
	}
	if m.StepSeconds > 0 {
		m.Throughput, m.ThroughputMetric = 1/m.StepSeconds, "steps_per_s"
	}
}

// currentRun is the reports of the run's latest attempt: those after the
// last report whose step went back (a restart goes over steps again).
func currentRun(rs []runs.Report) []runs.Report {
	from := 0
	for i := 1; i < len(rs); i++ {
		if rs[i].Step < rs[i-1].Step || rs[i].ResumedFrom >= 0 {
			from = i
		}
	}
	return rs[from:]
}

// judge extrapolates each run to the full run and picks the cheapest that
// meets the deadline.
func judge(sp Spec, ms []Measured) Results {
	res := Results{Runs: ms, Done: true, Best: -1}
	for i := range ms {
		m := &ms[i]
		if m.Workload != "" && !m.Status.Ended() {
			res.Done = false
		}
		if sp.FullSteps > 0 {
			m.FullSteps = sp.FullSteps
		}
		if secs := float64(m.FullSteps) * m.StepSeconds; secs > 0 && secs <= maxFullSeconds {
			m.FullTime = time.Duration(secs * float64(time.Second)).Round(time.Second)
			m.FullCost = math.Round(m.FullTime.Hours()*m.PricePerHour*100) / 100
			if sp.Deadline > 0 {
				ok := m.FullTime <= sp.Deadline
				m.MeetsDeadline = &ok
			}
		}
	}
	// Scaling: the full run's speed-up over the class's fewest whole GPUs
	// measured, divided by the GPUs' ratio (a MIG slice's run scales
	// nothing).
	for i := range ms {
		m := &ms[i]
		if m.FullTime == 0 || m.MIGProfile != "" {
			continue
		}
		b := baseGPUs(ms, m.Class)
		for _, base := range ms {
			if base.Class == m.Class && base.MIGProfile == "" && base.GPUs == b && b < m.GPUs && base.FullTime > 0 {
				m.Scaling = (base.FullTime.Seconds() * float64(base.GPUs)) / (m.FullTime.Seconds() * float64(m.GPUs))
			}
		}
	}
	var cands []int
	measured := 0
	for i, m := range ms {
		if m.FullTime == 0 {
			continue
		}
		measured++
		if m.MeetsDeadline == nil || *m.MeetsDeadline {
			cands = append(cands, i)
		}
	}
	switch {
	case measured == 0 && res.Done:
		res.Why = "no run measured a step time and a full run's steps: the runs must report their step (twice at least) and their total steps, or the trial its fullSteps"
	case measured == 0:
		res.Why = "waiting for the runs' progress reports"
	case len(cands) == 0:
		fastest := slices.MinFunc(indices(ms, func(m Measured) bool { return m.FullTime > 0 }), func(a, b int) int { return cmpDur(ms[a].FullTime, ms[b].FullTime) })
		res.Why = fmt.Sprintf("no choice measured so far finishes within the deadline of %s: the fastest, %s, would take %s ($%.2f)",
			sp.Deadline, ms[fastest].choice(), ms[fastest].FullTime, ms[fastest].FullCost)
	default:
		best := slices.MinFunc(cands, func(a, b int) int {
			if ms[a].FullCost != ms[b].FullCost {
				if ms[a].FullCost < ms[b].FullCost {
					return -1
				}
				return 1
			}
			return cmpDur(ms[a].FullTime, ms[b].FullTime)
		})
		res.Best = best
		b := ms[best]
		within := ""
		if sp.Deadline > 0 {
			within = fmt.Sprintf(" that finishes within %s", sp.Deadline)
		}
		res.Why = fmt.Sprintf("%s is the cheapest of %d measured choices%s: the full run (%d steps) in %s for $%.2f",
			b.choice(), measured, within, b.FullSteps, b.FullTime, b.FullCost)
		fastest := slices.MinFunc(indices(ms, func(m Measured) bool { return m.FullTime > 0 }), func(a, c int) int { return cmpDur(ms[a].FullTime, ms[c].FullTime) })
		if f := ms[fastest]; fastest != best && f.FullTime < b.FullTime {
			res.Why += fmt.Sprintf("; the fastest, %s, takes %s for $%.2f", f.choice(), f.FullTime, f.FullCost)
		}
		if !res.Done {
			res.Why += " (so far: runs are still measuring)"
		}
	}
	return res
}

// baseGPUs is the fewest whole GPUs a run of class measured a full time
// with.
func baseGPUs(ms []Measured, class string) int {
	n := math.MaxInt
	for _, m := range ms {
		if m.Class == class && m.MIGProfile == "" && m.FullTime > 0 && m.GPUs < n {
			n = m.GPUs
		}
	}
	return n
}

// choice names the run's choice: "H100-80GB × 2", "H100-80GB 3g.40gb".
func (r Run) choice() string {
	if r.MIGProfile != "" {
		return r.Class + " " + r.MIGProfile
	}
	return fmt.Sprintf("%s × %d", r.Class, r.GPUs)
}

func indices(ms []Measured, keep func(Measured) bool) []int {
	var out []int
	for i, m := range ms {
		if keep(m) {
			out = append(out, i)
		}
	}
	return out
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// quantile is the q-quantile of xs (nearest rank), which it does not change.
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
