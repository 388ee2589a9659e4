package api_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
)

// TestRunMetricsInSeries: what a run reports comes back from the
// workload's metrics endpoint beside its GPU series — every run metric by
// default, run:NAME and run:* when asked, none when only GPU metrics are
// asked — with a bad name refused at its field, and another team's
// member answered 404 as for the workload.
func TestRunMetricsInSeries(t *testing.T) {
	var wid string
	g := servertest.WithOverrides(t, server.Overrides{
		Identify: func(r *http.Request) (identity.Identity, error) {
			if tok, _ := authn.BearerToken(r.Header.Get("Authorization")); runs.IsRunToken(tok) {
				return identity.Identity{}, errors.New("not a token of this issuer")
			}
			if r.Header.Get("X-Test-Role") == "nlp" {
				return identity.Identity{Subject: "nils", Groups: []string{"ml-nlp"}}, nil
			}
			return alice(r)
		},
		RunReviewer: podReviewer{of: &wid},
	})
	e := envAt(t, g.URL, nil, string(g.Config.Database.DSN))
	ctx := t.Context()
	var token string
	wid, token = launchWithRunToken(t, e)
	// Six reports 20 s apart, the last a minute ago; val_loss on two.
	start := time.Now().UTC().Add(-3 * time.Minute).Truncate(time.Second)
	var reports []string
	for i := range 6 {
		m := fmt.Sprintf(`"loss": %g`, 1/float64(i+1))
		if i%3 == 2 {
			m += fmt.Sprintf(`, "val_loss": %g`, 2/float64(i+1))
		}
		reports = append(reports, fmt.Sprintf(`{"step": %d, "time": %q, "metrics": {%s}}`, 10*(i+1), start.Add(time.Duration(20*i)*time.Second).Format(time.RFC3339), m))
	}
	if got := servertest.Send(t, http.MethodPost, e.url+"/api/v1/workloads/"+wid+"/progress", token, `{"reports": [`+strings.Join(reports, ",")+`]}`); got != http.StatusAccepted {
		t.Fatalf("reports: %d", got)
	}

	from := start.Add(-time.Minute)
	read := func(series *string) *model.MetricSeriesList {
		t.Helper()
		r := servertest.Must(e.api.GetWorkloadMetricsWithResponse(ctx, wid, &model.GetWorkloadMetricsParams{From: &from, Step: new("1m"), Series: series}))(t)
		if r.JSON200 == nil {
			t.Fatalf("metrics (series %v): %d %s", servertest.Deref(series), r.StatusCode(), r.Body)
		}
		return r.JSON200
	}
	// reports counts the reports behind a run series' points.
	reports6 := func(rs []model.RunMetricSeries) map[string]int {
		out := map[string]int{}
		for _, s := range rs {
			for _, p := range s.Points {
				out[s.Metric] += p.N
				if p.Max < p.Avg || p.P95 > p.Max || p.T.Before(from) {
					t.Errorf("%s's point %+v: max below mean, p95 above max or before the window", s.Metric, p)
				}
			}
		}
		return out
	}
	all := read(nil)
	if got := reports6(all.Run); len(all.Run) != 2 || got["loss"] != 6 || got["val_loss"] != 2 {
		t.Fatalf("every series by default: the run's %v, want loss from 6 reports and val_loss from 2", got)
	}
	if one := read(new("run:val_loss")); len(one.Run) != 1 || one.Run[0].Metric != "val_loss" || len(one.Series) != 0 || reports6(one.Run)["val_loss"] != 2 {
		t.Errorf("run:val_loss: run %d series (%v reports), GPU %d; want its 2 reports alone", len(one.Run), reports6(one.Run), len(one.Series))
	}
	if star := read(new("gpu_util,run:*")); len(star.Run) != 2 {
		t.Errorf("run:*: %d run series, want 2", len(star.Run))
	}
	if gpu := read(new("gpu_util")); len(gpu.Run) != 0 {
		t.Errorf("only a GPU metric asked for: %d run series, want none", len(gpu.Run))
	}
	if none := read(new("run:accuracy")); len(none.Run) != 0 {
		t.Errorf("a metric the run never reported: %d series", len(none.Run))
	}
	bad := servertest.Must(e.api.GetWorkloadMetricsWithResponse(ctx, wid, &model.GetWorkloadMetricsParams{Series: new("run:val loss")}))(t)
	if p := bad.ApplicationproblemJSONDefault; bad.StatusCode() != http.StatusUnprocessableEntity || p == nil || !strings.Contains(string(bad.Body), `"series"`) {
		t.Errorf("a bad run metric name: %d %s, want 422 at series", bad.StatusCode(), bad.Body)
	}
	// By default, at a step many metrics could not have: bounded by the
	// run's 2 metrics, not refused for the 64 it might have had.
	hourAgo := start.Add(-time.Hour)
	if fine := servertest.Must(e.api.GetWorkloadMetricsWithResponse(ctx, wid, &model.GetWorkloadMetricsParams{From: &hourAgo, Step: new("1s")}))(t); fine.JSON200 == nil || len(fine.JSON200.Run) != 2 {
		t.Errorf("an hour at 1s by default: %d %s; want 200 with the run's 2 series", fine.StatusCode(), fine.Body)
	}
	var names []string
	for i := range runs.MaxRunSeries + 1 {
		names = append(names, fmt.Sprintf("run:m%d", i))
	}
	if many := servertest.Must(e.api.GetWorkloadMetricsWithResponse(ctx, wid, &model.GetWorkloadMetricsParams{Series: new(strings.Join(names, ","))}))(t); many.StatusCode() != http.StatusUnprocessableEntity || !strings.Contains(string(many.Body), `"series"`) {
		t.Errorf("65 run metrics named: %d %s, want 422 at series", many.StatusCode(), many.Body)
	}
	hidden := servertest.Must(e.as("nlp").GetWorkloadMetricsWithResponse(ctx, wid, &model.GetWorkloadMetricsParams{Series: new("run:loss")}))(t)
	if hidden.StatusCode() != http.StatusNotFound {
		t.Errorf("another team's member: %d, want 404", hidden.StatusCode())
	}
}
