// Package forecast owns the demand forecast: from a history of launches (when
// each was asked for, how many GPUs, when it ended) it says how many GPUs of a
// class will be wanted — running or waiting — at each step ahead of an
// origin, with a band, made only from what was known at that origin. It also
// owns the baselines a forecast must beat (the last value, the same time a
// day or a week before, an additive seasonal-trend decomposition), their
// scores (sMAPE, MASE) and the replay
// that runs them over a trace. It knows nothing of Kubernetes, SQL or HTTP.
package forecast

import (
	"slices"
	"time"
)

// Record is one launch in the history: wanted from Created (asked for,
// waiting or running) until Ended (zero while it lasts), GPUs of it (a
// fraction for a shared GPU), of one class ("" when the history names none).
type Record struct {
	Created time.Time
	Ended   time.Time
	GPUs    float64
	Class   string
	// Kind is what kind of launch it was (a template and its size, a
	// trace's pod shape): launches of one kind tend to last alike. ""
	// when the history does not say.
	Kind string
}

// alive reports whether r is wanted at t.
func (r Record) alive(t time.Time) bool {
	return !r.Created.After(t) && (r.Ended.IsZero() || r.Ended.After(t))
}

// History is the launches, sorted by Created.
type History struct {
	recs []Record
}

// NewHistory sorts recs (a copy) by creation time. Records with no GPUs or
// ending before they began are left out.
func NewHistory(recs []Record) *History {
	out := make([]Record, 0, len(recs))
	for _, r := range recs {
		if r.GPUs > 0 && (r.Ended.IsZero() || !r.Ended.Before(r.Created)) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b Record) int { return a.Created.Compare(b.Created) })
	return &History{recs: out}
}

// Len is how many records the history holds.
func (h *History) Len() int { return len(h.recs) }

// Span is the first creation and the last event (creation or end).
func (h *History) Span() (first, last time.Time) {
	if len(h.recs) == 0 {
		return
	}
	first = h.recs[0].Created
	for _, r := range h.recs {
		last = later(last, r.Created)
		last = later(last, r.Ended)
	}
	return first, last
}

// upTo is how many records were created by t.
func (h *History) upTo(t time.Time) int {
	n, _ := slices.BinarySearchFunc(h.recs, t, func(r Record, t time.Time) int {
		if r.Created.After(t) {
			return 1
		}
		return -1
	})
	return n
}

// At is the history as it was known at t: the records created by then,
// those still running then without their end.
func (h *History) At(t time.Time) *History {
	n := h.upTo(t)
	out := make([]Record, n)
	copy(out, h.recs[:n])
	for i := range out {
		if out[i].Ended.After(t) {
			out[i].Ended = time.Time{}
		}
	}
	return &History{recs: out}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
