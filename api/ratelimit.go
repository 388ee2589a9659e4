package api

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/weblogin"
)

// DefaultMaxSources is how many source addresses the anonymous limit
// remembers unless told otherwise.
const DefaultMaxSources = 10_000

// AnonymousLimit bounds, per source address, the requests to the API and to
// interactive workloads (/w/) that come without valid credentials: each
// source has a token bucket of Burst requests refilled at Rate per second,
// charged by every request without credentials (before it is looked at) and
// by every request whose credentials do not authenticate (after they were
// checked). With the bucket empty, a request without credentials is answered
// 429 before any authentication work, and a failed one 429 instead of 401;
// credentials are still checked, so a signed-in user behind the same address
// keeps working. Public routes (/healthz, /readyz, /openapi.yaml,
// /auth/config) and the portal's pages neither count nor are limited.
type AnonymousLimit struct {
	Rate  float64 // requests per second; 0: no limit
	Burst int
	// MaxSources bounds the sources remembered (default DefaultMaxSources);
	// sources idle long enough for their buckets to refill are forgotten,
	// and new ones past the bound share one bucket.
	MaxSources int
	Now        func() time.Time // default: the server's clock (Options.Now)
}

// limitAnonymous is the middleware enforcing l.
func limitAnonymous(l AnonymousLimit) echo.MiddlewareFunc {
	if l.Rate <= 0 {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	sl := newSourceLimiter(l)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if !isAPI(r.URL.Path) && !isInteractive(r.URL.Path) {
				return next(c)
			}
			src := sourceOf(r.RemoteAddr)
			if !hasCredentials(r) {
				if ok, wait := sl.take(src); !ok {
					return tooMany(c, wait)
				}
				return next(c)
			}
			err := next(c)
			var he *echo.HTTPError
			if errors.As(err, &he) && he.Code == http.StatusUnauthorized {
				if ok, wait := sl.take(src); !ok {
					c.Response().Header().Del("WWW-Authenticate")
					return tooMany(c, wait)
				}
			}
			return err
		}
	}
}

// hasCredentials reports whether r carries what identify checks: a bearer
// token or a session cookie.
func hasCredentials(r *http.Request) bool {
	if _, ok := authn.BearerToken(r.Header.Get("Authorization")); ok {
		return true
	}
	_, err := r.Cookie(weblogin.SessionCookie)
	return err == nil
}

// tooMany answers 429 with Retry-After (whole seconds, at least one).
func tooMany(c echo.Context, wait time.Duration) error {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	c.Response().Header().Set("Retry-After", fmt.Sprint(secs))
	return echo.NewHTTPError(http.StatusTooManyRequests,
		fmt.Sprintf("too many requests without valid credentials from this address; try again in %d s", secs))
}

// sourceOf is the bucket a remote address is charged to: its IP address, or
// for IPv6 its /64 (one host usually holds a whole /64).
func sourceOf(remoteAddr string) string {
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

// sourceLimiter holds a token bucket per source, bounded in number.
type sourceLimiter struct {
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

func newSourceLimiter(l AnonymousLimit) *sourceLimiter {
	if l.MaxSources <= 0 {
		l.MaxSources = DefaultMaxSources
	}
	l.Burst = max(1, l.Burst)
	idle := max(time.Second, time.Duration(float64(l.Burst)/l.Rate*float64(time.Second)))
	return &sourceLimiter{limit: rate.Limit(l.Rate), burst: l.Burst, max: l.MaxSources, now: l.Now, idle: idle,
		sources: map[string]*bucket{}, shared: rate.NewLimiter(rate.Limit(l.Rate), l.Burst), swept: l.Now()}
}

// take charges src one request; when its bucket is empty it says so and how
// long until the next request would be allowed.
func (l *sourceLimiter) take(src string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.bucketOf(src, now)
	if lim.AllowN(now, 1) {
		return true, 0
	}
	return false, time.Duration((1 - lim.TokensAt(now)) / float64(l.limit) * float64(time.Second))
}

// bucketOf finds or makes src's bucket. Every idle period, buckets unused for
// that long (full again, so no different from new ones) are dropped; while
// the map is full, new sources share one bucket.
func (l *sourceLimiter) bucketOf(src string, now time.Time) *rate.Limiter {
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
