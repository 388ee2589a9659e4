// Package workloads stores Gantry's workloads: their records (launch,
// lifecycle, approval, history), their runs for costs over a period, the
// last use a person made of each, and the GPU use telemetry measured for
// them (read here, for metering and idle culling; written by telemetrydb),
// and the trials whose runs some of them are (trials.go). Every change a
// live connection must hear of is appended to the change feed in the
// transaction that makes it. It implements workload.Store, cull.Store and
// trial.Store.
package workloads

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/cull"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// Store is the workloads of one database.
type Store struct {
	db   *store.DB
	rows *rowCache // decoded rows of the pages read, by version
}

var (
	_ workload.Store = (*Store)(nil)
	_ cull.Store     = (*Store)(nil)
)

// New is the workloads of db.
func New(db *store.DB) *Store { return &Store{db: db, rows: newRowCache(maxCachedRows)} }

const workloadColumns = `id, name, team, owner, template, template_version, kind, gpu_class, mig_profile, gpu_count, parameters, objects_hash, status, created_at, updated_at, applied_hash, reason, idempotency_key, request_hash, endpoint, image, tee, expires_at, price_per_hour, running_us, running_since, approval_why, approval_expires, approval_decision, approval_by, approval_note, approval_at, spot_evictions, started_at, ended_at, attempts, exit_code, held, node_group, run_price, ran_cost, cluster, trial, trial_caps, deferred_until, deferral, warned, approval_restart`

// CreateWorkload implements workload.Store.
func (s *Store) CreateWorkload(ctx context.Context, w workload.Workload) error {
	params, err := json.Marshal(w.Parameters)
	if err != nil {
		return err
	}
	var trialID, trialCaps string
	if w.Trial != nil {
		b, err := json.Marshal(w.Trial)
		if err != nil {
			return err
		}
		trialID, trialCaps = w.Trial.ID, string(b)
	}
	until, deferral, err := deferralColumns(w.Deferral)
	if err != nil {
		return err
	}
	warned, err := warnedColumn(w.Warned)
	if err != nil {
		return err
	}
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		if w.Status == workload.PendingApproval {
			if err := s.pendingCap(ctx, tx, w); err != nil {
				return err
			}
		}
		_, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO workloads (`+workloadColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			w.ID, w.Name, w.Team, w.Owner, w.Template, w.TemplateVersion, w.Kind, w.GPUClass, w.MIGProfile, w.GPUCount,
			string(params), w.ObjectsHash, string(w.Status), w.CreatedAt.UnixMicro(), w.UpdatedAt.UnixMicro(), w.AppliedHash, w.Reason,
			nullable(w.IdempotencyKey), w.RequestHash, w.Endpoint, w.Image, w.TEE, store.Micros(w.ExpiresAt), w.PricePerHour, w.RunningFor.Microseconds(), store.Micros(w.RunningSince),
			w.Approval.Why, store.Micros(w.Approval.Expires), w.Approval.Decision, w.Approval.By, w.Approval.Note, store.Micros(w.Approval.At), strings.Join(w.SpotEvictions, ","),
			store.Micros(w.StartedAt), store.Micros(w.EndedAt), w.Attempts, exitCode(w.ExitCode), store.BoolInt(w.Held), w.NodeGroup, w.RunPrice, w.RanCost, w.Cluster, trialID, trialCaps, until, deferral, warned, store.BoolInt(w.Approval.Restart))
		return err
	})
	var limit *workload.PendingLimit
	if errors.As(err, &limit) {
		return err
	}
	if err != nil {
		if w.IdempotencyKey != "" && store.UniqueViolation(err) {
			return &fault.Conflict{Kind: "workload", Name: w.IdempotencyKey, Reason: "Idempotency-Key already used"}
		}
		return fmt.Errorf("insert workload %s: %w", w.ID, err)
	}
	return nil
}

// pendingCap is the cap on one person's workloads waiting for approval in a
// team (launches, and starts again), decided in the transaction that
// records one more: on PostgreSQL a lock per team and owner queues
// concurrent ones; SQLite's write transactions are exclusive.
// *workload.PendingLimit when w would be one too many.
func (s *Store) pendingCap(ctx context.Context, tx *sql.Tx, w workload.Workload) error {
	if s.db.Driver() == store.Postgres {
		if _, err := s.db.TxExec(ctx, tx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "pending/"+w.Team.String()+"/"+w.Owner); err != nil {
			return fmt.Errorf("lock the approvals waiting for %s in team %s: %w", w.Owner, w.Team, err)
		}
	}
	var n int
	if err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT COUNT(*) FROM workloads WHERE team = ? AND owner = ? AND status = ? AND id <> ?`),
		w.Team.String(), w.Owner, string(workload.PendingApproval), w.ID).Scan(&n); err != nil {
		return fmt.Errorf("count the approvals waiting for %s in team %s: %w", w.Owner, w.Team, err)
	}
	if n >= workload.MaxPendingApprovals {
		return &workload.PendingLimit{Waiting: n}
	}
	return nil
}

// scanWorkload reads a row of workloadColumns.
func scanWorkload(row store.Scanner) (workload.Workload, error) { return scanAfter(row) }

// scanAfter reads a row of workloadColumns after the columns of before,
// which a query selects first.
func scanAfter(row store.Scanner, before ...any) (workload.Workload, error) {
	var w workload.Workload
	var params, status string
	var created, updated, expires, runningUS, runningSince, approvalExpires, approvalAt int64
	var key sql.NullString
	var evictions string
	var started, ended int64
	var exit sql.NullInt64
	var held, restart int
	var trialID, trialCaps, deferral, warned string
	var until int64
	err := row.Scan(append(before, &w.ID, &w.Name, &w.Team, &w.Owner, &w.Template, &w.TemplateVersion, &w.Kind, &w.GPUClass, &w.MIGProfile,
		&w.GPUCount, &params, &w.ObjectsHash, &status, &created, &updated, &w.AppliedHash, &w.Reason, &key, &w.RequestHash, &w.Endpoint, &w.Image, &w.TEE, &expires,
		&w.PricePerHour, &runningUS, &runningSince, &w.Approval.Why, &approvalExpires, &w.Approval.Decision, &w.Approval.By, &w.Approval.Note, &approvalAt, &evictions,
		&started, &ended, &w.Attempts, &exit, &held, &w.NodeGroup, &w.RunPrice, &w.RanCost, &w.Cluster, &trialID, &trialCaps, &until, &deferral, &warned, &restart)...)
	if err != nil {
		return w, err
	}
	if trialCaps != "" {
		w.Trial = new(workload.Trial)
		if err := json.Unmarshal([]byte(trialCaps), w.Trial); err != nil {
			return w, fmt.Errorf("workload %s: stored trial caps are corrupt: %w", w.ID, err)
		}
	}
	if deferral != "" {
		w.Deferral = new(workload.Deferral)
		if err := json.Unmarshal([]byte(deferral), w.Deferral); err != nil {
			return w, fmt.Errorf("workload %s: stored deferral is corrupt: %w", w.ID, err)
		}
	}
	if warned != "" {
		if err := json.Unmarshal([]byte(warned), &w.Warned); err != nil {
			return w, fmt.Errorf("workload %s: stored warning is corrupt: %w", w.ID, err)
		}
	}
	w.Status = workload.Status(status)
	w.IdempotencyKey = key.String
	w.CreatedAt, w.UpdatedAt = time.UnixMicro(created).UTC(), time.UnixMicro(updated).UTC()
	w.RunningFor = time.Duration(runningUS) * time.Microsecond
	w.ExpiresAt, w.RunningSince = fromMicros(expires), fromMicros(runningSince)
	w.Approval.Expires, w.Approval.At = fromMicros(approvalExpires), fromMicros(approvalAt)
	w.StartedAt, w.EndedAt, w.Held = fromMicros(started), fromMicros(ended), held != 0
	w.Approval.Restart = restart != 0
	if exit.Valid {
		code := int(exit.Int64)
		w.ExitCode = &code
	}
	if evictions != "" {
		w.SpotEvictions = strings.Split(evictions, ",")
	}
	if err := json.Unmarshal([]byte(params), &w.Parameters); err != nil {
		return w, fmt.Errorf("workload %s: stored parameters are corrupt: %w", w.ID, err)
	}
	return w, nil
}

// deferralColumns are a deferral's columns: when it is released (0 once
// released, or without one) and the deferral as JSON ("" without one).
func deferralColumns(d *workload.Deferral) (until int64, js string, err error) {
	if d == nil {
		return 0, "", nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return 0, "", fmt.Errorf("encode the deferral: %w", err)
	}
	return store.Micros(d.Until), string(b), nil
}

// warnedColumn is a warning as stored: JSON, ” for none.
func warnedColumn(w workload.Warned) (string, error) {
	if w.IsZero() {
		return "", nil
	}
	b, err := json.Marshal(w)
	if err != nil {
		return "", fmt.Errorf("encode the warning: %w", err)
	}
	return string(b), nil
}

// fromMicros is UnixMicro us as a UTC time, the zero time for 0.
func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// exitCode is an exit code for the database: NULL when not known.
func exitCode(code *int) any {
	if code == nil {
		return nil
	}
	return *code
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// WorkloadByIdempotencyKey implements workload.Store.
func (s *Store) WorkloadByIdempotencyKey(ctx context.Context, owner, key string) (workload.Workload, error) {
	w, err := scanWorkload(s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+workloadColumns+` FROM workloads WHERE owner = ? AND idempotency_key = ?`), owner, key))
	if errors.Is(err, sql.ErrNoRows) {
		return w, &fault.NotFound{Kind: "workload", Name: "Idempotency-Key " + key}
	}
	if err != nil {
		return w, fmt.Errorf("get workload by idempotency key: %w", err)
	}
	return w, nil
}

// workloadByIDQuery reads a workload and whether it has a run's progress
// and moves (workload.Related): one round trip for its page, not three.
const workloadByIDQuery = `SELECT
		EXISTS (SELECT 1 FROM run_progress p WHERE p.workload = workloads.id AND p.reports > 0),
		EXISTS (SELECT 1 FROM moves m WHERE m.workload_id = workloads.id),
		` + workloadColumns + ` FROM workloads WHERE id = ?`

// Workload implements workload.Store, with Related.
func (s *Store) Workload(ctx context.Context, id string) (workload.Workload, error) {
	var rel workload.Related
	w, err := scanAfter(s.db.Read().QueryRowContext(ctx, s.db.Q(workloadByIDQuery), id), &rel.Progress, &rel.Moves)
	if errors.Is(err, sql.ErrNoRows) {
		return w, &fault.NotFound{Kind: "workload", Name: id}
	}
	w.Related = &rel
	if err != nil {
		return w, fmt.Errorf("get workload %s: %w", id, err)
	}
	return w, nil
}

// ListWorkloads implements workload.Store: newest first, keyset-paginated.
func (s *Store) ListWorkloads(ctx context.Context, f workload.Filter) ([]workload.Workload, error) {
	var where []string
	var args []any
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	if f.Team != "" {
		add("team = ?", f.Team)
	}
	if f.Owner != "" {
		add("owner = ?", f.Owner)
	}
	if f.Trial != "" {
		add("trial = ?", f.Trial)
	}
	if f.Template != "" {
		add("template = ?", f.Template)
	}
	if len(f.Teams) > 0 {
		where = append(where, "team IN (?"+strings.Repeat(", ?", len(f.Teams)-1)+")")
		for _, t := range f.Teams {
			args = append(args, t)
		}
	}
	if f.Status != "" {
		add("status = ?", string(f.Status))
	}
	if f.Ended {
		in, ended := statusIn(workload.StatusesWhere(workload.Status.Ended))
		where, args = append(where, in), append(args, ended...)
	}
	if f.After != nil {
		at := f.After.CreatedAt.UnixMicro()
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, at, at, f.After.ID)
	}
	query := `SELECT id, version FROM workloads`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY created_at DESC, id DESC LIMIT ?"
	args = append(args, f.Limit)
	// A row changed between the two reads is kept only if it still
	// matches (its team, owner and template never change).
	matches := func(w workload.Workload) bool {
		return (f.Status == "" || w.Status == f.Status) && (!f.Ended || w.Status.Ended())
	}
	return s.cachedRows(ctx, matches, query, args...)
}

// cachedRows runs query, which selects (id, version) of the rows in their
// order, and answers those rows: the ones the cache holds at that version
// from it, the others read whole (at the version they have then, which may
// be later: such a row is answered only if it still matches) and kept.
func (s *Store) cachedRows(ctx context.Context, matches func(workload.Workload) bool, query string, args ...any) ([]workload.Workload, error) {
	type ref struct {
		id      string
		version int64
	}
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("list workloads: %w", err)
	}
	refs, err := store.Collect(rows, func(row store.Scanner) (r ref, err error) {
		return r, row.Scan(&r.id, &r.version)
	})
	if err != nil {
		return nil, fmt.Errorf("list workloads: %w", err)
	}
	ids, versions := make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		ids[i], versions[i] = r.id, r.version
	}
	out, kept := s.rows.getAll(ids, versions)
	var missing []any
	for i, r := range refs {
		if !kept[i] {
			missing = append(missing, r.id)
		}
	}
	read := make(map[string]workload.Workload, len(missing))
	for len(missing) > 0 {
		chunk := missing[:min(len(missing), maxInList)]
		missing = missing[len(chunk):]
		rows, err = s.db.Read().QueryContext(ctx, s.db.Q(`SELECT version, `+workloadColumns+` FROM workloads WHERE id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)`), chunk...)
		if err != nil {
			return nil, fmt.Errorf("list workloads: %w", err)
		}
		_, err = store.Collect(rows, func(row store.Scanner) (workload.Workload, error) {
			var version int64
			w, err := scanAfter(row, &version)
			if err == nil {
				s.rows.put(w, version)
				read[w.ID] = w
			}
			return w, err
		})
		if err != nil {
			return nil, fmt.Errorf("list workloads: %w", err)
		}
	}
	page := out[:0]
	for i, r := range refs {
		if kept[i] {
			page = append(page, out[i])
		} else if w, ok := read[r.id]; ok && matches(w) { // not there: deleted since the first query
			page = append(page, w)
		}
	}
	return page, nil
}

// maxInList bounds the ids one IN list names (SQLite takes at most 32,766
// arguments a statement, PostgreSQL 65,535).
const maxInList = 500

// queryWorkloads runs a query selecting workloadColumns and scans every row.
func (s *Store) queryWorkloads(ctx context.Context, what, query string, args ...any) ([]workload.Workload, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return store.Collect(rows, scanWorkload)
}

// UpdateWorkload implements workload.Store: fn sees the record as it is and
// returns the one to write, in one transaction that holds the row (SELECT …
// FOR UPDATE on PostgreSQL; on SQLite every write transaction is exclusive),
// so concurrent updaters queue and none is lost. Only the mutable fields
// (status, reason, applied hash, endpoint, expiry, updated at, running time,
// approval) are written, and nothing
// when they are unchanged. fn must not use the store.
func (s *Store) UpdateWorkload(ctx context.Context, id string, fn func(workload.Workload) (workload.Workload, error)) (workload.Workload, error) {
	return s.UpdateWorkloadNotify(ctx, id, func(w workload.Workload) (workload.Workload, *notify.Message, error) {
		w, err := fn(w)
		return w, nil, err
	})
}

// UpdateWorkloadNotify implements workload.Store: UpdateWorkload whose fn
// may also queue a webhook, in the same transaction.
func (s *Store) UpdateWorkloadNotify(ctx context.Context, id string, fn func(workload.Workload) (workload.Workload, *notify.Message, error)) (workload.Workload, error) {
	var out workload.Workload
	err := s.db.TxChanges(ctx, func(tx *sql.Tx) error {
		old, err := scanWorkload(s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT `+workloadColumns+` FROM workloads WHERE id = ?`+s.db.ForUpdate()), id))
		if errors.Is(err, sql.ErrNoRows) {
			return &fault.NotFound{Kind: "workload", Name: id}
		}
		if err != nil {
			return fmt.Errorf("get workload %s: %w", id, err)
		}
		// Its last use, under the row's lock: TouchWorkload takes the same
		// lock, so a use is either seen here or recorded after this commits.
		var used int64
		if err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT at FROM workload_activity WHERE workload_id = ?`), id).Scan(&used); err == nil {
			old.LastUsed = time.UnixMicro(used).UTC()
		} else if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("last use of workload %s: %w", id, err)
		}
		w, msg, err := fn(old)
		if err != nil {
			return err
		}
		if msg != nil {
			if err := s.db.InsertNotification(ctx, tx, *msg); err != nil {
				return err
			}
		}
		if w.ID != old.ID {
			return fmt.Errorf("update workload %s: the updater changed its id to %q", id, w.ID)
		}
		out = w
		if workload.SameRecord(old, w) {
			out.UpdatedAt = old.UpdatedAt
			return nil
		}
		if w.Status == workload.PendingApproval && old.Status != workload.PendingApproval {
			if err := s.pendingCap(ctx, tx, w); err != nil {
				return err
			}
		}
		until, deferral, err := deferralColumns(w.Deferral)
		if err != nil {
			return err
		}
		warned, err := warnedColumn(w.Warned)
		if err != nil {
			return err
		}
		// The row's version goes up by one (a trigger: rows.go).
		_, err = s.db.TxExec(ctx, tx, s.db.Q(`UPDATE workloads SET status = ?, reason = ?, applied_hash = ?, endpoint = ?, expires_at = ?, updated_at = ?, running_us = ?, running_since = ?,
			approval_why = ?, approval_expires = ?, approval_decision = ?, approval_by = ?, approval_note = ?, approval_at = ?, spot_evictions = ?,
			started_at = ?, ended_at = ?, attempts = ?, exit_code = ?, held = ?, node_group = ?, run_price = ?, ran_cost = ?, cluster = ?, deferred_until = ?, deferral = ?, warned = ?, approval_restart = ? WHERE id = ?`),
			string(w.Status), w.Reason, w.AppliedHash, w.Endpoint, store.Micros(w.ExpiresAt), w.UpdatedAt.UnixMicro(), w.RunningFor.Microseconds(), store.Micros(w.RunningSince),
			w.Approval.Why, store.Micros(w.Approval.Expires), w.Approval.Decision, w.Approval.By, w.Approval.Note, store.Micros(w.Approval.At), strings.Join(w.SpotEvictions, ","),
			store.Micros(w.StartedAt), store.Micros(w.EndedAt), w.Attempts, exitCode(w.ExitCode), store.BoolInt(w.Held), w.NodeGroup, w.RunPrice, w.RanCost, w.Cluster, until, deferral, warned, store.BoolInt(w.Approval.Restart), id)
		if err != nil {
			return fmt.Errorf("update workload %s: %w", id, err)
		}
		// Its runs, for costs over a period: one begins when RunningSince is
		// set, and ends when it is cleared.
		if !old.RunningSince.IsZero() && !old.RunningSince.Equal(w.RunningSince) {
			if _, err := s.db.TxExec(ctx, tx, s.db.Q(`UPDATE workload_runs SET ended_at = ? WHERE workload_id = ? AND started_at = ?`),
				old.RunningSince.Add(w.RunningFor-old.RunningFor).UnixMicro(), id, old.RunningSince.UnixMicro()); err != nil {
				return fmt.Errorf("end a run of workload %s: %w", id, err)
			}
		}
		switch {
		case !w.RunningSince.IsZero() && !w.RunningSince.Equal(old.RunningSince):
			if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO workload_runs (workload_id, started_at, node_group, price_per_hour, cluster) VALUES (?, ?, ?, ?, ?)`),
				id, w.RunningSince.UnixMicro(), w.NodeGroup, w.RunPrice, w.Cluster); err != nil {
				return fmt.Errorf("record a run of workload %s: %w", id, err)
			}
		case !w.RunningSince.IsZero() && (w.NodeGroup != old.NodeGroup || w.RunPrice != old.RunPrice || w.Cluster != old.Cluster):
			// Where the current run is became known (or changed).
			if _, err := s.db.TxExec(ctx, tx, s.db.Q(`UPDATE workload_runs SET node_group = ?, price_per_hour = ?, cluster = ? WHERE workload_id = ? AND started_at = ?`),
				w.NodeGroup, w.RunPrice, w.Cluster, id, w.RunningSince.UnixMicro()); err != nil {
				return fmt.Errorf("place a run of workload %s: %w", id, err)
			}
		}
		return s.db.AppendChange(ctx, tx, string(live.Workload), id)
	})
	return out, err
}

// WorkloadRuns implements workload.Store: the runs overlapping [from, to) of
// the teams' workloads (every team's when teams is nil), with what they are
// billed by.
func (s *Store) WorkloadRuns(ctx context.Context, from, to time.Time, teams []team.Name) ([]workload.Run, error) {
	q := `SELECT w.id, w.team, w.owner, w.template, w.template_version, w.gpu_class, w.mig_profile, w.gpu_count,
		CASE WHEN r.price_per_hour > 0 THEN r.price_per_hour ELSE w.price_per_hour END, r.node_group, r.cluster, r.started_at, r.ended_at,
		w.created_at, w.started_at, w.deferral
		FROM workload_runs r JOIN workloads w ON w.id = r.workload_id
		WHERE r.started_at < ? AND (r.ended_at = 0 OR r.ended_at > ?)`
	args := []any{to.UnixMicro(), from.UnixMicro()}
	if teams != nil {
		if len(teams) == 0 {
			return nil, nil
		}
		q += ` AND w.team IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(teams)), ", ") + `)`
		for _, t := range teams {
			args = append(args, t.String())
		}
	}
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(q+` ORDER BY r.started_at, w.id`), args...)
	if err != nil {
		return nil, fmt.Errorf("list workload runs: %w", err)
	}
	defer rows.Close()
	var out []workload.Run
	for rows.Next() {
		var r workload.Run
		var started, ended, created, first int64
		var deferral string
		if err := rows.Scan(&r.Workload, &r.Team, &r.Owner, &r.Template, &r.TemplateVersion, &r.GPUClass, &r.MIGProfile, &r.GPUCount, &r.PricePerHour, &r.NodeGroup, &r.Cluster, &started, &ended,
			&created, &first, &deferral); err != nil {
			return nil, fmt.Errorf("list workload runs: %w", err)
		}
		// Only its first run was held: one after a stop and a start was
		// not.
		if deferral != "" && started == first {
			var d workload.Deferral
			if err := json.Unmarshal([]byte(deferral), &d); err != nil {
				return nil, fmt.Errorf("list workload runs: workload %s: stored deferral is corrupt: %w", r.Workload, err)
			}
			if !d.Released.IsZero() {
				r.Waited = d.Released.Sub(time.UnixMicro(created).UTC())
			}
		}
		r.From = time.UnixMicro(started).UTC()
		if ended != 0 {
			r.To = time.UnixMicro(ended).UTC()
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Demand lists the launches of GPUs wanted at some time from since on:
// live ones, and those that ended after since (a launch that never ran
// and never ends — rejected, denied, waiting for approval — is left out),
// oldest first.
func (s *Store) Demand(ctx context.Context, since time.Time) ([]workload.Demand, error) {
	in, args := statusIn(workload.StatusesWhere(workload.Status.Live))
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT created_at, ended_at, template, gpu_class, mig_profile, gpu_count, deferral FROM workloads
		WHERE gpu_count > 0 AND deferred_until = 0 AND (ended_at > ? OR (ended_at = 0 AND `+in+`)) ORDER BY created_at, id`), append([]any{since.UnixMicro()}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("list demand: %w", err)
	}
	defer rows.Close()
	var out []workload.Demand
	for rows.Next() {
		var d workload.Demand
		var created, ended int64
		var deferral string
		if err := rows.Scan(&created, &ended, &d.Template, &d.GPUClass, &d.MIGProfile, &d.GPUCount, &deferral); err != nil {
			return nil, fmt.Errorf("list demand: %w", err)
		}
		d.Created = time.UnixMicro(created).UTC()
		if deferral != "" {
			// Held for cleaner power: it asked for GPUs once released, and
			// not at all if it was stopped or deleted while held.
			var df workload.Deferral
			if err := json.Unmarshal([]byte(deferral), &df); err != nil {
				return nil, fmt.Errorf("list demand: the deferral of a launch of %s: %w", d.Template, err)
			}
			if df.Released.IsZero() {
				continue
			}
			d.Created = df.Released
		}
		if ended != 0 {
			d.Ended = time.UnixMicro(ended).UTC()
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list demand: %w", err)
	}
	slices.SortStableFunc(out, func(a, b workload.Demand) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// ChargeWarm implements capacity.Ledger: gpus placeholder GPUs held from
// since to now, at price per GPU-hour, are added to now's day (UTC) — from
// where the group was last charged, if that is later — and the group is
// marked charged to now, in one transaction: a pass cut off after charging
// (a leader killed before it reset its placeholders) is not charged twice.
func (s *Store) ChargeWarm(ctx context.Context, group string, since, now time.Time, gpus int, price float64) error {
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		// The group's mark, locked (two leaders overlapping at a handoff
		// charge one after the other, the second from the first's mark).
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO warm_charged (node_group, until) VALUES (?, 0) ON CONFLICT (node_group) DO NOTHING`), group); err != nil {
			return err
		}
		var until int64
		if err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT until FROM warm_charged WHERE node_group = ?`+s.db.ForUpdate()), group).Scan(&until); err != nil {
			return err
		}
		from := since
		if t := fromMicros(until); t.After(from) {
			from = t
		}
		if !now.After(from) || gpus <= 0 {
			return nil
		}
		hours := float64(gpus) * now.Sub(from).Hours()
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO warm_spend (node_group, day, cost, gpu_hours) VALUES (?, ?, ?, ?)
			ON CONFLICT (node_group, day) DO UPDATE SET cost = warm_spend.cost + excluded.cost, gpu_hours = warm_spend.gpu_hours + excluded.gpu_hours`),
			group, now.UTC().Truncate(24*time.Hour).UnixMicro(), hours*price, hours); err != nil {
			return err
		}
		_, err := s.db.TxExec(ctx, tx, s.db.Q(`UPDATE warm_charged SET until = ? WHERE node_group = ?`), now.UnixMicro(), group)
		return err
	})
	if err != nil {
		return fmt.Errorf("charge warm capacity of %s: %w", group, err)
	}
	return nil
}

// WarmSpend implements workload.Store: what warming cost per node group on
// each day (UTC) that overlaps [from, to), by day and group.
func (s *Store) WarmSpend(ctx context.Context, from, to time.Time) ([]workload.WarmSpend, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT node_group, day, cost, gpu_hours FROM warm_spend
		WHERE day >= ? AND day < ? ORDER BY day, node_group`), from.UTC().Truncate(24*time.Hour).UnixMicro(), to.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("list warm spend: %w", err)
	}
	defer rows.Close()
	var out []workload.WarmSpend
	for rows.Next() {
		var w workload.WarmSpend
		var day int64
		if err := rows.Scan(&w.Group, &day, &w.Cost, &w.GPUHours); err != nil {
			return nil, fmt.Errorf("list warm spend: %w", err)
		}
		w.Day = time.UnixMicro(day).UTC()
		out = append(out, w)
	}
	return out, rows.Err()
}

// UnappliedWorkloads implements workload.Store: live workloads whose objects
// were never applied (not ended; those held for approval only with
// withHeld), oldest first.
func (s *Store) UnappliedWorkloads(ctx context.Context, limit int, withHeld bool) ([]workload.Workload, error) {
	in, args := statusIn(workload.StatusesWhere(func(st workload.Status) bool {
		return st.Live() || (withHeld && st == workload.PendingApproval)
	}))
	return s.queryWorkloads(ctx, "list unapplied workloads", `SELECT `+workloadColumns+` FROM workloads
		WHERE applied_hash <> objects_hash AND deferred_until = 0 AND `+in+` ORDER BY created_at, id LIMIT ?`, append(args, limit)...)
}

// DueDeferrals implements workload.Store.
func (s *Store) DueDeferrals(ctx context.Context, now time.Time, limit int) ([]workload.Workload, error) {
	return s.queryWorkloads(ctx, "list due deferrals", `SELECT `+workloadColumns+` FROM workloads
		WHERE deferred_until > 0 AND deferred_until <= ? AND status = ? ORDER BY deferred_until, id LIMIT ?`,
		now.UnixMicro(), string(workload.Queued), limit)
}

// statusIn is "status IN (?, …)" for statuses, with its arguments.
func statusIn(statuses []workload.Status) (string, []any) {
	args := make([]any, len(statuses))
	for i, st := range statuses {
		args[i] = string(st)
	}
	return "status IN (?" + strings.Repeat(", ?", len(statuses)-1) + ")", args
}

// ExpiredApprovals implements workload.Store: launches still waiting for
// approval whose time to decide ended at or before now, oldest first.
func (s *Store) ExpiredApprovals(ctx context.Context, now time.Time, limit int) ([]workload.Workload, error) {
	return s.queryWorkloads(ctx, "list expired approvals", `SELECT `+workloadColumns+` FROM workloads
		WHERE status = ? AND approval_expires > 0 AND approval_expires <= ? ORDER BY approval_expires, id LIMIT ?`,
		string(workload.PendingApproval), now.UnixMicro(), limit)
}

// ExpiredWorkloads implements workload.Store: live workloads other than Jobs
// whose max runtime ended at or before now, oldest expiry first.
func (s *Store) ExpiredWorkloads(ctx context.Context, now time.Time, limit int) ([]workload.Workload, error) {
	in, args := statusIn(workload.StatusesWhere(workload.Status.Live))
	return s.queryWorkloads(ctx, "list expired workloads", `SELECT `+workloadColumns+` FROM workloads
		WHERE expires_at > 0 AND expires_at <= ? AND `+in+` AND kind <> ? ORDER BY expires_at, id LIMIT ?`,
		append(append([]any{now.UnixMicro()}, args...), template.Job, limit)...)
}

// TouchWorkload records that a person used the workload at at (a later
// time replaces an earlier one, never the other way).
func (s *Store) TouchWorkload(ctx context.Context, id string, at time.Time) error {
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		if s.db.Driver() == store.Postgres {
			// The workload's row lock, as UpdateWorkload takes it: a use
			// and an update that depends on it (an idle stop) queue.
			if _, err := s.db.TxExec(ctx, tx, `SELECT 1 FROM workloads WHERE id = $1 FOR UPDATE`, id); err != nil {
				return err
			}
		}
		_, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO workload_activity (workload_id, at) VALUES (?, ?)
		ON CONFLICT (workload_id) DO UPDATE SET at = CASE WHEN excluded.at > workload_activity.at THEN excluded.at ELSE workload_activity.at END`),
			id, at.UnixMicro())
		return err
	})
	if err != nil {
		return fmt.Errorf("record activity on workload %s: %w", id, err)
	}
	return nil
}

// WorkloadActivity is when a person last used the workload (zero: never).
func (s *Store) WorkloadActivity(ctx context.Context, id string) (time.Time, error) {
	var at int64
	err := s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT at FROM workload_activity WHERE workload_id = ?`), id).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("activity on workload %s: %w", id, err)
	}
	return time.UnixMicro(at).UTC(), nil
}

// RunningWorkloads lists Running workloads, oldest first.
func (s *Store) RunningWorkloads(ctx context.Context, limit int) ([]workload.Workload, error) {
	return s.queryWorkloads(ctx, "list running workloads", `SELECT `+workloadColumns+` FROM workloads
		WHERE status = ? ORDER BY updated_at, id LIMIT ?`, string(workload.Running), limit)
}
