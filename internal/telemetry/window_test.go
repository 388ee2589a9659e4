package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// asked is a Source that records the query it answers.
type asked struct{ q telemetry.Query }

func (a *asked) Series(_ context.Context, q telemetry.Query) ([]telemetry.Series, error) {
	a.q = q
	return []telemetry.Series{}, nil
}

// Energy answers one device's energy over the window asked.
func (a *asked) Energy(_ context.Context, id string, from, to time.Time) ([]telemetry.DeviceEnergy, error) {
	return []telemetry.DeviceEnergy{{Node: id, Minutes: int(to.Sub(from) / time.Minute)}}, nil
}

func TestReaderWindow(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	src := &asked{}
	r, err := telemetry.NewReader(telemetry.ReaderOptions{Source: src, Energy: src, SourceName: "gantry", Now: func() time.Time { return now },
		Target: func(_ context.Context, id string) (telemetry.Target, error) {
			if id != "w1" {
				return telemetry.Target{}, &fault.NotFound{Kind: "workload", Name: id}
			}
			return telemetry.Target{ID: id, Namespace: "gantry-ml", Name: "train"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		w        telemetry.Window
		from, to time.Time
		step     time.Duration
		invalid  bool
	}{
		{name: "defaults: the last hour in 120 points", from: now.Add(-time.Hour), to: now, step: 30 * time.Second},
		{name: "a short window: steps of at least 10 s", w: telemetry.Window{From: now.Add(-5 * time.Minute)}, from: now.Add(-5 * time.Minute), to: now, step: 10 * time.Second},
		{name: "to alone: the hour before it", w: telemetry.Window{To: now.Add(-time.Hour)}, from: now.Add(-2 * time.Hour), to: now.Add(-time.Hour), step: 30 * time.Second},
		{name: "a day", w: telemetry.Window{From: now.Add(-24 * time.Hour)}, from: now.Add(-24 * time.Hour), to: now, step: 12 * time.Minute},
		{name: "a given step", w: telemetry.Window{Step: time.Minute}, from: now.Add(-time.Hour), to: now, step: time.Minute},
		{name: "from after to", w: telemetry.Window{From: now.Add(time.Hour)}, invalid: true},
		{name: "too many points", w: telemetry.Window{From: now.Add(-30 * 24 * time.Hour), Step: time.Second}, invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := r.Workload(context.Background(), "w1", tc.w)
			var inv *fault.Invalid
			if tc.invalid {
				if !errors.As(err, &inv) || inv.Fields[0].Path != "from" {
					t.Fatalf("want *fault.Invalid at from, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			q := a.Query
			if !q.From.Equal(tc.from) || !q.To.Equal(tc.to) || q.Step != tc.step || a.Source != "gantry" || q.Target.Namespace != "gantry-ml" {
				t.Fatalf("query %+v source %q; want %s … %s step %s", q, a.Source, tc.from, tc.to, tc.step)
			}
			if src.q.Step != q.Step || !src.q.From.Equal(q.From) {
				t.Fatalf("the source was asked %+v, the answer says %+v", src.q, q)
			}
			if len(a.Energy) != 1 || a.Energy[0].Node != "w1" || a.Energy[0].Minutes != int(q.To.Sub(q.From)/time.Minute) {
				t.Fatalf("energy %+v; want the workload's over the query's window", a.Energy)
			}
		})
	}
	var nf *fault.NotFound
	if _, err := r.Workload(context.Background(), "w2", telemetry.Window{}); !errors.As(err, &nf) {
		t.Fatalf("a workload the caller may not read: %v, want *fault.NotFound", err)
	}
	if _, err := telemetry.NewReader(telemetry.ReaderOptions{}); err == nil {
		t.Fatal("NewReader without its parts")
	}
}
