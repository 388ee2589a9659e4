// Package clientaddr owns who a request comes from, as far as its address
// says: the client's address behind the proxies the operator trusts
// (Behind), the source an address is charged to — an IPv4 address, an
// IPv6 /64 (Source) — and a bounded set of token buckets per source
// (Limiter), which the API's anonymous limit and the portal's sign-in
// limit share.
package clientaddr

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Source is the bucket a remote address (host:port, or a bare address) is
// charged to: its IP address, or for IPv6 its /64 (one host usually holds a
// whole /64).
func Source(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// Behind serves h with each request's RemoteAddr the client's, where the
// peer is one of the trusted proxies (a load balancer or an Ingress
// controller): the right-most address of X-Forwarded-For that is not
// itself a trusted proxy — the last hop no trusted proxy vouches for, since
// a client may write any X-Forwarded-For it likes. Without trusted proxies,
// or from any other peer, the request is served as it came. The port stays
// the peer's.
func Behind(h http.Handler, trusted []netip.Prefix) http.Handler {
	if len(trusted) == 0 {
		return h
	}
	isTrusted := func(a netip.Addr) bool {
		a = a.Unmap()
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, port, err := net.SplitHostPort(r.RemoteAddr)
		peer, perr := netip.ParseAddr(host)
		if err != nil || perr != nil || !isTrusted(peer) {
			h.ServeHTTP(w, r)
			return
		}
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // a hop that is no address: trust nothing before it
			}
			if !isTrusted(a) {
				r2 := r.Clone(r.Context())
				r2.RemoteAddr = net.JoinHostPort(a.Unmap().String(), port)
				h.ServeHTTP(w, r2)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Limiter holds a token bucket per source, bounded in number.
type Limiter struct {
	limit rate.Limit
	burst int
	max   int
	now   func() time.Time
	idle  time.Duration // after it, an unused bucket is full again: forgotten

	mu      sync.Mutex
	sources map[string]*bucket
	shared  *rate.Limiter // for new sources while sources is full
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	used time.Time
}

// DefaultMaxSources is how many sources a Limiter remembers unless told
// otherwise.
const DefaultMaxSources = 10_000

// NewLimiter gives each source a bucket of burst requests refilled at
// perSecond (> 0), remembering at most maxSources (0: DefaultMaxSources):
// sources idle long enough for their buckets to refill are forgotten, and
// new ones past the bound share one bucket. now is the clock.
func NewLimiter(perSecond float64, burst, maxSources int, now func() time.Time) *Limiter {
	if maxSources <= 0 {
		maxSources = DefaultMaxSources
	}
	burst = max(1, burst)
	idle := max(time.Second, time.Duration(float64(burst)/perSecond*float64(time.Second)))
	return &Limiter{limit: rate.Limit(perSecond), burst: burst, max: maxSources, now: now, idle: idle,
		sources: map[string]*bucket{}, shared: rate.NewLimiter(rate.Limit(perSecond), burst), swept: now()}
}

// Take charges src one request; when its bucket is empty it says so and
// how long until the next request would be allowed.
func (l *Limiter) Take(src string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.bucketOf(src, now)
	if lim.AllowN(now, 1) {
		return true, 0
	}
	return false, time.Duration((1 - lim.TokensAt(now)) / float64(l.limit) * float64(time.Second))
}

// Sources is how many sources have buckets of their own.
func (l *Limiter) Sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sources)
}

// bucketOf finds or makes src's bucket. Every idle period, buckets unused for
// that long (full again, so no different from new ones) are dropped; while
// the map is full, new sources share one bucket.
func (l *Limiter) bucketOf(src string, now time.Time) *rate.Limiter {
	if b, ok := l.sources[src]; ok {
		b.used = now
		return b.lim
	}
	if now.Sub(l.swept) >= l.idle {
		for s, b := range l.sources {
			if now.Sub(b.used) >= l.idle {
				delete(l.sources, s)
			}
		}
		l.swept = now
	}
	if len(l.sources) >= l.max {
		return l.shared
	}
	b := &bucket{lim: rate.NewLimiter(l.limit, l.burst), used: now}
	l.sources[src] = b
	return b.lim
}

type sourceKey struct{}

// WithSource returns ctx carrying the source a request is charged to, for
// work deeper down that spends a shared budget (projected.Budget).
func WithSource(ctx context.Context, src string) context.Context {
	return context.WithValue(ctx, sourceKey{}, src)
}

// SourceFrom is the source ctx carries, "" when none.
func SourceFrom(ctx context.Context) string {
	src, _ := ctx.Value(sourceKey{}).(string)
	return src
}
