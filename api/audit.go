package api

import (
	"context"
	"errors"
	"strings"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/fault"
)

func (s *server) ListAudit(ctx context.Context, req gen.ListAuditRequestObject) (gen.ListAuditResponseObject, error) {
	if s.o.Audit == nil {
		return nil, &fault.Unavailable{What: "audit log", Err: errors.New("not configured on this server")}
	}
	p := req.Params
	limit := 100
	if p.Limit != nil {
		limit = *p.Limit
	}
	if p.After != nil && p.Before != nil {
		return nil, &fault.Invalid{Fields: []fault.Field{{Path: "before", Message: "before (newest first) or after (oldest first), not both"}}}
	}
	// Newest first unless paged from the start with after.
	f := audit.Filter{Actor: deref(p.Actor), After: deref(p.After), Newest: p.After == nil, Before: deref(p.Before), Limit: limit + 1}
	if p.Decision != nil {
		f.Decision = string(*p.Decision)
	}
	recs, err := s.o.Audit.AuditRecords(ctx, f)
	if err != nil {
		return nil, err
	}
	out := model.AuditList{Items: []model.AuditRecord{}}
	actors := make([]string, len(recs))
	for i, r := range recs {
		actors[i] = r.Actor
	}
	names := s.names(ctx, actors...)
	for i, r := range recs {
		if i == limit {
			if f.Newest {
				out.NextBefore = ptr(recs[limit-1].Seq)
			} else {
				out.NextAfter = ptr(recs[limit-1].Seq)
			}
			break
		}
		out.Items = append(out.Items, model.AuditRecord{Seq: r.Seq, At: r.At, Actor: r.Actor, Action: r.Action, Object: r.Object,
			Decision: model.AuditRecordDecision(r.Decision), Status: r.Status, Reason: r.Reason, RequestId: r.RequestID, Source: r.Source, Hash: r.Hash,
			ActorName: omitEmpty(names[strings.SplitN(r.Actor, " (", 2)[0]])})
	}
	return gen.ListAudit200JSONResponse(out), nil
}
