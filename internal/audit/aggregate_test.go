package audit_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
)

// deny is a denial at minute:second past 21:00 on the test's day.
func deny(source, actor, action string, status int, sec int, object string) audit.Record {
	return audit.Record{At: time.Date(2026, 11, 30, 21, 0, sec, 0, time.UTC), Source: source, Actor: actor, Action: action,
		Object: object, Decision: audit.Deny, Status: status, Reason: "not authenticated"}
}

func allow(sec int) audit.Record {
	return audit.Record{At: time.Date(2026, 11, 30, 21, 0, sec, 0, time.UTC), Source: "10.0.0.1", Actor: "alice",
		Action: "POST /api/v1/workloads", Object: "/api/v1/workloads", Decision: audit.Allow, Status: 201}
}

// TestAggregator: the first denial of each kind in a window is written in
// full, the rest counted and summed up in one record when the window closes;
// allowed records pass straight through; the kinds told apart are bounded;
// the chain verifies throughout.
func TestAggregator(t *testing.T) {
	const anon, route = "anonymous", "GET /api/v1/workloads"
	tests := []struct {
		name    string
		maxKeys int
		windows [][]audit.Record // each window's records, then a flush
		want    []string         // every record written: "source actor action status decision: reason"
	}{
		{"allowed records pass through", 0,
			[][]audit.Record{{allow(1), allow(2), allow(3)}},
			[]string{
				"10.0.0.1 alice POST /api/v1/workloads 201 allow: ",
				"10.0.0.1 alice POST /api/v1/workloads 201 allow: ",
				"10.0.0.1 alice POST /api/v1/workloads 201 allow: ",
			}},
		{"repeated denials: one in full, one summary with the count", 0,
			[][]audit.Record{{
				deny("10.0.0.9", anon, route, 401, 1, "/api/v1/workloads"),
				allow(2),
				deny("10.0.0.9", anon, route, 401, 3, "/api/v1/workloads"),
				deny("10.0.0.9", anon, route, 401, 4, "/api/v1/workloads"),
				deny("10.0.0.9", anon, route, 401, 59, "/api/v1/workloads?last"),
			}},
			[]string{
				"10.0.0.9 anonymous GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.1 alice POST /api/v1/workloads 201 allow: ",
				"10.0.0.9 anonymous GET /api/v1/workloads 401 deny: 3 more denials like this one (same source, actor, route and status) from 2026-11-30T21:00:03Z to 2026-11-30T21:00:59Z",
			}},
		{"source, actor, route and status each tell denials apart", 0,
			[][]audit.Record{{
				deny("10.0.0.9", anon, route, 401, 1, ""),
				deny("10.0.0.8", anon, route, 401, 2, ""),
				deny("10.0.0.9", "ann", route, 401, 3, ""),
				deny("10.0.0.9", anon, "GET /api/v1/templates", 401, 4, ""),
				deny("10.0.0.9", anon, route, 429, 5, ""),
				deny("10.0.0.9", anon, route, 429, 6, ""),
			}},
			[]string{
				"10.0.0.9 anonymous GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.8 anonymous GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.9 ann GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.9 anonymous GET /api/v1/templates 401 deny: not authenticated",
				"10.0.0.9 anonymous GET /api/v1/workloads 429 deny: not authenticated",
				"10.0.0.9 anonymous GET /api/v1/workloads 429 deny: 1 more denial like this one (same source, actor, route and status) from 2026-11-30T21:00:06Z to 2026-11-30T21:00:06Z",
			}},
		{"a new window writes the first denial in full again; an empty one adds nothing", 0,
			[][]audit.Record{
				{deny("10.0.0.9", anon, route, 401, 1, ""), deny("10.0.0.9", anon, route, 401, 2, "")},
				{deny("10.0.0.9", anon, route, 401, 3, "")},
				{},
				{deny("10.0.0.9", anon, route, 401, 4, ""), deny("10.0.0.9", anon, route, 401, 5, ""), deny("10.0.0.9", anon, route, 401, 6, "")},
			},
			[]string{
				"10.0.0.9 anonymous GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.9 anonymous GET /api/v1/workloads 401 deny: 1 more denial like this one (same source, actor, route and status) from 2026-11-30T21:00:02Z to 2026-11-30T21:00:02Z",
				"10.0.0.9 anonymous GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.9 anonymous GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.9 anonymous GET /api/v1/workloads 401 deny: 2 more denials like this one (same source, actor, route and status) from 2026-11-30T21:00:05Z to 2026-11-30T21:00:06Z",
			}},
		{"past the bound, new kinds are counted together", 2,
			[][]audit.Record{{
				deny("10.0.0.1", anon, route, 401, 1, ""),
				deny("10.0.0.2", anon, route, 401, 2, ""),
				deny("10.0.0.3", anon, route, 401, 3, ""),
				deny("10.0.0.1", anon, route, 401, 4, ""), // a known kind: its own count
				deny("10.0.0.4", anon, route, 401, 5, ""),
				deny("10.0.0.5", anon, route, 401, 6, ""),
			}},
			[]string{
				"10.0.0.1 anonymous GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.2 anonymous GET /api/v1/workloads 401 deny: not authenticated",
				"10.0.0.1 anonymous GET /api/v1/workloads 401 deny: 1 more denial like this one (same source, actor, route and status) from 2026-11-30T21:00:04Z to 2026-11-30T21:00:04Z",
				"other sources (last: 10.0.0.5) anonymous GET /api/v1/workloads 401 deny: 3 denials of kinds past the 2 told apart in this window, from any source, actor or route (the last one shown) from 2026-11-30T21:00:03Z to 2026-11-30T21:00:06Z",
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openLog(t, 0)
			end := time.Date(2026, 11, 30, 21, 1, 0, 0, time.UTC)
			agg, err := audit.NewAggregator(audit.AggregatorOptions{Store: st, MaxKeys: tc.maxKeys, Now: func() time.Time { return end }})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.windows {
				for _, r := range w {
					if _, err := agg.AppendAudit(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := agg.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			recs, err := agg.AuditRecords(ctx, audit.Filter{Limit: 10_000})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, fmt.Sprintf("%s %s %s %d %s: %s", r.Source, r.Actor, r.Action, r.Status, r.Decision, r.Reason))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("written:\n%q\nwant:\n%q", got, tc.want)
			}
			for _, r := range recs {
				if regexp.MustCompile(`more denials? like`).MatchString(r.Reason) && !r.At.Equal(end) {
					t.Errorf("summary %d dated %v, want the window's end %v", r.Seq, r.At, end)
				}
			}
			if n, problems, err := audit.Verify(ctx, st); err != nil || len(problems) > 0 || n != int64(len(tc.want)) {
				t.Errorf("verify: %d records, %v, %v", n, problems, err)
			}
		})
	}
}

// TestAggregatorSummaryKeepsTheLastDenial: a summary carries the last
// counted denial's object and request id.
func TestAggregatorSummaryKeepsTheLastDenial(t *testing.T) {
	ctx := context.Background()
	st := openLog(t, 0)
	agg, err := audit.NewAggregator(audit.AggregatorOptions{Store: st, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i, obj := range []string{"/api/v1/workloads/a", "/api/v1/workloads/b", "/api/v1/workloads/c"} {
		r := deny("10.0.0.9", "ann", "DELETE /api/v1/workloads/:id", 404, i, obj)
		r.RequestID = "req-" + strconv.Itoa(i)
		if _, err := agg.AppendAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := agg.Flush(ctx); err != nil || n != 1 {
		t.Fatalf("flush: %d summaries, %v", n, err)
	}
	recs, _ := st.AuditRecords(ctx, audit.Filter{Limit: 10_000})
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	if s := recs[1]; s.Object != "/api/v1/workloads/c" || s.RequestID != "req-2" || s.Decision != audit.Deny || s.Status != 404 || s.Actor != "ann" {
		t.Errorf("summary %+v", s)
	}
}

// TestAggregatorConcurrent: many goroutines denied and allowed at once (run
// with -race); every denial is accounted for, in full or in a summary's
// count, and the chain verifies.
func TestAggregatorConcurrent(t *testing.T) {
	ctx := context.Background()
	st := openLog(t, 0)
	agg, err := audit.NewAggregator(audit.AggregatorOptions{Store: st, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := deny(fmt.Sprintf("10.0.0.%d", i%4), "anonymous", "GET /api/v1/workloads", 401, i%60, "")
				if i%10 == 0 {
					r = allow(i % 60)
				}
				if _, err := agg.AppendAudit(ctx, r); err != nil {
					t.Error(err)
				}
				if w == 0 && i%25 == 0 {
					if _, err := agg.Flush(ctx); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if _, err := agg.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := st.AuditRecords(ctx, audit.Filter{Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	more := regexp.MustCompile(`^(\d+) more denials? like this one`)
	allowed, denied := 0, 0
	for _, r := range recs {
		switch m := more.FindStringSubmatch(r.Reason); {
		case r.Decision == audit.Allow:
			allowed++
		case m != nil:
			n, _ := strconv.Atoi(m[1])
			denied += n
		default:
			denied++
		}
	}
	if allowed != workers*each/10 || denied != workers*each*9/10 {
		t.Errorf("accounted for %d allowed and %d denied, want %d and %d", allowed, denied, workers*each/10, workers*each*9/10)
	}
	if len(recs) > workers*each/10+100 {
		t.Errorf("%d records written for %d requests: denials not aggregated", len(recs), workers*each)
	}
	if _, problems, err := audit.Verify(ctx, st); err != nil || len(problems) > 0 {
		t.Errorf("verify: %v, %v", problems, err)
	}
}
