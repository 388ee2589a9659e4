package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// outbox is an in-memory Outbox; the store's is in its conformance suite.
type outbox struct {
	mu   sync.Mutex
	msgs map[string]*entry
}

type entry struct {
	m         Message
	delivered bool
	gaveUp    bool
	why       string
	ended     time.Time
}

func (o *outbox) add(m Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.msgs == nil {
		o.msgs = map[string]*entry{}
	}
	o.msgs[m.ID] = &entry{m: m}
}

func (o *outbox) DueNotifications(_ context.Context, now time.Time, limit int) ([]Message, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Message
	for _, e := range o.msgs {
		if !e.delivered && !e.gaveUp && !e.m.NextAt.After(now) && len(out) < limit {
			out = append(out, e.m)
		}
	}
	return out, nil
}

func (o *outbox) PruneNotifications(_ context.Context, before time.Time) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := int64(0)
	for id, e := range o.msgs {
		if (e.delivered || e.gaveUp) && e.ended.Before(before) {
			delete(o.msgs, id)
			n++
		}
	}
	return n, nil
}

func (o *outbox) NotificationSent(_ context.Context, id string, attempts int, delivered bool, next time.Time, why string, now time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.msgs[id]
	e.m.Attempts, e.delivered, e.why = attempts, delivered, why
	if !delivered {
		e.m.NextAt, e.gaveUp = next, next.IsZero()
	}
	if e.delivered || e.gaveUp {
		e.ended = now
	}
	return nil
}

var secret = []byte("0123456789abcdef-secret")

// receiver is a webhook endpoint that checks signatures with Verify, the way
// a team's receiver should; it fails the first `fail` deliveries.
type receiver struct {
	mu       sync.Mutex
	fail     int
	got      []map[string]any
	ids      []string
	refused  int
	now      func() time.Time
	received int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.received++
	if err := Verify(secret, req.Header, body, r.now(), 5*time.Minute); err != nil {
		r.refused++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if r.fail > 0 {
		r.fail--
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	var m map[string]any
	json.Unmarshal(body, &m)
	r.got = append(r.got, m)
	r.ids = append(r.ids, req.Header.Get(HeaderDelivery))
}

func TestDeliverWithRetries(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rcv := &receiver{fail: 2, now: clock}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	ob := &outbox{}
	s, err := NewSender(Options{Outbox: ob, URL: srv.URL, Secret: secret, Log: slog.New(slog.DiscardHandler), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New("budget.threshold", "Team vision has spent 80 %", map[string]any{"team": "vision"}, now)
	if err != nil {
		t.Fatal(err)
	}
	ob.add(m)
	// Attempt 1 fails; the next is due 10 s later, not before.
	if n, err := s.Run(context.Background()); n != 0 || err != nil {
		t.Fatalf("first pass: %d, %v", n, err)
	}
	if n, _ := s.Run(context.Background()); n != 0 || rcv.received != 1 {
		t.Fatalf("retried before its backoff: %d delivered, %d received", n, rcv.received)
	}
	now = now.Add(10 * time.Second) // attempt 2 fails: next after 20 s
	s.Run(context.Background())
	now = now.Add(19 * time.Second)
	s.Run(context.Background())
	if rcv.received != 2 {
		t.Fatalf("received %d, want 2 (backoff doubles)", rcv.received)
	}
	now = now.Add(time.Second)
	if n, _ := s.Run(context.Background()); n != 1 {
		t.Fatalf("third attempt: %d delivered", n)
	}
	now = now.Add(time.Hour)
	s.Run(context.Background()) // nothing more: delivered once
	if len(rcv.got) != 1 || rcv.refused != 0 || rcv.ids[0] != m.ID {
		t.Fatalf("got %v (ids %v), refused %d", rcv.got, rcv.ids, rcv.refused)
	}
	g := rcv.got[0]
	if g["text"] != "Team vision has spent 80 %" || g["gantry"].(map[string]any)["event"] != "budget.threshold" || g["gantry"].(map[string]any)["team"] != "vision" {
		t.Errorf("body: %v", g)
	}
}

// TestReceiverDownAnHour: a receiver that answers 503 for an hour gets
// every message that waited, each once and with its one delivery id,
// within MaxBackoff of coming back; the retries in between are bounded by
// the backoff, not one a pass.
func TestReceiverDownAnHour(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	var mu sync.Mutex
	up := false
	posts := 0
	rcv := &receiver{now: clock}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		isUp := up
		mu.Unlock()
		if !isUp {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		rcv.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ob := &outbox{}
	s, err := NewSender(Options{Outbox: ob, URL: srv.URL, Secret: secret, Log: slog.New(slog.DiscardHandler), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		m, _ := New("budget.threshold", fmt.Sprintf("alert %d", i), nil, now)
		ob.add(m)
		ids = append(ids, m.ID)
	}
	// The leader's pass every 5 s, for an hour down and ten minutes up.
	back := start.Add(time.Hour)
	var deliveredAt time.Time
	for ; now.Before(back.Add(10 * time.Minute)); now = now.Add(5 * time.Second) {
		mu.Lock()
		up = !now.Before(back)
		mu.Unlock()
		if n, _ := s.Run(context.Background()); n > 0 {
			deliveredAt = now
		}
	}
	if len(rcv.ids) != 3 || rcv.refused != 0 {
		t.Fatalf("delivered %v (refused %d), want each of %v once", rcv.ids, rcv.refused, ids)
	}
	seen := map[string]int{}
	for _, id := range rcv.ids {
		seen[id]++
	}
	for _, id := range ids {
		if seen[id] != 1 || !ob.msgs[id].delivered || ob.msgs[id].gaveUp {
			t.Errorf("%s: delivered %d times, outbox %+v", id, seen[id], ob.msgs[id])
		}
	}
	if wait := deliveredAt.Sub(back); wait > 5*time.Minute {
		t.Errorf("delivered %s after the receiver came back, want within 5 min", wait)
	}
	// 10 s doubling to 5 min: about 16 tries each over the hour, not 720.
	if posts > 3*20 {
		t.Errorf("%d posts for 3 messages over an hour", posts)
	}
	t.Logf("%d posts; delivered %s after the receiver came back", posts, deliveredAt.Sub(back))
}

func TestGiveUp(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	defer srv.Close()
	ob := &outbox{}
	s, _ := NewSender(Options{Outbox: ob, URL: srv.URL, Secret: secret, Log: slog.New(slog.DiscardHandler), Now: clock, MaxAttempts: 3})
	m, _ := New("budget.threshold", "x", nil, now)
	ob.add(m)
	for range 10 {
		s.Run(context.Background())
		now = now.Add(time.Hour)
	}
	e := ob.msgs[m.ID]
	if !e.gaveUp || e.m.Attempts != 3 || e.why != "the webhook answered 500 Internal Server Error" {
		t.Errorf("after 3 failures: %+v", e)
	}
}

func TestVerify(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	body := []byte(`{"text":"hi"}`)
	good := http.Header{}
	good.Set(HeaderTimestamp, "1796115600") // now
	good.Set(HeaderDelivery, "d1")
	good.Set(HeaderSignature, Sign(secret, now, "d1", body))
	if err := Verify(secret, good, body, now, time.Minute); err != nil {
		t.Fatalf("good delivery refused: %v", err)
	}
	for name, tc := range map[string]struct {
		secret []byte
		h      func(http.Header)
		body   string
		at     time.Time
	}{
		"tampered body":       {secret, nil, `{"text":"hi!"}`, now},
		"tampered signature":  {secret, func(h http.Header) { h.Set(HeaderSignature, "sha256="+strings.Repeat("0", 64)) }, string(body), now},
		"other secret":        {[]byte("another secret of 16+"), nil, string(body), now},
		"replayed later":      {secret, nil, string(body), now.Add(2 * time.Minute)},
		"no timestamp":        {secret, func(h http.Header) { h.Del(HeaderTimestamp) }, string(body), now},
		"timestamp moved":     {secret, func(h http.Header) { h.Set(HeaderTimestamp, "1796115601") }, string(body), now},
		"another delivery id": {secret, func(h http.Header) { h.Set(HeaderDelivery, "d2") }, string(body), now},
	} {
		h := good.Clone()
		if tc.h != nil {
			tc.h(h)
		}
		if err := Verify(tc.secret, h, []byte(tc.body), tc.at, time.Minute); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
}

func TestNewSender(t *testing.T) {
	base := Options{Outbox: &outbox{}, Log: slog.New(slog.DiscardHandler), Now: time.Now}
	o := base
	o.URL = "https://hooks.example/x"
	if _, err := NewSender(o); err == nil {
		t.Error("a URL without a secret was accepted: deliveries would be unsigned")
	}
	o.Secret, o.URL = secret, "ftp://x"
	if _, err := NewSender(o); err == nil {
		t.Error("ftp URL accepted")
	}
	o.URL = "http://hooks.example/T000/B000/secret-path"
	if _, err := NewSender(o); err == nil || strings.Contains(err.Error(), "secret-path") {
		t.Errorf("plain http off loopback: %v (and never the whole URL)", err)
	}
	o.URL = "http://127.0.0.1:9/hook"
	if _, err := NewSender(o); err != nil {
		t.Errorf("http on loopback: %v", err)
	}
	if s, err := NewSender(base); err != nil {
		t.Error(err)
	} else if n, err := s.Run(context.Background()); n != 0 || err != nil {
		t.Error("no URL: nothing is sent")
	}
}

// TestMaxAge: a message not sent within a day (no URL until now) is given
// up, not delivered late.
func TestMaxAge(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rcv := &receiver{now: clock}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	ob := &outbox{}
	old, _ := New("workload.idle-warning", "stale", nil, now.Add(-25*time.Hour))
	fresh, _ := New("budget.threshold", "fresh", nil, now.Add(-time.Hour))
	ob.add(old)
	ob.add(fresh)
	s, _ := NewSender(Options{Outbox: ob, URL: srv.URL, Secret: secret, Log: slog.New(slog.DiscardHandler), Now: clock})
	if n, err := s.Run(context.Background()); n != 1 || err != nil {
		t.Fatalf("delivered %d, %v", n, err)
	}
	if e := ob.msgs[old.ID]; !e.gaveUp || rcv.received != 1 || rcv.got[0]["text"] != "fresh" {
		t.Errorf("stale message: %+v; received %v", e, rcv.got)
	}
}
