package api

import (
	"context"
	"io"
	"net/http"

	"github.com/gantryhq/gantry/internal/workload"
)

func (s *server) CreateWorkload(ctx context.Context, req CreateWorkloadRequestObject) (CreateWorkloadResponseObject, error) {
	b := req.Body
	w, replayed, err := s.o.Workloads.Create(ctx, caller(ctx), workload.Request{
		Template: b.Template, Version: deref(b.TemplateVersion), Team: b.Team, Choice: choice(b.Gpu, b.Parameters, b.Confidential),
		IdempotencyKey: deref(req.Params.IdempotencyKey),
	})
	if err != nil {
		return nil, err
	}
	if replayed {
		return CreateWorkload200JSONResponse(workloadOut(w)), nil
	}
	return CreateWorkload201JSONResponse(workloadOut(w)), nil
}

func (s *server) StopWorkload(ctx context.Context, req StopWorkloadRequestObject) (StopWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Stop(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return StopWorkload200JSONResponse(workloadOut(w)), nil
}

func (s *server) StartWorkload(ctx context.Context, req StartWorkloadRequestObject) (StartWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Start(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return StartWorkload200JSONResponse(workloadOut(w)), nil
}

func (s *server) GetWorkloadLogs(ctx context.Context, req GetWorkloadLogsRequestObject) (GetWorkloadLogsResponseObject, error) {
	r, err := s.o.Workloads.Logs(ctx, req.Id, deref(req.Params.Follow), int64(deref(req.Params.TailLines)))
	if err != nil {
		return nil, err
	}
	return logStream{r}, nil
}

// logStream copies a log to the client as it arrives, flushing each chunk.
type logStream struct{ r io.ReadCloser }

func (l logStream) VisitGetWorkloadLogsResponse(w http.ResponseWriter) error {
	defer l.r.Close()
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

func (s *server) ListWorkloadEvents(ctx context.Context, req ListWorkloadEventsRequestObject) (ListWorkloadEventsResponseObject, error) {
	evs, err := s.o.Workloads.Events(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	out := EventList{Items: make([]Event, len(evs))}
	for i, e := range evs {
		out.Items[i] = Event{Time: e.Time, Type: e.Type, Reason: e.Reason, Message: e.Message, Object: e.Object, Count: ptr(e.Count)}
	}
	return ListWorkloadEvents200JSONResponse(out), nil
}

func (s *server) ListWorkloads(ctx context.Context, req ListWorkloadsRequestObject) (ListWorkloadsResponseObject, error) {
	p := req.Params
	f := workload.Filter{Team: deref(p.Team), Owner: deref(p.Owner), Template: deref(p.Template), Limit: deref(p.Limit)}
	if p.Status != nil {
		f.Status = workload.Status(*p.Status)
	}
	page, err := s.o.Workloads.List(ctx, f, deref(p.Cursor))
	if err != nil {
		return nil, err
	}
	out := WorkloadList{Items: make([]Workload, len(page.Items))}
	for i, w := range page.Items {
		out.Items[i] = workloadOut(w)
	}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	return ListWorkloads200JSONResponse(out), nil
}

func (s *server) GetWorkload(ctx context.Context, req GetWorkloadRequestObject) (GetWorkloadResponseObject, error) {
	w, err := s.o.Workloads.Get(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return GetWorkload200JSONResponse(workloadOut(w)), nil
}

func (s *server) DeleteWorkload(ctx context.Context, req DeleteWorkloadRequestObject) (DeleteWorkloadResponseObject, error) {
	if err := s.o.Workloads.Delete(ctx, req.Id); err != nil {
		return nil, err
	}
	return DeleteWorkload204Response{}, nil
}
