package runs

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/gantryhq/gantry/internal/template"
)

// Watch is a plateau rule's state over a run's reports: the best value its
// metric reached and how many reports carrying it came since.
type Watch struct {
	Best  float64 `json:"best"`
	Since int     `json:"since"`
}

// Verdict is an early-stopping rule that fired for a run.
type Verdict struct {
	Rule   string    // plateau, target or costCap
	Action string    // template.StopRun or template.AdviseRun
	Reason string    // the rule and its numbers
	At     time.Time // the report that fired it
}

// Money is what a run has cost and costs an hour, for cost caps and for
// saying what finishing would cost.
type Money struct {
	SoFar, PerHour float64
}

// Judge folds reports into the summary's rule state (after Apply) and
// returns the first verdict they bring, if a rule fires and none has fired
// in this run nor has a person kept the workload going. Rules judge the
// current run only: a restart starts their state and its verdict again.
func Judge(s Summary, rs []Report, e *template.EarlyStopping, m Money) (Summary, *Verdict) {
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
			if v := judgeOne(&s, strconv.Itoa(i), rule, r, m); v != nil {
				v.Action, v.At = e.Action, r.Time
				s.Verdict = v
				return s, v
			}
		}
	}
	return s, nil
}

func judgeOne(s *Summary, key string, rule template.StopRule, r Report, m Money) *Verdict {
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
	}
	return nil
}

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
