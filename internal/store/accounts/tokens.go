package accounts

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/token"
)

const tokenColumns = `id, issuer, subject, email, groups, name, secret_hash, team, read_only, created_at, expires_at, revoked_at, second_factor`

// CreateToken implements token.Store.
func (s *Store) CreateToken(ctx context.Context, t token.Token) error {
	groups, err := json.Marshal(t.Owner.Groups)
	if err != nil {
		return err
	}
	readOnly := 0
	if t.ReadOnly {
		readOnly = 1
	}
	_, err = s.db.ExecContext(ctx, s.db.Q(`INSERT INTO tokens (owner, `+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		t.Owner.String(), t.ID, t.Owner.Issuer, t.Owner.Subject, t.Owner.Email, string(groups), t.Name, t.SecretHash, t.Team, readOnly,
		t.CreatedAt.UnixMicro(), t.ExpiresAt.UnixMicro(), 0, store.BoolInt(t.Owner.SecondFactor))
	if err != nil {
		return fmt.Errorf("insert token: %w", err)
	}
	return nil
}

func scanToken(row store.Scanner) (token.Token, error) {
	var t token.Token
	var groups string
	var readOnly, secondFactor int
	var created, expires, revoked int64
	if err := row.Scan(&t.ID, &t.Owner.Issuer, &t.Owner.Subject, &t.Owner.Email, &groups, &t.Name, &t.SecretHash, &t.Team, &readOnly, &created, &expires, &revoked, &secondFactor); err != nil {
		return t, err
	}
	t.Owner.SecondFactor = secondFactor != 0
	if err := json.Unmarshal([]byte(groups), &t.Owner.Groups); err != nil {
		return t, fmt.Errorf("token %s: stored groups are corrupt: %w", t.ID, err)
	}
	t.ReadOnly = readOnly != 0
	t.CreatedAt, t.ExpiresAt = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC()
	if revoked != 0 {
		t.RevokedAt = time.UnixMicro(revoked).UTC()
	}
	return t, nil
}

// Token implements token.Store.
func (s *Store) Token(ctx context.Context, id string) (token.Token, error) {
	t, err := scanToken(s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+tokenColumns+` FROM tokens WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, &fault.NotFound{Kind: "token", Name: id}
	}
	return t, err
}

// Tokens implements token.Store.
func (s *Store) Tokens(ctx context.Context, owner string) ([]token.Token, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+tokenColumns+` FROM tokens WHERE owner = ? ORDER BY created_at, id`), owner)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return store.Collect(rows, scanToken)
}

// RevokeToken implements token.Store.
func (s *Store) RevokeToken(ctx context.Context, owner, id string, at time.Time) error {
	var n int64
	err := s.db.TxChanges(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Q(`UPDATE tokens SET revoked_at = ? WHERE owner = ? AND id = ? AND revoked_at = 0`), at.UnixMicro(), owner, id)
		if err != nil {
			return err
		}
		if n, _ = res.RowsAffected(); n == 0 {
			return nil
		}
		return s.db.AppendChange(ctx, tx, string(live.Token), id) // what it opened closes
	})
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	if n == 0 {
		// Unknown, someone else's, or already revoked: the same answer.
		if t, err := s.Token(ctx, id); err == nil && t.Owner.String() == owner {
			return nil
		}
		return &fault.NotFound{Kind: "token", Name: id}
	}
	return nil
}
