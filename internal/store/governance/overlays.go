package governance

import (
	"context"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/store"
)

// PutOverlay implements overlay.Store: the edit replaces any of its kind and key.
func (s *Store) PutOverlay(ctx context.Context, e overlay.Edit) error {
	// One statement: concurrent edits of one key replace each other.
	if _, err := s.db.ExecContext(ctx, s.db.Q(`INSERT INTO overlays (kind, key, value, by_whom, at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value, by_whom = excluded.by_whom, at = excluded.at`),
		e.Kind, e.Key, string(e.Value), e.By, e.At.UnixMicro()); err != nil {
		return fmt.Errorf("record the %s edit of %s: %w", e.Kind, e.Key, err)
	}
	return nil
}

// DeleteOverlay implements overlay.Store.
func (s *Store) DeleteOverlay(ctx context.Context, kind, key string) (bool, error) {
	r, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM overlays WHERE kind = ? AND key = ?`), kind, key)
	if err != nil {
		return false, fmt.Errorf("remove the %s edit of %s: %w", kind, key, err)
	}
	n, _ := r.RowsAffected()
	return n > 0, nil
}

// Overlays implements overlay.Store: every edit, by kind and key.
func (s *Store) Overlays(ctx context.Context) ([]overlay.Edit, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT kind, key, value, by_whom, at FROM overlays ORDER BY kind, key`)
	if err != nil {
		return nil, fmt.Errorf("list the edits: %w", err)
	}
	return store.Collect(rows, func(r store.Scanner) (overlay.Edit, error) {
		var e overlay.Edit
		var value string
		var at int64
		err := r.Scan(&e.Kind, &e.Key, &value, &e.By, &at)
		e.Value, e.At = []byte(value), time.UnixMicro(at).UTC()
		return e, err
	})
}
