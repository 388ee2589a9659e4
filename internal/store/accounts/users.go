package accounts

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/user"
)

const userColumns = `id, user_key, issuer, subject, email, name, groups, groups_at, deactivated_at, created_at, last_seen_at`

// UpsertUser implements user.Store: concurrent first sign-ins of one user
// leave one row (store.Upsert: the row's id and its user_key are both
// unique); deactivated_at and created_at are never overwritten, nor is a
// record whose groups the provider asserted later than u's (GroupsAt).
func (s *Store) UpsertUser(ctx context.Context, u user.User) error {
	groups, err := json.Marshal(u.Groups)
	if err != nil {
		return err
	}
	err = store.Upsert(func() error {
		return s.db.TxChanges(ctx, func(tx *sql.Tx) error {
			var old string
			err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT groups FROM users WHERE id = ?`), u.ID).Scan(&old)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			res, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO users (`+userColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)
		ON CONFLICT (id) DO UPDATE SET email = excluded.email, name = excluded.name, groups = excluded.groups,
			groups_at = excluded.groups_at, last_seen_at = excluded.last_seen_at
		WHERE users.groups_at <= excluded.groups_at`),
				u.ID, u.Key, u.Issuer, u.Subject, u.Email, u.Name, string(groups), u.GroupsAt.UnixMicro(), u.CreatedAt.UnixMicro(), u.LastSeenAt.UnixMicro())
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err // the record holds a newer assertion than this one: it stays
			}
			if old != string(groups) {
				// Groups lost or gained: what the user holds open is checked again.
				return s.db.AppendChange(ctx, tx, string(live.User), u.Key)
			}
			return nil
		})
	})
	// Kept credentials hold the user's record as it was (its groups' age
	// too): a sign-in here refreshes them here at once.
	s.Forget(live.Change{Kind: live.User, Subject: u.Key})
	if err != nil {
		return fmt.Errorf("upsert user %s: %w", u.Key, err)
	}
	return nil
}

// userRow is a users row as scanned, before decoding.
type userRow struct {
	u                                    user.User
	groups                               string
	groupsAt, deactivated, created, seen int64
}

// dest is where Scan puts userColumns.
func (r *userRow) dest() []any {
	return []any{&r.u.ID, &r.u.Key, &r.u.Issuer, &r.u.Subject, &r.u.Email, &r.u.Name, &r.groups, &r.groupsAt, &r.deactivated, &r.created, &r.seen}
}

// user decodes the scanned row.
// joined is the user a LEFT JOIN read into r, nil when has says there was
// none.
func (r *userRow) joined(has int) (*user.User, error) {
	if has == 0 {
		return nil, nil
	}
	u, err := r.user()
	if err != nil {
		return nil, err
	}
	return &u, nil
}

func (r *userRow) user() (user.User, error) {
	u := r.u
	if err := json.Unmarshal([]byte(r.groups), &u.Groups); err != nil {
		return u, fmt.Errorf("user %s: stored groups are corrupt: %w", u.Key, err)
	}
	u.GroupsAt, u.CreatedAt, u.LastSeenAt = time.UnixMicro(r.groupsAt).UTC(), time.UnixMicro(r.created).UTC(), time.UnixMicro(r.seen).UTC()
	if r.deactivated != 0 {
		u.DeactivatedAt = time.UnixMicro(r.deactivated).UTC()
	}
	return u, nil
}

// scanUser scans and decodes one users row (userColumns).
func scanUser(row store.Scanner) (user.User, error) {
	var r userRow
	if err := row.Scan(r.dest()...); err != nil {
		return r.u, err
	}
	return r.user()
}

// userColumnsOrZero is userColumns from a LEFT JOIN's alias, each column's
// zero value where no user matched (their types are not nullable in Go).
// Every column names its zero: a column added to userColumns without one
// panics when the package loads, in every test that imports it.
func userColumnsOrZero(alias string) string {
	zero := map[string]string{"id": "''", "user_key": "''", "issuer": "''", "subject": "''", "email": "''", "name": "''",
		"groups": "'[]'", "groups_at": "0", "deactivated_at": "0", "created_at": "0", "last_seen_at": "0"}
	cols := strings.Split(userColumns, ", ")
	for i, c := range cols {
		z, ok := zero[c]
		if !ok {
			panic("accounts: users column " + c + " has no zero value in userColumnsOrZero")
		}
		cols[i] = "COALESCE(" + alias + "." + c + ", " + z + ")"
	}
	return strings.Join(cols, ", ")
}

// User implements user.Store.
func (s *Store) User(ctx context.Context, id string) (user.User, error) {
	u, err := scanUser(s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+userColumns+` FROM users WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return u, &fault.NotFound{Kind: "user", Name: id}
	}
	if err != nil {
		return u, fmt.Errorf("get user %s: %w", id, err)
	}
	return u, nil
}

// Users implements user.Store.
func (s *Store) Users(ctx context.Context) ([]user.User, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+userColumns+` FROM users ORDER BY user_key`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return store.Collect(rows, scanUser)
}

// UsersByKey implements user.Store.
func (s *Store) UsersByKey(ctx context.Context, keys []string) ([]user.User, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+userColumns+` FROM users WHERE user_key IN (`+strings.TrimSuffix(strings.Repeat("?, ", len(keys)), ", ")+`)`), args...)
	if err != nil {
		return nil, fmt.Errorf("users by key: %w", err)
	}
	return store.Collect(rows, scanUser)
}

// SetUserDeactivated implements user.Store.
func (s *Store) SetUserDeactivated(ctx context.Context, id string, at time.Time) error {
	var micros int64
	if !at.IsZero() {
		micros = at.UnixMicro()
	}
	var n int64
	var key string
	err := s.db.TxChanges(ctx, func(tx *sql.Tx) error {
		err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT user_key FROM users WHERE id = ?`), id).Scan(&key)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res, err := s.db.TxExec(ctx, tx, s.db.Q(`UPDATE users SET deactivated_at = ? WHERE id = ?`), micros, id)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return s.db.AppendChange(ctx, tx, string(live.User), key)
	})
	if key != "" {
		s.Forget(live.Change{Kind: live.User, Subject: key})
	}
	if err != nil {
		return fmt.Errorf("deactivate user %s: %w", id, err)
	}
	if n == 0 {
		return &fault.NotFound{Kind: "user", Name: id}
	}
	return nil
}
