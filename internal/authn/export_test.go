package authn

import "time"

// SetClock replaces the clock (tests of the verified-token cache).
func (a *Authenticator) SetClock(now func() time.Time) { a.now = now }
