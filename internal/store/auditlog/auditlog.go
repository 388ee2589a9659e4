// Package auditlog stores Gantry's audit log: the hash-chained records,
// appended one at a time in one order even with several replicas, and the
// signed checkpoints of the chain's head. It implements audit.Store and
// audit.CheckpointStore.
package auditlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/store"
)

// Store is the audit log of one database.
type Store struct{ db *store.DB }

var _ audit.CheckpointStore = (*Store)(nil)

// New is the audit log of db.
func New(db *store.DB) *Store { return &Store{db: db} }

const auditColumns = `seq, at, actor, action, object, decision, status, reason, request_id, source, prev_hash, hash`

// AppendAudit implements audit.Store: the last record is read and the new one
// written in one transaction (under an advisory lock on PostgreSQL), so the
// chain has one order even with several replicas.
func (s *Store) AppendAudit(ctx context.Context, r audit.Record) (audit.Record, error) {
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = AppendIn(ctx, s.db, tx, r)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("append audit record: %w", err)
	}
	return r, nil
}

// AppendIn appends r to db's audit log as part of tx, so that a decision
// and its record are kept together or not at all; it returns r as chained.
func AppendIn(ctx context.Context, db *store.DB, tx *sql.Tx, r audit.Record) (audit.Record, error) {
	if db.Driver() == store.Postgres {
		if _, err := db.TxExec(ctx, tx, `SELECT pg_advisory_xact_lock(7286153)`); err != nil {
			return r, err
		}
	}
	var seq int64
	var prev string
	err := db.TxQueryRow(ctx, tx, `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&seq, &prev)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		prev = audit.Genesis
	case err != nil:
		return r, err
	}
	r.Seq, r.PrevHash = seq+1, prev
	r.At = r.At.UTC().Truncate(time.Microsecond)
	r.Hash = audit.Sum(r, prev)
	_, err = db.TxExec(ctx, tx, db.Q(`INSERT INTO audit (`+auditColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.Seq, r.At.UnixMicro(), r.Actor, r.Action, r.Object, r.Decision, r.Status, r.Reason, r.RequestID, r.Source, r.PrevHash, r.Hash)
	return r, err
}

func scanAudit(rows store.Scanner) (audit.Record, error) {
	var r audit.Record
	var at int64
	err := rows.Scan(&r.Seq, &at, &r.Actor, &r.Action, &r.Object, &r.Decision, &r.Status, &r.Reason, &r.RequestID, &r.Source, &r.PrevHash, &r.Hash)
	r.At = time.UnixMicro(at).UTC()
	return r, err
}

// AuditRecords implements audit.Store.
func (s *Store) AuditRecords(ctx context.Context, f audit.Filter) ([]audit.Record, error) {
	where, args, order := []string{"seq > ?"}, []any{f.After}, "seq"
	if f.Newest {
		where, args, order = []string{"seq > 0"}, nil, "seq DESC"
		if f.Before > 0 {
			where, args = []string{"seq < ?"}, []any{f.Before}
		}
	}
	if f.Actor != "" {
		// The person and their tokens ("issuer#subject (token ID)"):
		// compared by prefix without LIKE, whose wildcards a subject may hold.
		prefix := f.Actor + " (token "
		where, args = append(where, "(actor = ? OR substr(actor, 1, length(?)) = ?)"), append(args, f.Actor, prefix, prefix)
	}
	if f.Decision != "" {
		where, args = append(where, "decision = ?"), append(args, f.Decision)
	}
	args = append(args, f.Limit)
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+auditColumns+` FROM audit WHERE `+strings.Join(where, " AND ")+` ORDER BY `+order+` LIMIT ?`), args...)
	if err != nil {
		return nil, fmt.Errorf("list audit records: %w", err)
	}
	return store.Collect(rows, scanAudit)
}

// EachAudit implements audit.Store.
func (s *Store) EachAudit(ctx context.Context, fn func(audit.Record) error) error {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+auditColumns+` FROM audit ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("read audit log: %w", err)
	}
	return store.Each(rows, scanAudit, fn)
}

// LatestAudit implements audit.CheckpointStore.
func (s *Store) LatestAudit(ctx context.Context) (audit.Record, bool, error) {
	r, err := scanAudit(s.db.Read().QueryRowContext(ctx, `SELECT `+auditColumns+` FROM audit ORDER BY seq DESC LIMIT 1`))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return audit.Record{}, false, nil
	case err != nil:
		return audit.Record{}, false, fmt.Errorf("read the newest audit record: %w", err)
	}
	return r, true, nil
}

// AddCheckpoint implements audit.CheckpointStore.
func (s *Store) AddCheckpoint(ctx context.Context, c audit.Checkpoint) error {
	_, err := s.db.ExecContext(ctx, s.db.Q(`INSERT INTO audit_checkpoints (seq, hash, at, key_id, signature) VALUES (?, ?, ?, ?, ?)`),
		c.Seq, c.Hash, c.At.UnixMicro(), c.KeyID, c.Signature)
	switch {
	case err != nil && store.UniqueViolation(err):
		return &fault.Conflict{Kind: "audit checkpoint", Name: strconv.FormatInt(c.Seq, 10), Reason: "that record has a checkpoint already"}
	case err != nil:
		return fmt.Errorf("store audit checkpoint: %w", err)
	}
	return nil
}

// Checkpoints implements audit.CheckpointStore.
func (s *Store) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT seq, hash, at, key_id, signature FROM audit_checkpoints ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("list audit checkpoints: %w", err)
	}
	return store.Collect(rows, func(row store.Scanner) (audit.Checkpoint, error) {
		var c audit.Checkpoint
		var at int64
		err := row.Scan(&c.Seq, &c.Hash, &at, &c.KeyID, &c.Signature)
		c.At = time.UnixMicro(at).UTC()
		return c, err
	})
}
