package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gantryhq/gantry/internal/authn"
	"github.com/gantryhq/gantry/internal/clientaddr"
	"github.com/gantryhq/gantry/internal/weblogin"
)

// DefaultMaxSources is how many source addresses the anonymous limit
// remembers unless told otherwise.
const DefaultMaxSources = clientaddr.DefaultMaxSources

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
	sl := clientaddr.NewLimiter(l.Rate, l.Burst, l.MaxSources, l.Now)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if !isAPI(r.URL.Path) && !isInteractive(r.URL.Path) {
				return next(c)
			}
			src := clientaddr.Source(r.RemoteAddr)
			if !hasCredentials(r) {
				if ok, wait := sl.Take(src); !ok {
					return tooMany(c, wait)
				}
				return next(c)
			}
			err := next(c)
			var he *echo.HTTPError
			if errors.As(err, &he) && he.Code == http.StatusUnauthorized {
				if ok, wait := sl.Take(src); !ok {
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
