package e2e_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestSlotsLongestFirst: the real node's slots go to the waiting test of the
// lowest rank, a test that needs two waits for both, and one not ranked comes
// last. It needs no cluster.
func TestSlotsLongestFirst(t *testing.T) {
	s := newSlots(2, []string{"long", "both", "mid"})
	s.take("first", 2) // holds both while the others line up
	got := make(chan string, 4)
	for _, w := range []struct {
		name string
		n    int
	}{{"unranked", 1}, {"mid", 1}, {"both", 2}, {"long", 1}} {
		go func() {
			s.take(w.name, w.n)
			got <- w.name
		}()
		waitfor.Until(t, 10*time.Second, w.name+" waiting", func() error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.waiting) == 0 || s.waiting[len(s.waiting)-1].rank != s.rank(w.name) {
				return fmt.Errorf("%d waiting", len(s.waiting))
			}
			return nil
		})
	}
	next := func() string {
		select {
		case name := <-got:
			return name
		case <-time.After(10 * time.Second):
			return "none"
		}
	}
	var order []string
	s.give(1)
	order = append(order, next()) // long
	s.give(1)
	// One slot free: both waits for two, and nobody passes it.
	s.give(1)
	order = append(order, next()) // both
	// One at a time: two slots freed at once go to both at once, and which
	// goroutine reports first is not the slots' order.
	s.give(1)
	order = append(order, next()) // mid, not unranked
	s.give(1)
	order = append(order, next()) // unranked
	if want := []string{"long", "both", "mid", "unranked"}; !slices.Equal(order, want) {
		t.Fatalf("slots went to %v, want %v", order, want)
	}
}
