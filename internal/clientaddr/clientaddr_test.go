package clientaddr_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/clientaddr"
)

func TestSource(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"192.0.2.7:4711", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:4711", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:443", "2001:db8:1:2::/64"}, // the same /64: the same bucket
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"not an address", "not an address"},
	}
	for _, tc := range tests {
		if got := clientaddr.Source(tc.remote); got != tc.want {
			t.Errorf("Source(%q) = %q, want %q", tc.remote, got, tc.want)
		}
	}
}

// TestLimiterBounded: each source has its own bucket; the map never holds
// more than its bound (new sources past it share one bucket), and sources
// idle long enough to have refilled are forgotten.
func TestLimiterBounded(t *testing.T) {
	now := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	l := clientaddr.NewLimiter(1, 2, 3, func() time.Time { return now })
	take := func(src string) bool { ok, _ := l.Take(src); return ok }
	// thrice takes three requests from src: what each was answered.
	thrice := func(src string) [3]bool { return [3]bool{take(src), take(src), take(src)} }
	twoOfThree := [3]bool{true, true, false}
	for i := range 3 {
		src := fmt.Sprintf("10.0.0.%d", i)
		if thrice(src) != twoOfThree {
			t.Fatalf("%s: want two requests allowed, the third refused", src)
		}
	}
	if ok, wait := l.Take("10.0.0.0"); ok || wait != time.Second {
		t.Errorf("an empty bucket: allowed %v, wait %v, want refused for 1s", ok, wait)
	}
	// Past the bound: 1,000 new sources share one bucket of two.
	allowed := 0
	for i := range 1000 {
		if take(fmt.Sprintf("10.1.%d.%d", i/256, i%256)) {
			allowed++
		}
	}
	if allowed != 2 || l.Sources() != 3 {
		t.Errorf("past the bound: %d allowed, %d sources remembered; want 2 and 3", allowed, l.Sources())
	}
	// Once the buckets have refilled (2 s at 1/s), their sources are
	// forgotten and new ones get buckets of their own.
	now = now.Add(2 * time.Second)
	if thrice("10.2.0.1") != twoOfThree {
		t.Error("a new source after the sweep: want its own bucket of two")
	}
	if l.Sources() != 1 {
		t.Errorf("%d sources remembered after the sweep, want 1", l.Sources())
	}
}

// TestBehind: behind a trusted proxy the client is the right-most
// forwarded address no trusted proxy stands for — never what the client
// wrote to the left of it; from any other peer the header counts for
// nothing.
func TestBehind(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	var got string
	h := clientaddr.Behind(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.RemoteAddr }), trusted)
	tests := []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"no proxy", "198.51.100.9:5000", nil, "198.51.100.9:5000"},
		{"an untrusted peer's header is ignored", "198.51.100.9:5000", []string{"203.0.113.1"}, "198.51.100.9:5000"},
		{"behind the ingress", "10.1.2.3:5000", []string{"203.0.113.1"}, "203.0.113.1:5000"},
		{"a forged hop to the left", "10.1.2.3:5000", []string{"192.0.2.66, 203.0.113.1"}, "203.0.113.1:5000"},
		{"two trusted hops", "10.1.2.3:5000", []string{"203.0.113.1, 10.9.9.9"}, "203.0.113.1:5000"},
		{"headers split over lines", "10.1.2.3:5000", []string{"192.0.2.66", "203.0.113.1"}, "203.0.113.1:5000"},
		{"IPv6 client", "[fd00::1]:5000", []string{"2001:db8::7"}, "[2001:db8::7]:5000"},
		{"garbage hop", "10.1.2.3:5000", []string{"203.0.113.1, not-an-ip"}, "10.1.2.3:5000"},
		{"only trusted hops", "10.1.2.3:5000", []string{"10.4.4.4"}, "10.1.2.3:5000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != tc.want {
				t.Errorf("RemoteAddr %q, want %q", got, tc.want)
			}
		})
	}
}
