package overrides

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/template"
)

func tpl(name, kind, idle, max, sleep string) *template.Template {
	t := &template.Template{}
	t.Metadata.Name = name
	t.Spec.Workload = kind
	t.Spec.Lifecycle = template.Lifecycle{IdleTimeout: idle, IdleTimeoutMax: max, Sleep: sleep}
	return t
}

var templates = map[string]*template.Template{
	"notebook": tpl("notebook", template.Notebook, "2h", "8h", ""),
	"dev":      tpl("dev", template.Notebook, "1h", "", "weekdays 20:00-08:00 Europe/Berlin"),
	"train":    tpl("train", template.Job, "", "", ""),
}

func lookup(name string) (*template.Template, error) {
	if t, ok := templates[name]; ok {
		return t, nil
	}
	return nil, errors.New("no such template")
}

// TestValidate: choices within the templates' limits pass; each outside
// one is named by its field.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  map[string]Template
		want []string // field paths
	}{
		{"within the maximum", map[string]Template{"notebook": {IdleTimeout: "8h"}}, nil},
		{"shorter", map[string]Template{"notebook": {IdleTimeout: "10m"}, "dev": {IdleTimeout: "30m"}}, nil},
		{"another schedule", map[string]Template{"dev": {Sleep: "daily 19:00-07:00 Europe/Paris"}}, nil},
		{"past the maximum", map[string]Template{"notebook": {IdleTimeout: "9h"}}, []string{"templates.notebook.idleTimeout"}},
		{"longer without a maximum", map[string]Template{"dev": {IdleTimeout: "2h"}}, []string{"templates.dev.idleTimeout"}},
		{"too short", map[string]Template{"notebook": {IdleTimeout: "5m"}}, []string{"templates.notebook.idleTimeout"}},
		{"not a duration", map[string]Template{"notebook": {IdleTimeout: "soon"}}, []string{"templates.notebook.idleTimeout"}},
		{"no idle timeout to change", map[string]Template{"train": {IdleTimeout: "1h"}}, []string{"templates.train.idleTimeout"}},
		{"a job sleeps", map[string]Template{"train": {Sleep: "daily 19:00-07:00 UTC"}}, []string{"templates.train.sleep"}},
		{"a bad schedule", map[string]Template{"dev": {Sleep: "nightly"}}, []string{"templates.dev.sleep"}},
		{"no such template", map[string]Template{"ghost": {IdleTimeout: "1h"}}, []string{"templates.ghost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Settings{Templates: tc.set}.Validate(lookup)
			var got []string
			var inv *fault.Invalid
			if errors.As(err, &inv) {
				for _, f := range inv.Fields {
					got = append(got, f.Path)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("fields %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// TestEffective: the team's choice where it made one and the template still
// allows it; the template's otherwise.
func TestEffective(t *testing.T) {
	set := Settings{Templates: map[string]Template{"notebook": {IdleTimeout: "6h"}, "dev": {Sleep: "daily 19:00-07:00 Europe/Paris"}}}
	if lc := set.Effective(templates["notebook"]); lc.IdleTimeout != "6h" {
		t.Errorf("notebook: %+v", lc)
	}
	if lc := set.Effective(templates["dev"]); lc.IdleTimeout != "1h" || lc.Sleep != "daily 19:00-07:00 Europe/Paris" {
		t.Errorf("dev: %+v", lc)
	}
	if lc := set.Effective(templates["train"]); lc != templates["train"].Spec.Lifecycle {
		t.Errorf("train: %+v", lc)
	}
	// The platform team lowered the maximum since: the template's timeout holds.
	lowered := tpl("notebook", template.Notebook, "2h", "4h", "")
	if lc := set.Effective(lowered); lc.IdleTimeout != "2h" {
		t.Errorf("after the maximum was lowered: %+v", lc)
	}
}
