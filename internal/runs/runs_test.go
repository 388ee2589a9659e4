package runs_test

import (
	"context"
	"encoding/base64"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/projected"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/template"
)

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func report(step int64) runs.Report {
	return runs.Report{Step: step, TotalSteps: 1000, Epoch: math.NaN(), ResumedFrom: -1, Metrics: map[string]float64{"loss": 0.5}}
}

// TestCheck: each bad report is named by its field path; times left out
// are filled in.
func TestCheck(t *testing.T) {
	ok := []runs.Report{report(10), report(20)}
	if err := runs.Check(ok, now); err != nil || !ok[0].Time.Equal(now) {
		t.Fatalf("good reports: %v, time %v", err, ok[0].Time)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*runs.Report)
		field string
	}{
		{"negative step", func(r *runs.Report) { r.Step = -1 }, "reports[1].step"},
		{"step past the total", func(r *runs.Report) { r.Step = 1001 }, "reports[1].totalSteps"},
		{"infinite epoch", func(r *runs.Report) { r.Epoch = math.Inf(1) }, "reports[1].epoch"},
		{"NaN metric", func(r *runs.Report) { r.Metrics["loss"] = math.NaN() }, "reports[1].metrics.loss"},
		{"metric past 1e100", func(r *runs.Report) { r.Metrics["loss"] = -2e100 }, "reports[1].metrics.loss"},
		{"bad metric name", func(r *runs.Report) { r.Metrics["val loss"] = 1 }, "reports[1].metrics"},
		{"in the future", func(r *runs.Report) { r.Time = now.Add(time.Hour) }, "reports[1].time"},
		{"out of order", func(r *runs.Report) { r.Time = now.Add(-time.Hour) }, "reports[1].time"},
		{"resumed past its step", func(r *runs.Report) { r.ResumedFrom = 30 }, "reports[1].resumedFrom"},
	} {
		rs := []runs.Report{report(10), report(20)}
		rs[0].Time = now.Add(-time.Minute)
		rs[1].Metrics = map[string]float64{"loss": 0.4}
		tc.edit(&rs[1])
		err := runs.Check(rs, now)
		var inv *fault.Invalid
		if !errors.As(err, &inv) || len(inv.Fields) != 1 || inv.Fields[0].Path != tc.field {
			t.Errorf("%s: %v, want one error at %s", tc.name, err, tc.field)
		}
	}
	if err := runs.Check(nil, now); err == nil {
		t.Error("no reports accepted")
	}
	if err := runs.Check(make([]runs.Report, runs.MaxReports+1), now); err == nil || !strings.Contains(err.Error(), "at most 1000") {
		t.Errorf("too many reports: %v", err)
	}
}

// TestApply: the summary's step, rate and time left over a run that slows
// down, restarts from a checkpoint and finishes.
func TestApply(t *testing.T) {
	at := func(sec int, step int64) runs.Report {
		r := report(step)
		r.Time = now.Add(time.Duration(sec) * time.Second)
		return r
	}
	s := runs.Apply(runs.Summary{}, []runs.Report{at(0, 0), at(10, 100)})
	if s.Rate != 10 || s.Reports != 2 || !s.FirstAt.Equal(now) || s.Restarts != 0 {
		t.Fatalf("two reports 10 s and 100 steps apart: %+v", s)
	}
	if left, ok := s.Remaining(); !ok || left != 90*time.Second {
		t.Fatalf("remaining %v %v, want 90s", left, ok)
	}
	if f, ok := s.Fraction(); !ok || f != 0.1 {
		t.Fatalf("fraction %v", f)
	}
	s = runs.Apply(s, []runs.Report{at(20, 150)}) // 5 steps/s now: smoothed
	if math.Abs(s.Rate-(0.3*5+0.7*10)) > 1e-9 {
		t.Fatalf("smoothed rate %v", s.Rate)
	}
	// A report at the same step is not progress.
	if s = runs.Apply(s, []runs.Report{at(30, 150)}); !s.AdvancedAt.Equal(now.Add(20 * time.Second)) {
		t.Fatalf("advanced at %v, want the report at 20 s", s.AdvancedAt)
	}
	resumed := at(100, 100)
	resumed.ResumedFrom = 100
	s = runs.Apply(s, []runs.Report{resumed})
	if s.Restarts != 1 || s.ResumedFrom != 100 || s.Rate != 0 || s.RunFromStep != 100 || !s.RunFrom.Equal(resumed.Time) {
		t.Fatalf("after a resume: %+v", s)
	}
	if _, ok := s.Remaining(); ok {
		t.Fatal("a time left without a rate of the new run")
	}
	s = runs.Apply(s, []runs.Report{at(110, 200), at(120, 1000)})
	if left, ok := s.Remaining(); !ok || left != 0 || s.Step != 1000 {
		t.Fatalf("finished: %v %v %+v", left, ok, s)
	}
	if s2 := runs.Apply(runs.Summary{}, []runs.Report{{Time: now, Step: 5, Epoch: math.NaN(), ResumedFrom: -1}}); s2.TotalSteps != 0 {
		t.Fatalf("no total: %+v", s2)
	} else if _, ok := s2.Fraction(); ok {
		t.Fatal("a fraction without a total")
	}
}

type memStore struct {
	runs.RollupStore // nil: these tests roll nothing up (series_test.go does, on the real store)
	sum              runs.Summary
	rs               []runs.Report
	seen             bool
	others           map[string][]runs.Report // other workloads' reports
}

func (m *memStore) AppendReports(_ context.Context, as []runs.Append) ([]runs.Summary, error) {
	var out []runs.Summary
	for _, a := range as {
		m.rs, m.seen = append(m.rs, a.Reports...), true
		m.sum = a.Update(m.sum)
		out = append(out, m.sum)
	}
	return out, nil
}
func (m *memStore) RunSummary(context.Context, string) (runs.Summary, error) {
	if !m.seen {
		return runs.Summary{}, &fault.NotFound{Kind: "run progress", Name: "w"}
	}
	return m.sum, nil
}
func (m *memStore) RunSummaries(context.Context, []string) (map[string]runs.Summary, error) {
	if !m.seen {
		return nil, nil
	}
	return map[string]runs.Summary{m.sum.Workload: m.sum}, nil
}
func (m *memStore) RunReports(_ context.Context, id string, _ time.Time, _ int) ([]runs.Report, error) {
	if rs, ok := m.others[id]; ok {
		return rs, nil
	}
	return m.rs, nil
}
func (m *memStore) DeleteRunsBefore(_ context.Context, before time.Time, limit int) (int64, error) {
	var kept []runs.Report
	n := int64(0)
	for _, r := range m.rs {
		if r.Time.Before(before) && n < int64(limit) {
			n++
			continue
		}
		kept = append(kept, r)
	}
	m.rs = kept
	return n, nil
}

// DeleteRunRollupsBefore: this store makes no rollups.
func (m *memStore) DeleteRunRollupsBefore(context.Context, time.Time, int) (int64, error) {
	return 0, nil
}

// workloads stands for the workload service: which it lets the caller
// see, the template's rules and the money, and what it was asked to do.
type workloads struct {
	visible  map[string]bool
	rules    *template.EarlyStopping
	money    runs.Money
	stopped  []string // reasons
	resumed  int
	manageOK bool
	earlier  []string // EarlierRuns' answer
}

func (w *workloads) Visible(_ context.Context, id string) error {
	if !w.visible[id] {
		return &fault.NotFound{Kind: "workload", Name: id}
	}
	return nil
}
func (w *workloads) Manageable(_ context.Context, id string) error {
	if !w.manageOK {
		return &fault.Forbidden{Reason: "not yours"}
	}
	return nil
}
func (w *workloads) ForRun(context.Context, string) (runs.RunInfo, error) {
	return runs.RunInfo{Namespace: "gantry-vision", Rules: w.rules, Money: w.money}, nil
}
func (w *workloads) EarlierRuns(context.Context, string, int) ([]string, error) {
	return w.earlier, nil
}
func (w *workloads) StopForRule(_ context.Context, _ string, reason string) error {
	w.stopped = append(w.stopped, reason)
	return nil
}
func (w *workloads) Resume(context.Context, string) error { w.resumed++; return nil }

type outbox struct{ events []string }

func (o *outbox) Notify(_ context.Context, m notify.Message) error {
	o.events = append(o.events, m.Event)
	return nil
}

// TestService: only the workload's own run reports; its readers read.
func TestService(t *testing.T) {
	st := &memStore{}
	svc, err := runs.New(runs.Options{Store: st, Workloads: &workloads{visible: map[string]bool{"w1": true}}, Notifier: &outbox{}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	run := identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: "w1", Pod: "gantry-vision/train-w1-abcde"})
	other := identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: "w2", Pod: "gantry-vision/train-w2-abcde"})
	// A pod in another namespace labelled as the workload's.
	elsewhere := identity.With(context.Background(), identity.Identity{Via: identity.ViaRun, Workload: "w1", Pod: "mallory/fake"})
	person := identity.With(context.Background(), identity.Identity{Subject: "alice", Via: identity.ViaToken})
	if _, _, ok, err := svc.Progress(person, "w1", time.Time{}, 10); err != nil || ok {
		t.Fatalf("nothing reported: %v %v", ok, err)
	}
	for _, ctx := range []context.Context{other, person, elsewhere} {
		if _, err := svc.Report(ctx, "w1", []runs.Report{report(1)}); !errors.Is(err, runs.ErrNotTheRun) {
			t.Fatalf("a report by another: %v", err)
		}
	}
	if _, err := svc.Report(run, "w1", []runs.Report{report(1)}); err != nil {
		t.Fatal(err)
	}
	sum, rs, ok, err := svc.Progress(person, "w1", time.Time{}, 10)
	if err != nil || !ok || sum.Step != 1 || len(rs) != 1 || sum.Workload != "w1" {
		t.Fatalf("progress %+v %v %v", sum, ok, err)
	}
	if _, _, _, err := svc.Progress(person, "w9", time.Time{}, 10); err == nil {
		t.Fatal("progress of a workload the caller may not see")
	}
	for i := range 5 {
		r := report(int64(10 + i))
		r.Time = now.Add(-48*time.Hour + time.Duration(i)*time.Second)
		st.rs = append(st.rs, r)
	}
	if n, err := svc.Prune(context.Background(), 24*time.Hour, 2); err != nil || n != 5 || len(st.rs) != 1 {
		t.Fatalf("pruned %d (%v), %d left, want 5 and the newest", n, err, len(st.rs))
	}
}

type reviewer struct {
	r     runs.Review
	err   error
	calls atomic.Int64
	// refuse: the workloads whose cluster does not accept the token.
	refuse map[string]bool
}

func (f *reviewer) ReviewRunToken(_ context.Context, _, _, workload string) (runs.Review, error) {
	f.calls.Add(1)
	if f.refuse[workload] {
		return runs.Review{Authenticated: false, Error: "invalid bearer token"}, nil
	}
	return f.r, f.err
}

func jwt(aud string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"aud":["`+aud+`"],"exp":`+strconv.FormatInt(exp.Unix(), 10)+
		`,"kubernetes.io":{"namespace":"gantry-vision","pod":{"name":"train-w1-x","uid":"u1"}}}`)) + ".sig"
}

func enc64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// TestTokenAuth: a run's token names its workload; it is reviewed once a
// minute at most; other audiences, expired tokens and tokens of pods Gantry
// did not make are refused.
func TestTokenAuth(t *testing.T) {
	rv := &reviewer{r: runs.Review{Authenticated: true, Audiences: []string{runs.Audience}, Username: "system:serviceaccount:gantry-vision:default", Workload: "w1", Pod: "gantry-vision/train-w1-x"}}
	clock := now
	a := &runs.TokenAuth{Reviewer: rv, Now: func() time.Time { return clock }, Reviews: projected.NewBudget(projected.BudgetOptions{Rate: 1000, Burst: 1000, SourceRate: 1000, SourceBurst: 1000, Now: time.Now})}
	tok := jwt(runs.Audience, now.Add(time.Hour))
	unbound := enc64(`{"alg":"RS256"}`) + "." + enc64(`{"aud":["gantry-run"],"exp":`+strconv.FormatInt(now.Add(time.Hour).Unix(), 10)+`}`) + ".sig"
	if !runs.IsRunToken(tok) || runs.IsRunToken(jwt("gantry", now.Add(time.Hour))) || runs.IsRunToken("gnt_abc") || runs.IsRunToken(unbound) {
		t.Fatal("IsRunToken")
	}
	for range 3 {
		id, err := a.Authenticate(context.Background(), tok, "w1")
		if err != nil || id.Via != identity.ViaRun || id.Workload != "w1" {
			t.Fatalf("%+v %v", id, err)
		}
	}
	if n := rv.calls.Load(); n != 1 {
		t.Fatalf("%d reviews for three reports, want 1", n)
	}
	clock = now.Add(2 * time.Minute)
	if _, err := a.Authenticate(context.Background(), tok, "w1"); err != nil || rv.calls.Load() != 2 {
		t.Fatalf("reviewed again after a minute: %v, %d reviews", err, rv.calls.Load())
	}
	if _, err := a.Authenticate(context.Background(), jwt(runs.Audience, now.Add(-time.Minute)), "w1"); err == nil {
		t.Fatal("an expired token accepted")
	}
	rv.r.Workload = ""
	var fb *fault.Forbidden
	if _, err := a.Authenticate(context.Background(), jwt(runs.Audience, now.Add(2*time.Hour)), "w1"); !errors.As(err, &fb) {
		t.Fatalf("a token of a pod Gantry did not make: %v", err)
	}
	rv.r = runs.Review{Authenticated: false, Error: "invalid"}
	if _, err := a.Authenticate(context.Background(), jwt(runs.Audience, now.Add(3*time.Hour)), "w1"); err == nil {
		t.Fatal("a token the cluster refused accepted")
	}
	rv.err = errors.New("connection refused")
	var un *fault.Unavailable
	if _, err := a.Authenticate(context.Background(), jwt(runs.Audience, now.Add(4*time.Hour)), "w1"); !errors.As(err, &un) {
		t.Fatalf("the cluster away: %v", err)
	}
}

// TestTokenAuthPerWorkload: a token is reviewed by the cluster of the
// workload it is sent for, and what was said is kept per workload: sent
// first for a workload whose cluster refuses it, it is refused there and
// still accepted for its own.
func TestTokenAuthPerWorkload(t *testing.T) {
	rv := &reviewer{r: runs.Review{Authenticated: true, Audiences: []string{runs.Audience}, Username: "system:serviceaccount:gantry-vision:default", Workload: "w1", Pod: "gantry-vision/train-w1-x", Cluster: "onprem"},
		refuse: map[string]bool{"w2": true}}
	a := &runs.TokenAuth{Reviewer: rv, Now: func() time.Time { return now }, Reviews: projected.NewBudget(projected.BudgetOptions{Rate: 1000, Burst: 1000, SourceRate: 1000, SourceBurst: 1000, Now: time.Now})}
	tok := jwt(runs.Audience, now.Add(time.Hour))
	if _, err := a.Authenticate(context.Background(), tok, "w2"); err == nil {
		t.Fatal("accepted for a workload whose cluster refuses it")
	}
	id, err := a.Authenticate(context.Background(), tok, "w1")
	if err != nil || id.Workload != "w1" || !strings.Contains(id.Name, "on onprem") {
		t.Fatalf("for its own workload, after a refusal for another: %+v %v", id, err)
	}
	if n := rv.calls.Load(); n != 2 {
		t.Fatalf("%d reviews, want one per workload", n)
	}
	// Sent for a workload its pod is not of: refused, and kept so.
	var fb *fault.Forbidden
	if _, err := a.Authenticate(context.Background(), tok, "w3"); !errors.As(err, &fb) {
		t.Fatalf("the token of w1's pod sent for w3: %v", err)
	}
	if _, err := a.Authenticate(context.Background(), tok, "w3"); err == nil {
		t.Fatal("the token of w1's pod sent for w3 again: accepted")
	}
	if n := rv.calls.Load(); n != 3 {
		t.Fatalf("%d reviews, want the refusal for w3 kept", n)
	}
}
