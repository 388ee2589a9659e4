package workload

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/template"
)

// Target is where Gantry's proxy forwards an interactive workload's
// requests: the in-cluster address of its interactive port, and whether the
// /w/{id} prefix is removed first. Cluster names the worker cluster it runs
// on ("": the cluster Gantry drives), where its app is reached in
// Namespace, by the workload's id and the URL's port.
type Target struct {
	URL         *url.URL
	StripPrefix bool
	Cluster     string
	Namespace   string
}

// Target decides whether the caller may open an interactive workload in
// the browser and where its app listens. Only the owner may: a notebook
// holds their code, credentials and data, so a team-admin of the team does
// not get in either (they can stop or delete it). Another team's workload is
// not found, and that denial is audited. Asking is not use (Used is): an
// open socket is checked again with it.
func (s *Service) Target(ctx context.Context, id string) (Target, error) {
	w, err := s.visible(ctx, id)
	if err != nil {
		return Target{}, err
	}
	caller, _ := identity.From(ctx)
	if w.Owner != caller.String() {
		return Target{}, &fault.Forbidden{Reason: "only its owner opens a notebook: it holds their code, credentials and data"}
	}
	if caller.ReadOnly {
		return Target{}, &fault.Forbidden{Reason: "a read-only token cannot open a notebook: running code in it is a write"}
	}
	return s.target(ctx, w)
}

// AppTarget is where a running notebook's app listens, for Gantry's own
// use (the idle culler asking its app whether a kernel is executing): no
// person opens it, so no one's permission is asked. Not for requests made
// on a person's behalf (Target is).
func (s *Service) AppTarget(ctx context.Context, w Workload) (Target, error) {
	return s.target(ctx, w)
}

// target is where a workload's app listens, if it is a running notebook.
func (s *Service) target(ctx context.Context, w Workload) (Target, error) {
	id := w.ID
	if w.Kind != template.Notebook || w.Endpoint == "" {
		return Target{}, &fault.Conflict{Kind: "workload", Name: id, Reason: "is not interactive: only notebooks open in the browser"}
	}
	if w.Status != Running {
		return Target{}, &fault.Conflict{Kind: "workload", Name: id, Reason: fmt.Sprintf("is %s: it opens once it is Running", w.Status)}
	}
	v, err := s.templates.Get(ctx, w.Template, w.TemplateVersion)
	if err != nil {
		return Target{}, fmt.Errorf("template of workload %s: %w", id, err)
	}
	ns := s.Namespace(w)
	u, err := serviceURL(w.Endpoint, ns)
	if err != nil {
		return Target{}, fmt.Errorf("endpoint of workload %s: %w", id, err)
	}
	return Target{URL: u, StripPrefix: v.Template.Spec.Interactive != nil && v.Template.Spec.Interactive.StripPrefix,
		Cluster: w.Cluster, Namespace: ns}, nil
}

// serviceURL parses an interactive workload's endpoint and checks it is what
// a launch records (endpoint): plain HTTP to a Service of the workload's
// own namespace by its cluster DNS name, with a port. The proxy dials
// nothing else, whatever a record says: not another team's Service, not an
// address outside the cluster (a cloud's metadata service, say).
func serviceURL(endpoint, namespace string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	name, ok := strings.CutSuffix(u.Hostname(), "."+namespace+serviceDomain)
	if u.Scheme != "http" || !ok || name == "" || strings.Contains(name, ".") || u.Port() == "" || u.User != nil {
		return nil, fmt.Errorf("%q is not a Service of namespace %s (http://<service>.%s%s:<port>)", endpoint, namespace, namespace, serviceDomain)
	}
	return u, nil
}

// KeepAlive records that the caller still uses the workload, so that the
// idle culler counts its idle time from now.
func (s *Service) KeepAlive(ctx context.Context, id string) (Workload, error) {
	w, err := s.manageable(ctx, id)
	if err != nil {
		return w, err
	}
	if err := s.store.TouchWorkload(ctx, id, s.clock()); err != nil {
		return w, err
	}
	s.touched.Store(id, s.clock())
	return w, nil
}

// touchEvery is how often a workload's use through its UI is written; the
// process remembers at most maxTouched workloads' last write. A write gets
// touchTimeout: it runs on a request's path (inside a socket's reads and
// writes, too), and a row held by a long update must not stall them for
// long. A write that failed is tried again touchRetry later, then twice as
// long after each failure up to touchEvery: a window lost to one slow write
// would leave a busy notebook quiet for longer than a short idle timeout,
// and a database away must not stall a socket every few seconds.
const (
	touchEvery   = 30 * time.Second
	touchRetry   = 5 * time.Second
	maxTouched   = 100000
	touchTimeout = 2 * time.Second
)

// touch is a workload's last claim to write its use: when, how long after
// it the next may be made, and how many writes before it failed in a row.
type touch struct {
	at    time.Time
	after time.Duration
	fails int
}

// Used records that a person used a workload through its UI now (the idle
// culler counts its idle time from then), at most once per touchEvery per
// process (a UI's requests and messages come many a second): the first
// request of a window claims it, the others at once return without a
// write (a thousand requests at a window's start are one write, not a
// thousand transactions queued on one row); a failure is logged, and the
// next claim comes sooner (touchRetry, backing off).
func (s *Service) Used(ctx context.Context, id string) {
	now := s.clock()
	claim := touch{at: now, after: touchEvery}
	fails := 0
	last, loaded := s.touched.LoadOrStore(id, claim)
	if loaded {
		prev := last.(touch)
		if now.Sub(prev.at) < prev.after || !s.touched.CompareAndSwap(id, last, claim) {
			return // written lately, or another request claimed the window
		}
		fails = prev.fails
	} else if n := s.touchedN.Add(1); n > maxTouched {
		s.touched.Clear() // bounded: a forgotten entry costs one write more
		s.touchedN.Store(0)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), touchTimeout)
	defer cancel()
	if err := s.store.TouchWorkload(ctx, id, now); err != nil {
		// Not tried again on every message of a socket: the claim says when.
		fails = min(fails+1, 4)
		s.touched.CompareAndSwap(id, claim, touch{at: now, after: min(touchRetry<<(fails-1), touchEvery), fails: fails})
		s.log.WarnContext(ctx, "activity on a workload not recorded", "workload_id", id, "err", err)
	}
}

// IdleStop stops a workload the idle culler found unused, with why on the
// record (IdleStopped; Start brings it back with its volumes).
//
// lastUse is when the culler saw its people last use it (zero: never): a
// use recorded after that (a keep-alive landing between the culler's reading
// and this stop) refuses the stop with a *fault.Conflict, decided in the
// transaction that would stop it. nil stops it in any case (an off-hours
// schedule).
func (s *Service) IdleStop(ctx context.Context, id, reason string, lastUse *time.Time) (Workload, error) {
	changed := false
	w, err := s.store.UpdateWorkload(ctx, id, func(w Workload) (Workload, error) {
		if w.Status == Stopped || w.Status == IdleStopped {
			return w, nil
		}
		if lastUse != nil && !w.LastUsed.IsZero() && (lastUse.IsZero() || w.LastUsed.After(*lastUse)) {
			return w, &fault.Conflict{Kind: "workload", Name: id, Reason: "was used at " + w.LastUsed.UTC().Format(time.RFC3339) + ", after the idle culler looked: not stopped"}
		}
		out, ch, err := Transition(w, IdleStop, reason, s.clock())
		changed = ch
		return out, err
	})
	if err != nil || !changed {
		return w, err
	}
	return w, s.tell(ctx, w, func(ctx context.Context) error { return s.cluster.SetRunning(ctx, s.ref(w), false) })
}

// Warn puts the idle culler's warning on a running workload — its reason
// (the warning's words, "" to withdraw it) and what it warned of — and
// queues msg (nil: none) with it, in one transaction; a workload no longer
// Running is left alone, and one already warned the same gets at most its
// words changed, never the message again. It says whether it warned. A new leader reads the warning back from the
// record, so a failover neither warns twice nor stops sooner than said.
func (s *Service) Warn(ctx context.Context, id string, warned Warned, reason string, msg *notify.Message) (bool, error) {
	did := false
	_, err := s.store.UpdateWorkloadNotify(ctx, id, func(w Workload) (Workload, *notify.Message, error) {
		switch {
		case w.Status != Running:
			return w, nil, nil
		case w.Warned.Equal(warned):
			w.Reason = reason // the same warning: its words at most, never its message twice
			return w, nil, nil
		}
		did = true
		w.Reason, w.Warned = reason, warned // not UpdatedAt: a warning is not a change of the workload's state
		return w, msg, nil
	})
	return did, err
}
