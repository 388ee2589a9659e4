package workload

import (
	"time"

	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
)

// Trial is a launch's part in a trial (package trial): the trial's id and
// the caps each of its runs has. Gantry stops the run at Steps (a report of
// that step), MaxRuntime caps its template's max runtime, and MaxCost, when
// set, stops it at that many dollars (a report past them).
type Trial struct {
	ID         string        `json:"id"`
	Steps      int64         `json:"steps"`
	MaxRuntime time.Duration `json:"maxRuntime"`
	MaxCost    float64       `json:"maxCost,omitempty"`
}

// Rules are the trial's caps as early-stopping rules, which stop the run.
func (t *Trial) Rules() *template.EarlyStopping {
	e := &template.EarlyStopping{Action: template.StopRun, Rules: []template.StopRule{{MaxSteps: t.Steps}}}
	if t.MaxCost > 0 {
		e.Rules = append(e.Rules, template.StopRule{CostCap: t.MaxCost})
	}
	return e
}

// capped is r as a trial's run renders it: its max runtime at most the
// trial's (on a copy of the template), and meta marked with the trial.
// Without a trial, r and meta are as they were.
func capped(r *template.Resolved, meta *render.Meta, t *Trial) *template.Resolved {
	if t == nil {
		return r
	}
	meta.Trial, meta.TrialSteps = t.ID, t.Steps
	limit := t.MaxRuntime
	if d, err := time.ParseDuration(r.Template.Spec.Lifecycle.MaxRuntime); err == nil && d > 0 && d < limit {
		limit = d
	}
	tc := *r.Template
	tc.Spec.Lifecycle.MaxRuntime = limit.String()
	rc := *r
	rc.Template = &tc
	return &rc
}
