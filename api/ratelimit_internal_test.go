package api

import (
	"fmt"
	"testing"
	"time"
)

func TestSourceOf(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"192.0.2.7:4711", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:4711", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:443", "2001:db8:1:2::/64"}, // the same /64: the same bucket
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"not an address", "not an address"},
	}
	for _, tc := range tests {
		if got := sourceOf(tc.remote); got != tc.want {
			t.Errorf("sourceOf(%q) = %q, want %q", tc.remote, got, tc.want)
		}
	}
}

// TestSourceLimiterBounded: each source has its own bucket; the map never
// holds more than MaxSources (new sources past it share one bucket), and
// sources idle long enough to have refilled are forgotten.
func TestSourceLimiterBounded(t *testing.T) {
	now := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	l := newSourceLimiter(AnonymousLimit{Rate: 1, Burst: 2, MaxSources: 3, Now: func() time.Time { return now }})
	take := func(src string) bool { ok, _ := l.take(src); return ok }
	// thrice takes three requests from src: what each was answered.
	thrice := func(src string) [3]bool { return [3]bool{take(src), take(src), take(src)} }
	twoOfThree := [3]bool{true, true, false}
	for i := range 3 {
		src := fmt.Sprintf("10.0.0.%d", i)
		if thrice(src) != twoOfThree {
			t.Fatalf("%s: want two requests allowed, the third refused", src)
		}
	}
	if ok, wait := l.take("10.0.0.0"); ok || wait != time.Second {
		t.Errorf("an empty bucket: allowed %v, wait %v, want refused for 1s", ok, wait)
	}
	// Past the bound: 1,000 new sources share one bucket of two.
	allowed := 0
	for i := range 1000 {
		if take(fmt.Sprintf("10.1.%d.%d", i/256, i%256)) {
			allowed++
		}
	}
	if allowed != 2 || len(l.sources) != 3 {
		t.Errorf("past the bound: %d allowed, %d sources remembered; want 2 and 3", allowed, len(l.sources))
	}
	// Once the buckets have refilled (2 s at 1/s), their sources are
	// forgotten and new ones get buckets of their own.
	now = now.Add(2 * time.Second)
	if thrice("10.2.0.1") != twoOfThree {
		t.Error("a new source after the sweep: want its own bucket of two")
	}
	if len(l.sources) != 1 {
		t.Errorf("%d sources remembered after the sweep, want 1", len(l.sources))
	}
}
