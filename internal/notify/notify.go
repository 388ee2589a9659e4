// Package notify owns Gantry's outgoing webhooks: messages kept in an outbox
// in the store (so an alert survives a restart and is queued once), delivered
// by the leader with retries and exponential backoff — at least once, under
// one X-Gantry-Delivery id a receiver can drop repeats by — each body a
// Slack-compatible JSON object ({"text": …} plus Gantry's own fields) signed
// with HMAC-SHA256 over the timestamp and the body, and Verify, which a
// receiver uses to check a delivery (and Gantry's tests use as the receiver).
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Headers of a delivery.
const (
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256, keyed with the
	// shared secret, of the timestamp, ".", the delivery id, ".", and the
	// body — so neither the time nor the id can be changed on a replay.
	HeaderSignature = "X-Gantry-Signature"
	// HeaderTimestamp is the Unix time of the delivery attempt, in seconds.
	HeaderTimestamp = "X-Gantry-Timestamp"
	// HeaderDelivery is the message's id: the same on every retry, so that
	// a receiver can drop a repeat.
	HeaderDelivery = "X-Gantry-Delivery"
	// HeaderEvent names the event (budget.threshold, workload.idle-warning …).
	HeaderEvent = "X-Gantry-Event"
)

// Message is one webhook in the outbox.
type Message struct {
	ID       string
	Event    string
	Body     []byte // JSON, Slack-compatible: has "text"
	Created  time.Time
	Attempts int
	NextAt   time.Time
}

// New makes a message for event with a Slack-compatible body: text, and the
// event's fields under "gantry".
func New(event, text string, fields map[string]any, now time.Time) (Message, error) {
	body, err := json.Marshal(map[string]any{"text": text, "gantry": withEvent(event, fields)})
	if err != nil {
		return Message{}, fmt.Errorf("notify: %s: %w", event, err)
	}
	id := make([]byte, 12)
	if _, err := rand.Read(id); err != nil {
		return Message{}, err
	}
	return Message{ID: hex.EncodeToString(id), Event: event, Body: body, Created: now, NextAt: now}, nil
}

func withEvent(event string, fields map[string]any) map[string]any {
	out := map[string]any{"event": event}
	for k, v := range fields {
		out[k] = v
	}
	return out
}

// Sign is the signature header's value for delivery id of body sent at ts.
func Sign(secret []byte, ts time.Time, id string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%d.%s.", ts.Unix(), id)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// ErrSignature means a delivery's signature or timestamp did not check out.
var ErrSignature = errors.New("notify: bad webhook signature")

// Verify checks a delivery as a receiver should: the signature header
// matches the body, the timestamp and the delivery id headers under secret
// (compared in constant time), and the timestamp is within tolerance of now
// (a replayed old delivery is refused; a receiver drops a delivery id it has
// seen).
func Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(h.Get(HeaderTimestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrSignature, h.Get(HeaderTimestamp))
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp %s is more than %s from now", ErrSignature, ts.UTC().Format(time.RFC3339), tolerance)
	}
	if !hmac.Equal([]byte(h.Get(HeaderSignature)), []byte(Sign(secret, ts, h.Get(HeaderDelivery), body))) {
		return fmt.Errorf("%w: signature does not match the body", ErrSignature)
	}
	return nil
}

// Outbox is where messages wait for delivery (the store).
type Outbox interface {
	DueNotifications(ctx context.Context, now time.Time, limit int) ([]Message, error)
	// NotificationSent records the outcome of an attempt: delivered, or
	// the next attempt's time (zero: given up) and why.
	NotificationSent(ctx context.Context, id string, attempts int, delivered bool, next time.Time, why string, now time.Time) error
	// PruneNotifications deletes delivered and given-up messages that
	// ended before before.
	PruneNotifications(ctx context.Context, before time.Time) (int64, error)
}

// Options configure a Sender.
type Options struct {
	Outbox Outbox
	URL    string // the webhook; "" keeps messages in the outbox, undelivered
	Secret []byte // the HMAC key (required with a URL)
	Client *http.Client
	Log    *slog.Logger
	Now    func() time.Time
	// MaxAttempts before a message is given up (default 0: none, it is
	// tried until MaxAge — a receiver down for an hour gets it once it is
	// back, not never).
	MaxAttempts int
	// Backoff is the wait after the first failed attempt, doubling after
	// each up to MaxBackoff (default 10 s and 5 min: a receiver back up
	// gets what waited within five minutes).
	Backoff, MaxBackoff time.Duration
	// MaxAge: a message not sent by then is given up (default 24 h: an
	// alert or a warning that late is noise); Keep is how long ended
	// messages stay in the outbox (default 30 days).
	MaxAge, Keep time.Duration
}

// Sender delivers the outbox's due messages.
type Sender struct {
	o Options
	// pruned is when this sender last pruned the outbox: once an hour
	// is enough, and a pass that finds nothing due writes nothing.
	mu     sync.Mutex
	pruned time.Time
}

// pruneEvery is how often a sender prunes the outbox.
const pruneEvery = time.Hour

// NewSender is complete when it returns: a URL needs a secret (deliveries
// are never unsigned).
func NewSender(o Options) (*Sender, error) {
	if o.Outbox == nil || o.Log == nil || o.Now == nil {
		return nil, errors.New("notify: outbox, log and clock are required")
	}
	if o.URL != "" {
		if len(o.Secret) < 16 {
			return nil, errors.New("notify: a webhook URL needs a secret of at least 16 bytes to sign its deliveries (notify.webhookSecret)")
		}
		// The URL is a credential (a Slack webhook's is): never said whole.
		u, err := url.Parse(o.URL)
		switch {
		case err != nil || u.Host == "":
			return nil, errors.New("notify.webhookURL is not a URL")
		case u.Scheme == "http" && !loopback(u.Hostname()):
			return nil, fmt.Errorf("notify.webhookURL: plain http to %s would send signed alerts in the clear: use https", u.Hostname())
		case u.Scheme != "https" && u.Scheme != "http":
			return nil, fmt.Errorf("notify.webhookURL: scheme %q is not https", u.Scheme)
		}
	}
	if o.Client == nil {
		// Redirects are not followed: a body and its signature go to the
		// configured receiver only.
		o.Client = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Backoff <= 0 {
		o.Backoff = 10 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 24 * time.Hour
	}
	if o.Keep <= 0 {
		o.Keep = 30 * 24 * time.Hour
	}
	return &Sender{o: o}, nil
}

// Run makes one pass: each due message is posted once; it returns how many
// were delivered.
func (s *Sender) Run(ctx context.Context) (int, error) {
	if now := s.o.Now(); s.prune(now) {
		if _, err := s.o.Outbox.PruneNotifications(ctx, now.Add(-s.o.Keep)); err != nil {
			s.mu.Lock()
			s.pruned = time.Time{} // the next pass tries again
			s.mu.Unlock()
			return 0, fmt.Errorf("prune the outbox: %w", err)
		}
	}
	if s.o.URL == "" {
		return 0, nil
	}
	due, err := s.o.Outbox.DueNotifications(ctx, s.o.Now(), 100)
	if err != nil {
		return 0, err
	}
	delivered := 0
	var errs []error
	for _, m := range due {
		if now := s.o.Now(); now.Sub(m.Created) > s.o.MaxAge {
			if err := s.o.Outbox.NotificationSent(ctx, m.ID, m.Attempts, false, time.Time{}, fmt.Sprintf("not sent within %s", s.o.MaxAge), now); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		attempts := m.Attempts + 1
		perr := s.post(ctx, m)
		now := s.o.Now()
		var next time.Time
		why := ""
		if perr != nil {
			why = perr.Error()
			if s.o.MaxAttempts <= 0 || attempts < s.o.MaxAttempts {
				next = now.Add(min(s.o.Backoff<<min(attempts-1, 20), s.o.MaxBackoff))
			}
			s.o.Log.Warn("webhook not delivered", "event", m.Event, "delivery", m.ID, "attempt", attempts, "err", perr, "retry_at", next)
		} else {
			delivered++
		}
		if err := s.o.Outbox.NotificationSent(ctx, m.ID, attempts, perr == nil, next, why, now); err != nil {
			errs = append(errs, err)
		}
	}
	return delivered, errors.Join(errs...)
}

// prune says whether a pass at now prunes the outbox (the first does, then
// one an hour), and counts it done.
func (s *Sender) prune(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.pruned.IsZero() && now.Sub(s.pruned) < pruneEvery && !now.Before(s.pruned) {
		return false
	}
	s.pruned = now
	return true
}

func (s *Sender) post(ctx context.Context, m Message) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.o.URL, bytes.NewReader(m.Body))
	if err != nil {
		return err
	}
	now := s.o.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gantry-webhook")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(s.o.Secret, now, m.ID, m.Body))
	req.Header.Set(HeaderDelivery, m.ID)
	req.Header.Set(HeaderEvent, m.Event)
	resp, err := s.o.Client.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err // without the URL, a credential
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}

// loopback reports whether host is a loopback name or address.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
