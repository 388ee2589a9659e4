package runs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/template"
)

// committer writes the appends of concurrent requests in one transaction
// (group commit): a request that finds no transaction under way leads one,
// for itself and whatever is queued then, and on its end hands the lead to
// the first request still queued. (More batches at once measured no
// faster on PostgreSQL: 6.1 k reports/s with four against 6.4 k with one.) Nothing waits for a batch to fill: a request alone
// is committed at once, and those that arrive while a commit is under way
// share the next. A failed batch is tried again one append at a time, so
// one request's failure is not another's.
type committer struct {
	store Store
	mu    sync.Mutex
	queue []*pending
	busy  bool // a batch is being committed
}

type pending struct {
	a    Append
	sum  Summary
	err  error
	lead bool          // woken to lead the next batch, not with a result
	done chan struct{} // closed once: to lead, or with the result
}

// Bounds on one transaction.
const (
	maxBatchAppends = 256
	maxBatchReports = 4 * MaxReports
	// commitTimeout bounds a batch's transaction: it is not the leading
	// request's to cancel, since it carries the others' appends too.
	commitTimeout = 30 * time.Second
)

// append commits a and returns its workload's new summary.
func (c *committer) append(ctx context.Context, a Append) (Summary, error) {
	p := &pending{a: a, done: make(chan struct{})}
	c.mu.Lock()
	if c.busy {
		c.queue = append(c.queue, p)
		c.mu.Unlock()
		<-p.done
		if !p.lead {
			return p.sum, p.err
		}
		c.mu.Lock() // p leads: the leader before it took it off the queue
	} else {
		c.busy = true
	}
	// p leads a batch: itself and what is queued, from the head.
	batch, reports := []*pending{p}, len(p.a.Reports)
	n := 0
	for n < len(c.queue) && len(batch) < maxBatchAppends && reports+len(c.queue[n].a.Reports) <= maxBatchReports {
		reports += len(c.queue[n].a.Reports)
		batch = append(batch, c.queue[n])
		n++
	}
	c.queue = c.queue[n:]
	c.mu.Unlock()

	// Whatever happens in the write (a panic included), the batch is
	// answered and the lead handed on: no request waits for ever.
	defer func() {
		c.mu.Lock()
		if len(c.queue) > 0 { // hand the lead on
			next := c.queue[0]
			c.queue = c.queue[1:]
			next.lead = true
			close(next.done)
		} else {
			c.busy = false
		}
		c.mu.Unlock()
		for _, q := range batch[1:] {
			close(q.done)
		}
	}()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	c.write(cctx, batch)
	return p.sum, p.err
}

// write commits batch, and each on its own when the batch fails. A panic
// (in an append's Update, say) fails the batch's appends that have no
// answer yet, rather than the requests.
func (c *committer) write(ctx context.Context, batch []*pending) {
	defer func() {
		if r := recover(); r != nil {
			for _, q := range batch {
				if q.err == nil && q.sum.Workload == "" {
					q.err = fmt.Errorf("report of %s: %v", q.a.Workload, r)
				}
			}
		}
	}()
	as := make([]Append, len(batch))
	for i, q := range batch {
		as[i] = q.a
	}
	sums, err := c.store.AppendReports(ctx, as)
	if err == nil && len(sums) == len(batch) {
		for i, q := range batch {
			q.sum = sums[i]
		}
		return
	}
	if len(batch) == 1 {
		batch[0].err = err
		return
	}
	for _, q := range batch {
		sums, err := c.store.AppendReports(ctx, []Append{q.a})
		if err == nil && len(sums) == 1 {
			q.sum = sums[0]
		}
		q.err = err
	}
}

// infoCache keeps what a run's reports need of its workload for a while:
// a run reports every few seconds, and its namespace and rules do not
// change (its cost so far is at most infoTTL old).
type infoCache struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]cachedInfo
}

type cachedInfo struct {
	info RunInfo
	at   time.Time
}

const (
	infoTTL  = 10 * time.Second
	maxInfos = 10000
)

func (c *infoCache) get(ctx context.Context, id string, read func(context.Context, string) (RunInfo, error)) (RunInfo, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < infoTTL && !now.Before(e.at) {
		return e.info, nil
	}
	info, err := read(ctx, id)
	if err != nil {
		return info, err
	}
	c.mu.Lock()
	if len(c.m) >= maxInfos {
		for k, e := range c.m {
			if now.Sub(e.at) >= infoTTL || now.Before(e.at) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxInfos {
			clear(c.m)
		}
	}
	c.m[id] = cachedInfo{info: info, at: now}
	c.mu.Unlock()
	return info, nil
}

// pageCache keeps the summaries pages of workloads asked for, and that a
// workload has none, for pageTTL: the list is read far more often than
// runs report. This replica's own reports refresh it at once; another
// replica's show within pageTTL.
type pageCache struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]cachedSummary
}

type cachedSummary struct {
	sum Summary
	ok  bool // it has reported
	at  time.Time
}

const (
	pageTTL      = 2 * time.Second
	maxSummaries = 10000
)

// get is what is cached and fresh of ids, and the ids that are not.
func (c *pageCache) get(ids []string) (map[string]Summary, []string) {
	now := c.now()
	out := map[string]Summary{}
	var missed []string
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		e, ok := c.m[id]
		switch {
		case !ok || now.Sub(e.at) >= pageTTL || now.Before(e.at):
			missed = append(missed, id)
		case e.ok:
			out[id] = e.sum
		}
	}
	return out, missed
}

// put keeps what was read of ids: found's summaries, and that the others
// have none.
func (c *pageCache) put(ids []string, found map[string]Summary) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m)+len(ids) > maxSummaries {
		clear(c.m)
	}
	for _, id := range ids {
		sum, ok := found[id]
		if old, kept := c.m[id]; kept && old.ok && (!ok || old.sum.Reports > sum.Reports) {
			// A read that began before this replica's own report ended
			// after it: the report's summary is the newer.
			if !now.Before(old.at) && now.Sub(old.at) < pageTTL {
				continue
			}
		}
		c.m[id] = cachedSummary{sum: sum, ok: ok && sum.Reports > 0, at: now}
	}
}

// peerCache keeps what each run's median rules compare it with for
// peersTTL: a run reports every few seconds, and its template's earlier
// runs change little meanwhile.
type peerCache struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]cachedPeers
}

type cachedPeers struct {
	peers Peers
	at    time.Time
}

const (
	peersTTL = time.Minute
	maxPeers = 1000
)

// get is run id's peers, read with read when its template has a median
// rule and none fresh are kept (nil otherwise).
func (c *peerCache) get(ctx context.Context, id string, rules *template.EarlyStopping,
	read func(context.Context, string, *template.EarlyStopping) (Peers, error)) (Peers, error) {
	if rules == nil || !slices.ContainsFunc(rules.Rules, func(r template.StopRule) bool { return r.Median != nil }) {
		return nil, nil
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < peersTTL && !now.Before(e.at) {
		return e.peers, nil
	}
	peers, err := read(ctx, id, rules)
	at := now
	if err != nil {
		// Kept too, for a sixth of the while: a store in trouble is not
		// asked again on every report.
		at = now.Add(-peersTTL + peersTTL/6)
	}
	c.mu.Lock()
	if len(c.m) >= maxPeers {
		for k, e := range c.m {
			if now.Sub(e.at) >= peersTTL || now.Before(e.at) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxPeers {
			clear(c.m)
		}
	}
	c.m[id] = cachedPeers{peers: peers, at: at}
	c.mu.Unlock()
	return peers, err
}
