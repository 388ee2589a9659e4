package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// DefaultMaxKeys is how many kinds of denial an Aggregator tells apart in one
// window unless told otherwise.
const DefaultMaxKeys = 1000

// Aggregator stands in front of a Store so that repeated denials cannot fill
// the disk: the first denial of each kind — same source, actor, action and
// status — in a window is appended in full; the ones after it are only
// counted, and when the window closes (Flush) one summary record per kind
// says how many there were. Allowed records, and reads, go straight to the
// Store. The kinds it tells apart in a window are bounded: past MaxKeys, new
// kinds are counted together and summed up in one record.
type Aggregator struct {
	Store
	maxKeys int
	now     func() time.Time
	log     *slog.Logger

	mu       sync.Mutex
	keys     map[denialKey]*tally
	overflow tally // denials of new kinds while keys is full
}

// AggregatorOptions configure an Aggregator.
type AggregatorOptions struct {
	Store Store
	// MaxKeys bounds the kinds of denial told apart in one window (default
	// DefaultMaxKeys).
	MaxKeys int
	Now     func() time.Time // default time.Now
	Log     *slog.Logger     // default slog.Default()
}

// denialKey is what makes two denials alike.
type denialKey struct {
	source, actor, action string
	status                int
}

// tally counts the denials of one kind not written in the current window.
type tally struct {
	last          Record // the latest of them
	more          int
	first, latest time.Time
}

func (t *tally) count(r Record) {
	if t.more == 0 {
		t.first = r.At
	}
	t.more++
	t.last, t.latest = r, r.At
}

// NewAggregator returns an Aggregator appending to o.Store.
func NewAggregator(o AggregatorOptions) (*Aggregator, error) {
	if o.Store == nil {
		return nil, errors.New("audit aggregator: a store is required")
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Now == nil {
		return nil, errors.New("audit: Now (the server's clock) is required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Aggregator{Store: o.Store, maxKeys: o.MaxKeys, now: o.Now, log: o.Log, keys: map[denialKey]*tally{}}, nil
}

// AppendAudit appends an allowed record, and the first denial of its kind in
// the current window; a later denial of the same kind is only counted, and
// returned as given (Seq 0).
func (a *Aggregator) AppendAudit(ctx context.Context, r Record) (Record, error) {
	if r.Decision != Deny {
		return a.Store.AppendAudit(ctx, r)
	}
	k := denialKey{source: r.Source, actor: r.Actor, action: r.Action, status: r.Status}
	a.mu.Lock()
	t, seen := a.keys[k]
	if !seen && len(a.keys) >= a.maxKeys {
		t, seen = &a.overflow, true
	}
	if seen {
		t.count(r)
		a.mu.Unlock()
		return r, nil
	}
	a.keys[k] = &tally{}
	a.mu.Unlock()
	return a.Store.AppendAudit(ctx, r)
}

// Flush closes the window: it appends one summary record for each kind of
// denial counted but not written, oldest first, and forgets every kind, so
// that the next denial of each is written in full again. A summary that
// cannot be appended is logged with its count.
func (a *Aggregator) Flush(ctx context.Context) (int, error) {
	now := a.now()
	a.mu.Lock()
	tallies := make([]tally, 0, len(a.keys)+1)
	for _, t := range a.keys {
		if t.more > 0 {
			tallies = append(tallies, *t)
		}
	}
	overflow := a.overflow
	a.keys, a.overflow = make(map[denialKey]*tally, len(a.keys)), tally{}
	a.mu.Unlock()

	sort.Slice(tallies, func(i, j int) bool { return tallies[i].first.Before(tallies[j].first) })
	sums := make([]Record, 0, len(tallies)+1)
	for _, t := range tallies {
		sums = append(sums, summary(t, now, fmt.Sprintf("%d more %s like this one (same source, actor, route and status) from %s to %s",
			t.more, plural(t.more, "denial", "denials"), stamp(t.first), stamp(t.latest))))
	}
	if overflow.more > 0 {
		s := summary(overflow, now, fmt.Sprintf("%d %s of kinds past the %d told apart in this window, from any source, actor or route (the last one shown) from %s to %s",
			overflow.more, plural(overflow.more, "denial", "denials"), a.maxKeys, stamp(overflow.first), stamp(overflow.latest)))
		s.Source = "other sources (last: " + s.Source + ")"
		sums = append(sums, s)
	}
	var errs []error
	written := 0
	for _, s := range sums {
		if _, err := a.Store.AppendAudit(ctx, s); err != nil {
			a.log.ErrorContext(ctx, "audit summary not written", "err", err, "source", s.Source, "actor", s.Actor, "action", s.Action, "status", s.Status, "reason", s.Reason)
			errs = append(errs, err)
			continue
		}
		written++
	}
	if len(errs) > 0 {
		return written, fmt.Errorf("audit summaries: %d of %d not written: %w", len(errs), len(sums), errors.Join(errs...))
	}
	return written, nil
}

// Run is one pass of the flush loop: Flush, carried through even while the
// server stops (the store closes only after the loops have returned), with
// failures logged by Flush.
func (a *Aggregator) Run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = a.Flush(ctx)
}

// summary is the record that stands for a tally's denials.
func summary(t tally, at time.Time, reason string) Record {
	r := t.last
	r.Seq, r.PrevHash, r.Hash = 0, "", ""
	r.At, r.Decision, r.Reason = at, Deny, reason
	return r
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
