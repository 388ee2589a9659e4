package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/estimate"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

func (s *server) CreateWorkload(ctx context.Context, req gen.CreateWorkloadRequestObject) (gen.CreateWorkloadResponseObject, error) {
	b := req.Body
	t, err := team.Parse(b.Team)
	if err != nil {
		return nil, err
	}
	lr := workload.Request{
		Template: b.Template, Version: deref(b.TemplateVersion), Team: t, Choice: choice(b.Gpu, b.Parameters, b.Confidential, b.CpuOnly),
		IdempotencyKey: deref(req.Params.IdempotencyKey),
	}
	if b.MaxDelay != nil {
		d, err := time.ParseDuration(*b.MaxDelay)
		if err != nil {
			return nil, &fault.Invalid{Fields: []fault.Field{{Path: "maxDelay", Message: fmt.Sprintf("%q: want a duration such as 0s or 4h", *b.MaxDelay)}}}
		}
		lr.Flexible.MaxDelay = &d
	}
	if b.Deadline != nil {
		lr.Flexible.Deadline = b.Deadline.UTC()
	}
	// What the estimate makes of it, alongside the launch so that it adds
	// no latency. It reads the cluster (a few milliseconds, from the API
	// server's cache) while the launch records and applies (tens), and this
	// launch's pods need a controller and the scheduler after the apply, so
	// it almost always sees the fleet as it was before. Nothing enforces
	// that: one that saw this launch's own pod would warn that it does not
	// start now — a wrong warning, never a wrong refusal (refusals are the
	// launch's own check). Bounded; a launch the estimate cannot judge (it
	// refuses, the cluster is slow) gets no warning.
	verdict := make(chan string, 1)
	ectx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	go func() {
		defer func() {
			if r := recover(); r != nil { // outside the request's goroutine: echo's Recover cannot catch it
				s.o.Logger.ErrorContext(ctx, "the launch's estimate panicked", "panic", fmt.Sprint(r))
				verdict <- ""
			}
		}()
		e, err := s.o.Estimates.Estimate(ectx, caller(ctx), estimate.Request{Request: lr})
		if err != nil || !e.Known || e.StartsNow || e.Held || e.Approval {
			verdict <- ""
			return
		}
		verdict <- "it does not start now: " + e.Why
	}()
	w, replayed, err := s.o.Workloads.Create(ctx, caller(ctx), lr)
	var warnings []string
	if why := <-verdict; why != "" && !w.Deferral.Holding() { // held on purpose: its reason says until when
		warnings = append(warnings, why)
	}
	switch {
	case err != nil:
		s.o.Own.Launch("refused")
		return nil, err
	case replayed:
		s.o.Own.Launch("replayed")
		out := s.workloadOut(w)
		s.named(ctx, &out)
		return gen.CreateWorkload200JSONResponse(out), nil
	case w.Status == workload.PendingApproval:
		s.o.Own.Launch("held_for_approval")
	case w.Held:
		s.o.Own.Launch("held_by_budget")
	case w.Deferral.Holding():
		s.o.Own.Launch("held_for_cleaner_power")
	default:
		s.o.Own.Launch("started")
	}
	out := s.workloadOut(w)
	s.named(ctx, &out)
	if len(warnings) > 0 {
		out.Warnings = &warnings
	}
	return gen.CreateWorkload201JSONResponse(out), nil
}

func (s *server) EstimateWorkload(ctx context.Context, req gen.EstimateWorkloadRequestObject) (gen.EstimateWorkloadResponseObject, error) {
	b := req.Body
	t, err := team.Parse(b.Team)
	if err != nil {
		return nil, err
	}
	e, err := s.o.Estimates.Estimate(ctx, caller(ctx), estimate.Request{Request: workload.Request{
		Template: b.Template, Version: deref(b.TemplateVersion), Team: t, Choice: choice(b.Gpu, b.Parameters, b.Confidential, b.CpuOnly),
	}, MinMemoryGiB: deref(req.Params.MinMemoryGiB)})
	if err != nil {
		return nil, err
	}
	out := model.Estimate{Gpus: e.GPUs, Spot: e.Spot, PricePerHour: e.PricePerHour, Currency: model.EstimateCurrencyUSD, Quota: e.Quota, QuotaUsed: e.QuotaUsed,
		Known: e.Known, StartsNow: e.StartsNow, Why: omitEmpty(e.Why), Cohort: omitEmpty(e.Cohort)}
	out.Gpu.Class, out.Gpu.Count, out.Gpu.MigProfile = e.Class, e.Count, omitEmpty(e.MIGProfile)
	if e.MaxRuntime > 0 {
		out.MaxRuntime, out.CostAtMaxRuntime = ptr(e.MaxRuntime.String()), ptr(e.CostAtMaxRuntime)
	}
	if e.Known {
		out.Pending, out.Free = ptr(e.Pending), ptr(e.Free)
	}
	if e.Spot {
		out.OnDemandPerHour = ptr(e.OnDemandPerHour)
	}
	if e.Budget != nil {
		out.Budget = ptr(budgetOut(*e.Budget, nil))
	}
	out.NeedsApproval, out.Held, out.Verdict = ptr(e.Approval), ptr(e.Held), omitEmpty(e.Verdict)
	if req.Params.MinMemoryGiB != nil {
		opts := []model.EstimateOption{}
		for _, o := range e.Options {
			g := model.EstimateOption{MemoryGiB: o.MemoryGiB, Spot: o.Spot, PricePerHour: o.PricePerHour}
			g.Gpu.Class, g.Gpu.Count, g.Gpu.MigProfile = o.Class, o.Count, omitEmpty(o.MIGProfile)
			if o.Known {
				g.Free = ptr(o.Free)
			}
			opts = append(opts, g)
		}
		out.Options = &opts
	}
	return gen.EstimateWorkload200JSONResponse(out), nil
}

func (s *server) StopWorkload(ctx context.Context, req gen.StopWorkloadRequestObject) (gen.StopWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Stop(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return gen.StopWorkload200JSONResponse(s.workloadOut(w)), nil
}

func (s *server) KeepWorkloadAlive(ctx context.Context, req gen.KeepWorkloadAliveRequestObject) (gen.KeepWorkloadAliveResponseObject, error) {
	w, err := s.o.Workloads.KeepAlive(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return gen.KeepWorkloadAlive200JSONResponse(s.workloadOut(w)), nil
}

func (s *server) StartWorkload(ctx context.Context, req gen.StartWorkloadRequestObject) (gen.StartWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Start(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return gen.StartWorkload200JSONResponse(s.workloadOut(w)), nil
}

func (s *server) GetWorkloadLogs(ctx context.Context, req gen.GetWorkloadLogsRequestObject) (gen.GetWorkloadLogsResponseObject, error) {
	follow := deref(req.Params.Follow)
	if follow {
		// Following a workload that has ended is reading its log: it ends.
		w, err := s.o.Workloads.Get(ctx, req.Id)
		if err != nil {
			return nil, err
		}
		follow = !ended(w.Status)
	}
	r, err := s.o.Workloads.Logs(ctx, req.Id, follow, int64(deref(req.Params.TailLines)))
	if err != nil {
		return nil, err
	}
	l := &logStream{r: r}
	if h, ok := live.HandleFrom(ctx); ok && follow {
		// The change feed says when the workload changes: once it has
		// ended, the follow ends too, saying how.
		go l.endWith(ctx, h.Changed(), s.o.LogDrain, func() (workload.Workload, error) { return s.o.Workloads.Get(ctx, req.Id) })
	}
	return l, nil
}

// ended says whether a workload runs no more (its log is complete).
func ended(st workload.Status) bool {
	switch st {
	case workload.Succeeded, workload.Failed, workload.Stopped, workload.IdleStopped, workload.Deleted:
		return true
	}
	return false
}

// logStream copies a log to the client as it arrives, flushing each chunk;
// a followed log ends once its workload has ended, with a last line saying
// how.
type logStream struct {
	r    io.ReadCloser
	mu   sync.Mutex
	last string // the closing line, once the workload has ended
}

// endWith waits for the workload to end and then closes the log, drain
// later.
func (l *logStream) endWith(ctx context.Context, changed <-chan struct{}, drain time.Duration, get func() (workload.Workload, error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		w, err := get()
		var nf *fault.NotFound
		var fb *fault.Forbidden
		switch {
		case errors.As(err, &nf), errors.As(err, &fb):
			l.r.Close() // gone, or no longer the caller's
			return
		case err != nil:
			continue // passing (the store did not answer): the next change asks again
		case ended(w.Status):
			l.mu.Lock()
			l.last = fmt.Sprintf("\n[gantry] workload %s %s", w.ID, w.Status)
			if w.Reason != "" {
				l.last += ": " + w.Reason
			}
			l.last += "\n"
			l.mu.Unlock()
			// What the container prints while it shuts down (its grace
			// period) still comes; then the follow ends.
			select {
			case <-ctx.Done():
			case <-time.After(drain):
				l.r.Close()
			}
			return
		}
	}
}

func (l *logStream) VisitGetWorkloadLogsResponse(w http.ResponseWriter) error {
	defer l.r.Close()
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.last != "" {
			io.WriteString(w, l.last)
		}
	}()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := l.r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client went away
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return nil // headers are sent: end the stream
		}
	}
}

func (s *server) ListWorkloadEvents(ctx context.Context, req gen.ListWorkloadEventsRequestObject) (gen.ListWorkloadEventsResponseObject, error) {
	evs, err := s.o.Workloads.Events(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	out := model.EventList{Items: make([]model.Event, len(evs))}
	for i, e := range evs {
		out.Items[i] = model.Event{Time: e.Time, Type: e.Type, Reason: e.Reason, Message: e.Message, Object: e.Object, Count: ptr(e.Count)}
	}
	return gen.ListWorkloadEvents200JSONResponse(out), nil
}

func (s *server) ListWorkloads(ctx context.Context, req gen.ListWorkloadsRequestObject) (gen.ListWorkloadsResponseObject, error) {
	p := req.Params
	f := workload.Filter{Owner: deref(p.Owner), Template: deref(p.Template), Limit: deref(p.Limit)}
	if p.Team != nil {
		t, err := team.Parse(*p.Team)
		if err != nil {
			return nil, err
		}
		f.Team = t
	}
	if p.Status != nil {
		f.Status = workload.Status(*p.Status)
	}
	f.Ended = deref(p.Ended)
	page, err := s.o.Workloads.List(ctx, f, deref(p.Cursor))
	if err != nil {
		return nil, err
	}
	out := model.WorkloadList{Items: make([]model.Workload, len(page.Items))}
	items := make([]*model.Workload, len(page.Items))
	for i, w := range page.Items {
		out.Items[i] = s.workloadOut(w)
		items[i] = &out.Items[i]
	}
	s.named(ctx, items...)
	s.withProgress(ctx, items...)
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	return workloadPage(out), nil
}

func (s *server) GetWorkload(ctx context.Context, req gen.GetWorkloadRequestObject) (gen.GetWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Get(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	out := s.workloadOut(w)
	s.named(ctx, &out)
	// What the workload has of other kinds is read only where there is
	// some (w.Related, read with it; nil: not known, so read).
	if w.Related == nil || w.Related.Progress {
		s.withProgress(ctx, &out)
	}
	var moves []quarantine.Move
	if w.Related == nil || w.Related.Moves {
		if moves, err = s.o.Moves.Moves(ctx, w.ID); err != nil {
			return nil, err
		}
	}
	if len(moves) > 0 {
		ms := make([]model.WorkloadMove, len(moves))
		for i, m := range moves {
			ms[i] = moveOut(m)
		}
		out.Moves = &ms
	}
	return workloadOne(out), nil
}

// moveOut is a move as the API shows it.
func moveOut(m quarantine.Move) model.WorkloadMove {
	out := model.WorkloadMove{Node: m.Node, Gpu: m.GPU, GpuIndex: m.Index, Reason: m.Reason, Phase: model.WorkloadMovePhase(m.Phase),
		Detail: m.Detail, At: m.At, Notice: m.Notice()}
	if !m.ResumedAt.IsZero() {
		out.ResumedAt, out.ResumedOn = &m.ResumedAt, &m.ResumedOn
	}
	if m.ResumedFrom >= 0 {
		out.ResumedFrom = &m.ResumedFrom
	}
	return out
}

func (s *server) DeleteWorkload(ctx context.Context, req gen.DeleteWorkloadRequestObject) (gen.DeleteWorkloadResponseObject, error) {
	if err := s.o.Workloads.Delete(ctx, req.Id); err != nil {
		return nil, err
	}
	return gen.DeleteWorkload204Response{}, nil
}

// omitEmpty is nil for "", so that an empty field is left out.
func omitEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// WatchWorkload streams a workload's changes (server-sent events) until the
// client goes, the workload is deleted, or watchLifetime passes — then the
// browser's EventSource reconnects, and authentication and authorization are
// checked again, so a revoked session or token stops streaming within it.
func (s *server) WatchWorkload(ctx context.Context, req gen.WatchWorkloadRequestObject) (gen.WatchWorkloadResponseObject, error) {
	// The first read answers a missing workload or a refused caller with a
	// problem, before the stream starts.
	w, err := s.o.Workloads.Get(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return watchStream{ctx: ctx, first: w, log: s.o.Logger, owner: s.names(ctx, w.Owner)[w.Owner], out: s.workloadOut,
		get: func() (workload.Workload, error) { return s.o.Workloads.Get(ctx, req.Id) }}, nil
}

// watchStream is a workload's server-sent events: the workload whenever it
// changes, as the change feed says (and once a second while it waits).
type watchStream struct {
	ctx   context.Context
	first workload.Workload
	owner string // the owner's display name (it does not change)
	log   *slog.Logger
	get   func() (workload.Workload, error)
	out   func(workload.Workload) model.Workload // as the API shows it, on the server's clock
}

// watchEvery, keepAliveEvery and watchLifetime pace a watch stream.
const (
	watchEvery     = time.Second
	keepAliveEvery = 30 * time.Second
	watchLifetime  = 30 * time.Minute // a refresh; revocation closes it at once (live)
)

func (ws watchStream) VisitWatchWorkloadResponse(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	if _, err := io.WriteString(w, "retry: 3000\n\n"); err != nil {
		return nil
	}
	var last []byte
	// send writes the workload if it changed; false: stop streaming.
	send := func(wl workload.Workload) bool {
		out := ws.out(wl)
		out.OwnerName = omitEmpty(ws.owner)
		data, err := json.Marshal(out)
		if err != nil {
			ws.log.ErrorContext(ws.ctx, "watch: encode the workload", "err", err)
			return false
		}
		out.CostSoFar, out.RanSeconds = 0, 0 // grow by themselves: not a change
		key, _ := json.Marshal(out)
		if bytes.Equal(key, last) {
			return true
		}
		last = key
		if _, err := fmt.Fprintf(w, "event: workload\ndata: %s\n\n", data); err != nil {
			return false // the client went away
		}
		flush()
		return wl.Status != workload.Deleted
	}
	if !send(ws.first) {
		return nil
	}
	// The workload is read again when the change feed says it changed
	// (live.Handle); while it waits (queued, pending, held for approval)
	// its place and reasons change with others', so it is also read every
	// watchEvery then. Without a handle (no registry), it is polled.
	var changed <-chan struct{}
	if h, ok := live.HandleFrom(ws.ctx); ok {
		changed = h.Changed()
	}
	// The poll runs only while the workload waits, and when there is no
	// feed: an idle stream costs no wake-ups but its keep-alive.
	var poll <-chan time.Time
	repoll := func(st workload.Status) {
		poll = nil
		if changed == nil || waiting(st) {
			poll = time.After(watchEvery)
		}
	}
	repoll(ws.first.Status)
	keepAlive := time.NewTicker(keepAliveEvery)
	defer keepAlive.Stop()
	end := time.After(watchLifetime)
	for {
		select {
		case <-ws.ctx.Done():
			return nil
		case <-end:
			return nil // the client reconnects, and is checked again
		case <-keepAlive.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			flush()
			continue
		case <-changed:
		case <-poll:
		}
		wl, err := ws.get()
		var nf *fault.NotFound
		switch {
		case errors.As(err, &nf):
			// Gone, or no longer the caller's to see.
			msg, _ := json.Marshal("workload " + nf.Name + " is not there")
			fmt.Fprintf(w, "event: gone\ndata: %s\n\n", msg)
			flush()
			return nil
		case err != nil:
			// Say nothing of the cause (the log has it): the client
			// reconnects and is answered with a problem if it persists.
			ws.log.WarnContext(ws.ctx, "watch: read the workload", "err", err)
			return nil
		}
		repoll(wl.Status)
		if !send(wl) {
			return nil
		}
	}
}

// waiting says whether a workload's record can change without a write of
// its own: its queue position and reasons move with other workloads.
func waiting(s workload.Status) bool {
	return s == workload.Pending || s == workload.Queued || s == workload.PendingApproval
}
