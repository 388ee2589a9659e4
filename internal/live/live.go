// Package live owns Gantry's long-lived responses — proxied websockets and
// streams, workload watch streams, followed logs — and the change feed that
// keeps them honest. Every such response is registered with the user, the
// token and the workload that allowed it; each replica follows the store's
// change feed once (a numbered table every writer appends to in the
// transaction that changes what it names) and, for each change, wakes the
// watch streams of that workload and checks again every connection that the
// change could concern: a revoked token, a signed-out session, a deactivated
// or regrouped user, a stopped or deleted workload close what they allowed,
// on every replica, within the feed's poll interval. Concurrent streams are
// capped per identity and per replica.
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// Kind is what a change names.
type Kind string

// Kinds of change.
const (
	Workload Kind = "workload" // Subject: a workload id
	Token    Kind = "token"    // Subject: a token id (revoked)
	User     Kind = "user"     // Subject: a user's key, issuer#subject (signed out, deactivated, regrouped)
	All      Kind = "all"      // Subject: none; everything is checked again (the policy changed)
)

// Change is one entry of the feed.
type Change struct {
	Seq     int64
	Kind    Kind
	Subject string
}

// Feed is the store's numbered change table.
type Feed interface {
	Changes(ctx context.Context, after int64, limit int) ([]Change, error)
	LastChange(ctx context.Context) (int64, error)
	PruneChanges(ctx context.Context, before time.Time) error
}

// Conn describes one long-lived response.
type Conn struct {
	Workload string // the workload it serves
	User     string // who it serves: identity.String()
	Token    string // the personal access token it came with, if any
	// Stream counts it against the caps (watch streams, followed logs,
	// websockets); a plain proxied request is registered but not counted.
	Stream bool
	// Watch: the response follows the workload itself (Handle.Changed)
	// and ends when it cannot read it; the registry only checks it again
	// on credential changes.
	Watch bool
	// Recheck authenticates the credential again and asks again whether it
	// may have this response; a *Refused closes it.
	Recheck func(ctx context.Context) error
}

// Limits cap concurrent streams: PerIdentity one person's, PerReplica
// this replica's. One person's registered connections of every kind
// (plain proxied requests too, which an app can hold open for minutes) are
// capped at AllPerStream times PerIdentity.
type Limits struct {
	PerIdentity int
	PerReplica  int
}

// AllPerStream is how many registered connections of every kind one person
// may hold per stream they may hold.
const AllPerStream = 4

// TooMany is returned by Open past a cap: 429 with Retry-After.
type TooMany = fault.TooMany

// Refused is a recheck's answer that the connection may no longer be held
// (the credential or the right to the workload is gone): it is closed. Any
// other error is taken as passing (the store or the provider did not
// answer) and the connection is checked again later.
type Refused struct{ Err error }

func (e *Refused) Error() string { return "refused: " + e.Err.Error() }
func (e *Refused) Unwrap() error { return e.Err }

// ErrClosed is the cause a closed connection's context carries, wrapping
// the refusal that closed it (a *fault.Conflict, say) where a recheck
// refused.
var ErrClosed = errors.New("closed: the credential or the workload that allowed it changed")

// Registry holds this replica's live connections.
type Registry struct {
	limits Limits
	log    *slog.Logger
	now    func() time.Time

	mu         sync.Mutex
	all        map[*entry]struct{}
	byWorkload map[string]map[*entry]struct{}
	byUser     map[string]map[*entry]struct{}
	byToken    map[string]map[*entry]struct{}
	streams    int
	perUser    map[string]int

	hooks   map[int]func(Change) // OnChange's, by number
	hookN   int
	seq     atomic.Int64        // the newest change published
	pending map[*entry]struct{} // rechecks to run, each once
	wake    chan struct{}       // a recheck is pending
	next    uint64              // the next entry's number (sweep slots)
	tick    time.Duration       // how often a sweep slice is checked (sweepTick)
}

type entry struct {
	Conn
	n       uint64
	cancel  context.CancelCauseFunc
	changed chan struct{}
	closed  bool
}

// Options are what a Registry is made of: positive Limits, and Now.
type Options struct {
	Limits Limits
	Log    *slog.Logger // default slog.Default()
	Now    func() time.Time
}

// New returns an empty registry.
func New(o Options) (*Registry, error) {
	limits, log := o.Limits, o.Log
	if limits.PerIdentity <= 0 || limits.PerReplica <= 0 {
		return nil, fmt.Errorf("live: stream limits must be positive (per identity %d, per replica %d)", limits.PerIdentity, limits.PerReplica)
	}
	if o.Now == nil {
		return nil, errors.New("live: Now is required")
	}
	if log == nil {
		log = slog.Default()
	}
	return &Registry{limits: limits, log: log, now: o.Now,
		all: map[*entry]struct{}{}, byWorkload: map[string]map[*entry]struct{}{}, byUser: map[string]map[*entry]struct{}{},
		byToken: map[string]map[*entry]struct{}{}, perUser: map[string]int{}, pending: map[*entry]struct{}{}, wake: make(chan struct{}, 1),
		tick: sweepTick}, nil
}

// Handle is a registered connection.
type Handle struct {
	r *Registry
	e *entry
}

// Changed is signalled (coalesced) when the workload's record changes.
func (h *Handle) Changed() <-chan struct{} { return h.e.changed }

// Close deregisters the connection; it is safe to call more than once.
func (h *Handle) Close() {
	h.r.remove(h.e)
	h.e.cancel(context.Canceled)
}

type handleKey struct{}

// HandleFrom returns the handle a registered request's context carries.
func HandleFrom(ctx context.Context) (*Handle, bool) {
	h, ok := ctx.Value(handleKey{}).(*Handle)
	return h, ok
}

// Open registers c. The returned context is cancelled (with ErrClosed as its
// cause) when the connection must end; it also carries the handle. Past a
// cap, Open returns a *TooMany.
func (r *Registry) Open(ctx context.Context, c Conn) (context.Context, *Handle, error) {
	if c.Recheck == nil {
		return nil, nil, errors.New("live: a connection needs a Recheck")
	}
	r.mu.Lock()
	if n := len(r.byUser[c.User]); c.User != "" && n >= AllPerStream*r.limits.PerIdentity {
		r.mu.Unlock()
		return nil, nil, &TooMany{What: fmt.Sprintf("you hold %d requests open at once (streams, and requests to your apps under /w/), the most one person may", n), RetryAfter: 5 * time.Second}
	}
	if c.Stream {
		switch {
		case r.streams >= r.limits.PerReplica:
			r.mu.Unlock()
			return nil, nil, &TooMany{What: fmt.Sprintf("this server holds %d open streams, its limit", r.limits.PerReplica), RetryAfter: 5 * time.Second}
		case r.perUser[c.User] >= r.limits.PerIdentity:
			r.mu.Unlock()
			return nil, nil, &TooMany{What: fmt.Sprintf("you hold %d open streams (watches, followed logs, sockets), the most one person may", r.limits.PerIdentity), RetryAfter: 10 * time.Second}
		}
		r.streams++
		r.perUser[c.User]++
	}
	ctx, cancel := context.WithCancelCause(ctx)
	r.next++
	e := &entry{Conn: c, n: r.next, cancel: cancel, changed: make(chan struct{}, 1)}
	r.all[e] = struct{}{}
	add(r.byWorkload, c.Workload, e)
	add(r.byUser, c.User, e)
	add(r.byToken, c.Token, e)
	r.mu.Unlock()
	h := &Handle{r: r, e: e}
	return context.WithValue(ctx, handleKey{}, h), h, nil
}

func add(m map[string]map[*entry]struct{}, key string, e *entry) {
	if key == "" {
		return
	}
	if m[key] == nil {
		m[key] = map[*entry]struct{}{}
	}
	m[key][e] = struct{}{}
}

func del(m map[string]map[*entry]struct{}, key string, e *entry) {
	if set := m[key]; set != nil {
		delete(set, e)
		if len(set) == 0 {
			delete(m, key)
		}
	}
}

func (r *Registry) remove(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	delete(r.all, e)
	delete(r.pending, e)
	del(r.byWorkload, e.Workload, e)
	del(r.byUser, e.User, e)
	del(r.byToken, e.Token, e)
	if e.Stream {
		r.streams--
		if r.perUser[e.User]--; r.perUser[e.User] <= 0 {
			delete(r.perUser, e.User)
		}
	}
}

// Seq is the newest change read from the feed (stored after the OnChange
// hooks have it and before the connections are checked): a request notes it
// before it is authenticated, and once registered, authenticates again if
// it has moved — a revocation published in between found no registration
// to close, and a credential kept from before it is forgotten by then.
func (r *Registry) Seq() int64 { return r.seq.Load() }

// Count is the number of registered connections and of streams among them.
func (r *Registry) Count() (conns, streams int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all), r.streams
}

// Publish applies changes. First each OnChange hook is told (a cache of
// credentials forgets what changed before anything is checked again with
// it); then a workload's watchers are woken and its other connections
// checked again, a token's or a user's connections checked again, and All
// checks every connection again.
func (r *Registry) Publish(changes ...Change) {
	r.tell(changes)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publish(changes)
}

// tell hands changes to the OnChange hooks.
func (r *Registry) tell(changes []Change) {
	r.mu.Lock()
	hooks := make([]func(Change), 0, len(r.hooks))
	for _, h := range r.hooks {
		hooks = append(hooks, h)
	}
	r.mu.Unlock()
	for _, c := range changes {
		for _, h := range hooks {
			h(c)
		}
	}
}

// OnChange has f told every change published (as the feed says, on this
// replica, before its connections are woken or checked again), until
// remove is called. f must not block.
func (r *Registry) OnChange(f func(Change)) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hooks == nil {
		r.hooks = map[int]func(Change){}
	}
	r.hookN++
	n := r.hookN
	r.hooks[n] = f
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.hooks, n)
	}
}

// OnWorkloadChange has f told the id of every workload whose record
// changes (OnChange's Workload changes), until remove is called. f must
// not block.
func (r *Registry) OnWorkloadChange(f func(workload string)) (remove func()) {
	return r.OnChange(func(c Change) {
		if c.Kind == Workload {
			f(c.Subject)
		}
	})
}

// publish is Publish's work on the connections; r.mu is held.
func (r *Registry) publish(changes []Change) {
	for _, c := range changes {
		switch c.Kind {
		case Workload:
			for e := range r.byWorkload[c.Subject] {
				if e.Watch {
					select {
					case e.changed <- struct{}{}:
					default: // a wake-up is already pending
					}
					continue
				}
				r.pending[e] = struct{}{}
			}
		case Token:
			for e := range r.byToken[c.Subject] {
				r.pending[e] = struct{}{}
			}
		case User:
			for e := range r.byUser[c.Subject] {
				r.pending[e] = struct{}{}
			}
		case All:
			for e := range r.all {
				r.pending[e] = struct{}{}
			}
		}
	}
	r.signal()
}

// signal wakes a checker; r.mu is held.
func (r *Registry) signal() {
	if len(r.pending) == 0 {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// take removes one pending recheck, or returns nil.
func (r *Registry) take() *entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	for e := range r.pending {
		delete(r.pending, e)
		r.signal() // more for the other checkers
		return e
	}
	return nil
}

func (r *Registry) close(e *entry, cause error) {
	r.remove(e)
	e.cancel(cause)
}

// CloseAll ends every connection (the server is shutting down).
func (r *Registry) CloseAll() {
	r.mu.Lock()
	all := make([]*entry, 0, len(r.all))
	for e := range r.all {
		all = append(all, e)
	}
	r.mu.Unlock()
	for _, e := range all {
		r.close(e, errors.New("the server is shutting down"))
	}
}

// checkers run rechecks, a few at a time.
const checkers = 4

// sweepTick is how often a slice of the connections is checked again.
const sweepTick = 100 * time.Millisecond

// Run checks connections again as changes arrive, and each one every
// sweep besides (tokens and sessions expire, groups grow stale, without a
// change being written), a slice of them every sweepTick so that the sweep
// costs evenly; it returns when ctx ends.
func (r *Registry) Run(ctx context.Context, sweep time.Duration) error {
	var wg sync.WaitGroup
	for range checkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-r.wake:
				}
				for e := r.take(); e != nil && ctx.Err() == nil; e = r.take() {
					r.check(ctx, e)
				}
			}
		}()
	}
	// A slice every sweepTick: a few checks at a time, not a burst that
	// other requests queue behind.
	slots := max(uint64(sweep/r.tick), 1)
	t := time.NewTicker(r.tick)
	defer t.Stop()
	for tick := uint64(0); ; tick++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
		}
		r.mu.Lock()
		for e := range r.all {
			if e.n%slots == tick%slots {
				r.pending[e] = struct{}{}
			}
		}
		r.signal()
		r.mu.Unlock()
	}
}

func (r *Registry) check(ctx context.Context, e *entry) {
	r.mu.Lock()
	closed := e.closed
	r.mu.Unlock()
	if closed {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := e.Recheck(cctx)
	var refused *Refused
	switch {
	case err == nil:
	case ctx.Err() != nil:
	case errors.As(err, &refused):
		r.log.InfoContext(ctx, "live connection closed", "workload_id", e.Workload, "user", e.User, "reason", refused.Err.Error())
		r.close(e, fmt.Errorf("%w: %w", ErrClosed, refused.Err))
	default:
		// Not a refusal (the store or the provider did not answer): the
		// next change or sweep asks again.
		r.log.WarnContext(ctx, "live connection not checked again", "workload_id", e.Workload, "err", err)
	}
}

// Follow reads the feed from its newest change on, every interval and
// whenever wake receives (this process wrote a change), and publishes what
// it reads; changes older than keep are pruned now and then. It returns when
// ctx ends; a feed that fails is retried.
func (r *Registry) Follow(ctx context.Context, feed Feed, wake <-chan struct{}, interval, keep time.Duration) error {
	var after int64
	for {
		n, err := feed.LastChange(ctx)
		if err == nil {
			after = n
			// What was read before the feed's position was known may be
			// older than a change before it: the hooks forget it all.
			r.tell([]Change{{Kind: All}})
			r.seq.Store(n)
			break
		}
		r.log.WarnContext(ctx, "change feed not readable yet", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	lastPrune := r.now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
		for {
			cs, err := feed.Changes(ctx, after, 1000)
			if err != nil {
				if ctx.Err() == nil {
					r.log.WarnContext(ctx, "change feed not read", "err", err)
				}
				break
			}
			if len(cs) == 0 {
				break
			}
			last := cs[len(cs)-1].Seq
			if cs[0].Seq != after+1 {
				// Changes this replica never read were pruned (it fell
				// behind by more than keep): check everything.
				r.log.WarnContext(ctx, "change feed skipped changes; checking every connection", "after", after, "next", cs[0].Seq)
				cs = append(cs, Change{Kind: All})
			}
			after = last
			r.tell(cs)
			r.seq.Store(after) // after the hooks, before the connections: see Seq
			r.mu.Lock()
			r.publish(cs)
			r.mu.Unlock()
			if len(cs) < 1000 {
				break
			}
		}
		if r.now().Sub(lastPrune) > keep/2 {
			lastPrune = r.now()
			if err := feed.PruneChanges(ctx, lastPrune.Add(-keep)); err != nil && ctx.Err() == nil {
				r.log.WarnContext(ctx, "change feed not pruned", "err", err)
			}
		}
	}
}
