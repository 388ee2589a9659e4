package runs

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/gantryhq/gantry/internal/template"
)

// Watch is a rule's state over a run's reports: for a plateau, the best
// value its metric reached and how many reports carrying it came since;
// for a median rule, the best; for a deadline, the reports of this run.
type Watch struct {
	Best  float64 `json:"best"`
	Since int     `json:"since"`
}

// Verdict is an early-stopping rule that fired for a run.
type Verdict struct {
	Rule   string    // plateau, target, costCap, maxSteps, median or deadline
	Action string    // template.StopRun or template.AdviseRun
	Reason string    // the rule and its numbers
	At     time.Time // the report that fired it
}

// Money is what a run has cost and costs an hour, for cost caps and for
// saying what finishing would cost.
type Money struct {
	SoFar, PerHour float64
}

// Curve is an earlier run's best value of a metric by step: Best[i] is the
// best it reported at or before Steps[i] (ascending).
type Curve struct {
	Steps []int64
	Best  []float64
}

// at is the best the run had reached by step, and false when it never got
// that far.
func (c Curve) at(step int64) (float64, bool) {
	if len(c.Steps) == 0 || c.Steps[len(c.Steps)-1] < step {
		return 0, false
	}
	i := sort.Search(len(c.Steps), func(i int) bool { return c.Steps[i] > step })
	if i == 0 {
		return 0, false // its first report is after step
	}
	return c.Best[i-1], true
}

// CurveOf is the curve of a run's reports for metric (lower is better
// unless mode is max): each step's best is the best reported at that step
// or an earlier one, whichever run of the workload reported it (a restart
// goes over steps again).
func CurveOf(rs []Report, metric, mode string) Curve {
	type point struct {
		step int64
		v    float64
	}
	var ps []point
	for _, r := range rs {
		if v, ok := r.Metrics[metric]; ok {
			ps = append(ps, point{r.Step, v})
		}
	}
	slices.SortStableFunc(ps, func(a, b point) int { return cmp.Compare(a.step, b.step) })
	var c Curve
	for _, p := range ps {
		v := p.v
		if n := len(c.Best); n > 0 {
			if best := c.Best[n-1]; mode == "max" && best > v || mode != "max" && best < v {
				v = best
			}
			if c.Steps[n-1] == p.step {
				c.Best[n-1] = v
				continue
			}
		}
		c.Steps, c.Best = append(c.Steps, p.step), append(c.Best, v)
	}
	return c
}

// Peers are what the median rules compare a run with: its template's
// earlier runs' curves, by metric and mode ("val_loss/min").
type Peers map[string][]Curve

// PeerKey is the key of a metric's curves in Peers.
func PeerKey(metric, mode string) string {
	if mode == "" {
		mode = "min"
	}
	return metric + "/" + mode
}

// Judge folds reports into the summary's rule state (after Apply) and
// returns the first verdict they bring, if a rule fires and none has fired
// in this run nor has a person kept the workload going. Rules judge the
// current run only: a restart starts their state and its verdict again.
// peers are the template's earlier runs, for the median rules (nil: none
// known, and those rules do not fire).
func Judge(s Summary, rs []Report, e *template.EarlyStopping, m Money, peers Peers) (Summary, *Verdict) {
	if e == nil || s.KeptBy != "" {
		return s, nil
	}
	if s.Watch == nil {
		s.Watch = map[string]Watch{}
	}
	for _, r := range rs {
		if r.Time.Before(s.RunFrom) {
			continue // an earlier run's report (sent late)
		}
		if r.Time.Equal(s.RunFrom) && r.Step == s.RunFromStep && s.Restarts > 0 {
			// The first report of a new run (started again after a
			// verdict, say): judged afresh.
			clear(s.Watch)
			s.Verdict = nil
		}
		if s.Verdict != nil {
			return s, nil // this run's verdict is in
		}
		for i, rule := range e.Rules {
			if v := judgeOne(&s, strconv.Itoa(i), rule, r, m, peers); v != nil {
				v.Action, v.At = e.Action, r.Time
				s.Verdict = v
				return s, v
			}
		}
	}
	return s, nil
}

func judgeOne(s *Summary, key string, rule template.StopRule, r Report, m Money, peers Peers) *Verdict {
	switch {
	case rule.Plateau != nil:
		p := rule.Plateau
		v, ok := r.Metrics[p.Metric]
		if !ok {
			return nil
		}
		w, seen := s.Watch[key]
		better := p.Mode == "max" && v > w.Best+p.Delta || p.Mode != "max" && v < w.Best-p.Delta
		if !seen || better {
			s.Watch[key] = Watch{Best: v}
			return nil
		}
		w.Since++ // the best stays: small gains add up until they beat it by delta
		s.Watch[key] = w
		if w.Since < p.Reports {
			return nil
		}
		return &Verdict{Rule: "plateau", Reason: fmt.Sprintf("%s has not improved on its best of %s by more than %s for %d reports (step %s)%s",
			p.Metric, num(w.Best), num(p.Delta), w.Since, stepText(*s, r), moneyText(*s, m))}
	case rule.Target != nil:
		t := rule.Target
		v, ok := r.Metrics[t.Metric]
		if !ok || t.Mode == "max" && v < t.Value || t.Mode != "max" && v > t.Value {
			return nil
		}
		return &Verdict{Rule: "target", Reason: fmt.Sprintf("%s reached %s (target %s) at step %s%s", t.Metric, num(v), num(t.Value), stepText(*s, r), moneyText(*s, m))}
	case rule.CostCap > 0:
		if m.SoFar < rule.CostCap {
			return nil
		}
		return &Verdict{Rule: "costCap", Reason: fmt.Sprintf("the run has cost $%.2f, at or over its cap of $%.2f (step %s)", m.SoFar, rule.CostCap, stepText(*s, r))}
	case rule.MaxSteps > 0:
		if r.Step < rule.MaxSteps {
			return nil
		}
		return &Verdict{Rule: "maxSteps", Reason: fmt.Sprintf("the run reached step %s, its cap of %d steps%s", stepText(*s, r), rule.MaxSteps, moneyText(*s, m))}
	case rule.Median != nil:
		md := rule.Median
		v, ok := r.Metrics[md.Metric]
		if !ok {
			return nil
		}
		w, seen := s.Watch[key]
		if !seen || md.Mode == "max" && v > w.Best || md.Mode != "max" && v < w.Best {
			w.Best = v
			s.Watch[key] = w
		}
		if r.Step < md.GraceSteps {
			return nil
		}
		var reached []float64
		for _, c := range peers[PeerKey(md.Metric, md.Mode)] {
			if b, ok := c.at(r.Step); ok {
				reached = append(reached, b)
			}
		}
		need := md.MinRuns
		if need == 0 {
			need = template.DefaultMedianRuns
		}
		if len(reached) < need {
			return nil
		}
		med := median(reached)
		if md.Mode == "max" && w.Best >= med || md.Mode != "max" && w.Best <= med {
			return nil
		}
		return &Verdict{Rule: "median", Reason: fmt.Sprintf("%s's best so far, %s, is worse than the median %s of the best that %d earlier runs of its template had reached by step %s%s",
			md.Metric, num(w.Best), num(med), len(reached), stepText(*s, r), moneyText(*s, m))}
	case rule.Deadline != nil:
		d := rule.Deadline
		within, err := time.ParseDuration(d.Within)
		if err != nil {
			return nil // the template's check refuses it
		}
		w := s.Watch[key]
		w.Since++ // reports in this run
		s.Watch[key] = w
		grace := d.GraceReports
		if grace == 0 {
			grace = template.DefaultDeadlineReports
		}
		left, ok := s.Remaining()
		if w.Since < grace || !ok {
			return nil
		}
		due, finish := s.FirstAt.Add(within), r.Time.Add(left)
		if !finish.After(due) {
			return nil
		}
		return &Verdict{Rule: "deadline", Reason: fmt.Sprintf("at %s steps/h it would finish at %s, %s after its deadline of %s (%s after its first report; step %s)%s",
			num(s.Rate*3600), clock(finish), finish.Sub(due).Round(time.Minute), clock(due), d.Within, stepText(*s, r), moneyText(*s, m))}
	}
	return nil
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func num(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }

func stepText(s Summary, r Report) string {
	if s.TotalSteps > 0 {
		return fmt.Sprintf("%d of %d", r.Step, s.TotalSteps)
	}
	return strconv.FormatInt(r.Step, 10)
}

// moneyText is "; $37.20 so far, about $120.00 to finish at this pace",
// as far as it can be said.
func moneyText(s Summary, m Money) string {
	if m.SoFar <= 0 && m.PerHour <= 0 {
		return ""
	}
	out := fmt.Sprintf("; $%.2f so far", m.SoFar)
	if left, ok := s.Remaining(); ok && m.PerHour > 0 {
		out += fmt.Sprintf(", about $%.2f to finish at this pace", math.Round(left.Hours()*m.PerHour*100)/100)
	}
	return out
}
