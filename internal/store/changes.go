package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/live"
)

// appendChange records a change in tx: the counter's row is held until tx
// commits, so changes are numbered in commit order and a reader never skips
// one that commits late. Call it last in a transaction, to hold the row for
// as short a time as possible.
func (s *Store) appendChange(ctx context.Context, tx *sql.Tx, kind live.Kind, subject string) error {
	var seq int64
	if err := tx.QueryRowContext(ctx, `UPDATE change_counter SET n = n + 1 WHERE id = 1 RETURNING n`).Scan(&seq); err != nil {
		return fmt.Errorf("number a change: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO changes (seq, at, kind, subject) VALUES (?, ?, ?, ?)`),
		seq, s.clock().UnixMicro(), string(kind), subject); err != nil {
		return fmt.Errorf("record a change: %w", err)
	}
	return nil
}

// txChanges is tx for a transaction that may append changes: after it
// commits, this process's follower is woken at once (other replicas read the
// feed on their next poll).
func (s *Store) txChanges(ctx context.Context, fn func(*sql.Tx) error) error {
	if err := s.tx(ctx, fn); err != nil {
		return err
	}
	select {
	case s.changed <- struct{}{}:
	default: // a wake-up is already pending
	}
	return nil
}

// ChangeSignal receives after a transaction of this process that may have
// appended to the change feed has committed.
func (s *Store) ChangeSignal() <-chan struct{} { return s.changed }

// Changes implements live.Feed: the changes after seq, oldest first, at
// most limit.
func (s *Store) Changes(ctx context.Context, after int64, limit int) ([]live.Change, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT seq, kind, subject FROM changes WHERE seq > ? ORDER BY seq LIMIT ?`), after, limit)
	if err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	return collect(rows, func(r scanner) (live.Change, error) {
		var c live.Change
		var kind string
		err := r.Scan(&c.Seq, &kind, &c.Subject)
		c.Kind = live.Kind(kind)
		return c, err
	})
}

// LastChange implements live.Feed: the newest change's number (0: none yet).
func (s *Store) LastChange(ctx context.Context) (int64, error) {
	var n int64
	if err := s.read.QueryRowContext(ctx, `SELECT n FROM change_counter WHERE id = 1`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read the change counter: %w", err)
	}
	return n, nil
}

// PruneChanges implements live.Feed: forgets changes recorded before t.
func (s *Store) PruneChanges(ctx context.Context, before time.Time) error {
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM changes WHERE at < ?`), before.UnixMicro()); err != nil {
		return fmt.Errorf("prune changes: %w", err)
	}
	return nil
}
