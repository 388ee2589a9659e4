package ownmetrics_test

import (
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/ownmetrics"
)

// TestMethodLabel: a request's method is a label only when it is one of
// HTTP's own; any other (a client may send any token) counts as OTHER, so
// made-up methods cannot add series without bound.
func TestMethodLabel(t *testing.T) {
	m := ownmetrics.New()
	m.Request("/api/v1/workloads", "GET", 200, 0)
	for i := range 50 {
		m.Request("/w/*", "MADEUP"+strings.Repeat("X", i), 405, 0)
	}
	b, err := m.Text()
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, `method="GET"`) || !strings.Contains(text, `method="OTHER"`) || strings.Contains(text, "MADEUP") {
		t.Fatalf("the request metrics' methods:\n%s", text)
	}
}
