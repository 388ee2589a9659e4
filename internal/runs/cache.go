package runs

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/template"
)

// ttlMap is a bounded map whose values are kept for ttl on the service's
// clock: the caches of the report and page paths. When full, the stale
// entries go, then all if none were.
type ttlMap[V any] struct {
	now func() time.Time
	ttl time.Duration
	max int
	mu  sync.Mutex
	m   map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v  V
	at time.Time
}

func newTTLMap[V any](now func() time.Time, ttl time.Duration, max int) *ttlMap[V] {
	return &ttlMap[V]{now: now, ttl: ttl, max: max, m: map[string]ttlEntry[V]{}}
}

// fresh says whether an entry kept at at is still good at now.
func (c *ttlMap[V]) fresh(at, now time.Time) bool { return now.Sub(at) < c.ttl && !now.Before(at) }

// get is k's value while it is fresh.
func (c *ttlMap[V]) get(k string) (V, bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !c.fresh(e.at, now) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// put keeps v for k as of at; keep, when set, decides from the fresh
// entry k has (if any) whether to replace it.
func (c *ttlMap[V]) put(k string, v V, at time.Time, keep func(old V) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[k]; ok && keep != nil && c.fresh(old.at, c.now()) && keep(old.v) {
		return
	}
	if len(c.m) >= c.max {
		now := c.now()
		for key, e := range c.m {
			if !c.fresh(e.at, now) {
				delete(c.m, key)
			}
		}
		if len(c.m) >= c.max {
			clear(c.m)
		}
	}
	c.m[k] = ttlEntry[V]{v: v, at: at}
}

// infoCache keeps what a run's reports need of its workload for infoTTL:
// a run reports every few seconds, and its namespace and rules do not
// change (its cost so far is at most infoTTL old).
type infoCache struct{ *ttlMap[RunInfo] }

const (
	infoTTL  = 10 * time.Second
	maxInfos = 10000
)

func newInfoCache(now func() time.Time) infoCache {
	return infoCache{newTTLMap[RunInfo](now, infoTTL, maxInfos)}
}

func (c infoCache) get(ctx context.Context, id string, read func(context.Context, string) (RunInfo, error)) (RunInfo, error) {
	if info, ok := c.ttlMap.get(id); ok {
		return info, nil
	}
	at := c.now()
	info, err := read(ctx, id)
	if err == nil {
		c.put(id, info, at, nil)
	}
	return info, err
}

// pageCache keeps the summaries pages of workloads asked for, and that a
// workload has none, for pageTTL: the list is read far more often than
// runs report. This replica's own reports refresh it at once; another
// replica's show within pageTTL.
type pageCache struct{ *ttlMap[pageEntry] }

type pageEntry struct {
	sum Summary
	ok  bool // it has reported
}

const (
	pageTTL      = 2 * time.Second
	maxSummaries = 10000
)

func newPageCache(now func() time.Time) pageCache {
	return pageCache{newTTLMap[pageEntry](now, pageTTL, maxSummaries)}
}

// get is what is cached and fresh of ids, and the ids that are not.
func (c pageCache) get(ids []string) (map[string]Summary, []string) {
	out := map[string]Summary{}
	var missed []string
	for _, id := range ids {
		e, ok := c.ttlMap.get(id)
		switch {
		case !ok:
			missed = append(missed, id)
		case e.ok:
			out[id] = e.sum
		}
	}
	return out, missed
}

// put keeps what was read of ids: found's summaries, and that the others
// have none (a summary of no reports is none). It never replaces a fresh
// summary with an older one: a page's read that began before this
// replica's own report may end after it.
func (c pageCache) put(ids []string, found map[string]Summary) {
	now := c.now()
	for _, id := range ids {
		sum, ok := found[id]
		e := pageEntry{sum: sum, ok: ok && sum.Reports > 0}
		c.ttlMap.put(id, e, now, func(old pageEntry) bool { return old.ok && (!e.ok || old.sum.Reports > e.sum.Reports) })
	}
}

// peerCache keeps what each run's median rules compare it with for
// peersTTL: a run reports every few seconds, and its template's earlier
// runs change little meanwhile.
type peerCache struct{ *ttlMap[Peers] }

const (
	peersTTL = time.Minute
	maxPeers = 1000
)

func newPeerCache(now func() time.Time) peerCache {
	return peerCache{newTTLMap[Peers](now, peersTTL, maxPeers)}
}

// get is run id's peers, read with read when its template has a median
// rule and none fresh are kept (nil otherwise). A failed read is kept too,
// as none, for a sixth of the while: a store in trouble is not asked again
// on every report.
func (c peerCache) get(ctx context.Context, id string, rules *template.EarlyStopping,
	read func(context.Context, string, *template.EarlyStopping) (Peers, error)) (Peers, error) {
	if rules == nil || !slices.ContainsFunc(rules.Rules, func(r template.StopRule) bool { return r.Median != nil }) {
		return nil, nil
	}
	if peers, ok := c.ttlMap.get(id); ok {
		return peers, nil
	}
	at := c.now()
	peers, err := read(ctx, id, rules)
	if err != nil {
		at = at.Add(-peersTTL + peersTTL/6)
	}
	c.put(id, peers, at, nil)
	return peers, err
}
