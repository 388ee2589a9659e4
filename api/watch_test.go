package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/servertest"
)

// TestWatchWorkload: the stream sends the workload at once, then again when
// it changes (a stop, made through the API meanwhile), with a retry hint for
// browsers' reconnects, and ends after the workload is deleted; a workload
// that does not exist is a 404 problem, not a stream.
func TestWatchWorkload(t *testing.T) {
	e := newEnv(t, alice)
	r := servertest.Must(e.api.CreateWorkloadWithResponse(t.Context(), nil, model.LaunchRequest{Template: "dev-environment", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d", r.StatusCode())
	}
	id := r.JSON201.Id
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Not WatchWorkloadWithResponse: it would read the stream to its end.
	resp, err := e.api.WatchWorkload(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	retry := false
	next := func() (event, status string) {
		t.Helper()
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "retry: 3000":
				retry = true
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				var got model.Workload
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &got); err != nil || got.Id != id {
					t.Fatalf("event data %q: %v", line, err)
				}
				return event, string(got.Status)
			}
		}
		t.Fatalf("the stream ended: %v", sc.Err())
		return "", ""
	}
	if ev, st := next(); ev != "workload" || st != "Pending" || !retry {
		t.Fatalf("first event %s %s (retry hint %v)", ev, st, retry)
	}
	if s := servertest.Must(e.api.StopWorkloadWithResponse(t.Context(), id))(t).StatusCode(); s != 200 {
		t.Fatalf("stop: %d", s)
	}
	if ev, st := next(); ev != "workload" || st != "Stopped" {
		t.Fatalf("after the stop: %s %s", ev, st)
	}
	// Deleted: the last event, then the stream ends.
	if s := servertest.Must(e.api.DeleteWorkloadWithResponse(t.Context(), id))(t).StatusCode(); s != 204 {
		t.Fatalf("delete: %d", s)
	}
	if ev, st := next(); ev != "workload" || st != "Deleted" {
		t.Fatalf("after the delete: %s %s", ev, st)
	}
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			t.Fatalf("an event after Deleted: %s", sc.Text())
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the stream did not end after Deleted")
	}
	if s := servertest.Must(e.api.WatchWorkloadWithResponse(ctx, "zzzzzzzzzz"))(t).StatusCode(); s != 404 { // a problem, not a stream
		t.Fatalf("a workload that does not exist: %d", s)
	}
}
