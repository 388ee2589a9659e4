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

// getAll is each of ids as it was at its version, where it is kept, under
// one lock (a page asks for a hundred at once): ok[i] says whether out[i]
// was kept. The caller owns what it gets.
func (c *rowCache) getAll(ids []string, versions []int64) (out []workload.Workload, ok []bool) {
	rows := make([]*cachedRow, len(ids))
	c.mu.Lock()
	for i, id := range ids {
		rows[i] = c.rows[id]
	}
	c.mu.Unlock()
	out, ok = make([]workload.Workload, len(ids)), make([]bool, len(ids))
	for i, r := range rows {
		if r != nil && r.version == versions[i] {
			out[i], ok[i] = detached(r.w), true
		}
	}
	return out, ok
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
	if w.Related != nil {
		r := *w.Related
		w.Related = &r
	}
	return w
}
