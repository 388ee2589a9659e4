package live

import "time"

// SetSweepTick sets how often r checks a sweep slice; call it before Run.
// Tests that publish changes set it long, so that the sweep does not check
// their connections behind their backs; the sweep's own test sets it short.
func SetSweepTick(r *Registry, d time.Duration) { r.tick = d }
