// Package changefeed reads Gantry's change feed: the changes (and their
// counter) that the aggregate stores append in the transactions that make
// them (store.DB.AppendChange), for every replica's live connections to be
// woken or closed by. It implements live.Feed; the wake-up of this process's
// follower is the database's (store.DB.ChangeSignal).
package changefeed

import (
	"context"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/store"
)

// Store is the change feed of one database.
type Store struct{ db *store.DB }

var _ live.Feed = (*Store)(nil)

// New is the change feed of db.
func New(db *store.DB) *Store { return &Store{db: db} }

// Changes implements live.Feed: the changes after seq, oldest first, at
// most limit.
func (s *Store) Changes(ctx context.Context, after int64, limit int) ([]live.Change, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT seq, kind, subject FROM changes WHERE seq > ? ORDER BY seq LIMIT ?`), after, limit)
	if err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	return store.Collect(rows, func(r store.Scanner) (live.Change, error) {
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
	if err := s.db.Read().QueryRowContext(ctx, `SELECT n FROM change_counter WHERE id = 1`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read the change counter: %w", err)
	}
	return n, nil
}

// PruneChanges implements live.Feed: forgets changes recorded before t.
func (s *Store) PruneChanges(ctx context.Context, before time.Time) error {
	if _, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM changes WHERE at < ?`), before.UnixMicro()); err != nil {
		return fmt.Errorf("prune changes: %w", err)
	}
	return nil
}
