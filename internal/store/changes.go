package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gantryhq/gantry/internal/notify"
)

// The change feed's writing half: what a live connection must hear of is
// appended in the transaction that changes it, whichever aggregate's that is
// (workloads, users, tokens, sessions). Reading the feed is changefeed's.

// AppendChange records a change of kind (a live.Kind) to subject in tx: the
// counter's row is held until tx commits, so changes are numbered in commit
// order and a reader never skips one that commits late. Call it last in a
// transaction, to hold the row for as short a time as possible, and run the
// transaction with TxChanges.
func (s *DB) AppendChange(ctx context.Context, tx *sql.Tx, kind, subject string) error {
	var seq int64
	if err := s.TxQueryRow(ctx, tx, `UPDATE change_counter SET n = n + 1 WHERE id = 1 RETURNING n`).Scan(&seq); err != nil {
		return fmt.Errorf("number a change: %w", err)
	}
	if _, err := s.TxExec(ctx, tx, s.Q(`INSERT INTO changes (seq, at, kind, subject) VALUES (?, ?, ?, ?)`),
		seq, s.Now().UnixMicro(), kind, subject); err != nil {
		return fmt.Errorf("record a change: %w", err)
	}
	return nil
}

// TxChanges is Tx for a transaction that may append changes: after it
// commits, this process's follower is woken at once (other replicas read the
// feed on their next poll).
func (s *DB) TxChanges(ctx context.Context, fn func(*sql.Tx) error) error {
	if err := s.Tx(ctx, fn); err != nil {
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
func (s *DB) ChangeSignal() <-chan struct{} { return s.changed }

// InsertNotification queues a webhook in the outbox (package notify) as
// part of tx: with the change that caused it, or not at all.
func (s *DB) InsertNotification(ctx context.Context, tx *sql.Tx, m notify.Message) error {
	_, err := s.TxExec(ctx, tx, s.Q(`INSERT INTO notifications (id, event, body, created_at, next_at) VALUES (?, ?, ?, ?, ?)`),
		m.ID, m.Event, string(m.Body), m.Created.UnixMicro(), m.NextAt.UnixMicro())
	if err != nil {
		return fmt.Errorf("queue notification %s: %w", m.Event, err)
	}
	return nil
}
