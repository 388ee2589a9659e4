package authn

import "time"

// SetClock replaces the clock (tests of the verified-token cache).
func (a *Authenticator) SetClock(now func() time.Time) { a.now = now }

// KeyFetches is how many times the JWKS was fetched.
func (a *Authenticator) KeyFetches() int64 { return a.keys.fetches.Load() }
