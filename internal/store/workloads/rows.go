package workloads

import (
	"maps"
	"slices"
	"sync"

	"github.com/gantryhq/gantry/internal/workload"
)

// rowCache keeps decoded workload rows by id, each with the version it was
// read at, so that a page of workloads reads two columns of a row that has
// not changed since it was last decoded, instead of all of them and its
// parameters' JSON (half of the CPU a page of 100 cost: Seams 9). The
// version column is the database's: a trigger adds one to it on every
// UPDATE of a workloads row (migration 0025), so an entry is used only while
// it is the row as stored, whoever wrote it — any replica, an older release
// beside this one in a rolling upgrade, a fix made by hand. Bounded: when
// full, an arbitrary entry makes room.
type rowCache struct {
	mu   sync.Mutex
	max  int
	rows map[string]*cachedRow
}

type cachedRow struct {
	version int64
	w       workload.Workload
}

// maxCachedRows bounds the cache: about 1 KiB a row, a few MiB in all, more
// than the pages people and the portal read again.
const maxCachedRows = 4096

func newRowCache(max int) *rowCache {
	return &rowCache{max: max, rows: make(map[string]*cachedRow, max)}
}

// get is the workload id as it was at version, if it is kept; the caller
// owns what it gets.
func (c *rowCache) get(id string, version int64) (workload.Workload, bool) {
	c.mu.Lock()
	r, ok := c.rows[id]
	c.mu.Unlock()
	if !ok || r.version != version {
		return workload.Workload{}, false
	}
	return detached(r.w), true
}

// put keeps w as it was at version, unless a later version is kept already.
func (c *rowCache) put(w workload.Workload, version int64) {
	w = detached(w)
	c.mu.Lock()
	defer c.mu.Unlock()
	old, kept := c.rows[w.ID]
	if kept && old.version > version {
		return
	}
	if !kept && len(c.rows) >= c.max {
		for id := range c.rows { // map order: an arbitrary entry
			delete(c.rows, id)
			break
		}
	}
	c.rows[w.ID] = &cachedRow{version: version, w: w}
}

// detached is w with copies of what it refers to, so that neither the cache
// nor its caller sees the other's changes.
func detached(w workload.Workload) workload.Workload {
	w.Parameters = maps.Clone(w.Parameters)
	w.SpotEvictions = slices.Clone(w.SpotEvictions)
	if w.ExitCode != nil {
		code := *w.ExitCode
		w.ExitCode = &code
	}
	if w.Trial != nil {
		t := *w.Trial
		w.Trial = &t
	}
	if w.Deferral != nil {
		d := *w.Deferral
		w.Deferral = &d
	}
	return w
}
