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
	"github.com/gantryhq/gantry/internal/token"
	"github.com/gantryhq/gantry/internal/user"
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
	owner, at := t.Owner.String(), t.CreatedAt.UnixMicro()
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		var live int
		if err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT COUNT(*) FROM tokens WHERE owner = ? AND revoked_at = 0 AND expires_at > ?`), owner, at).Scan(&live); err != nil {
			return fmt.Errorf("count the owner's live tokens: %w", err)
		}
		if live >= token.MaxLive {
			return token.ErrTooMany
		}
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO tokens (owner, `+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			owner, t.ID, t.Owner.Issuer, t.Owner.Subject, t.Owner.Email, string(groups), t.Name, t.SecretHash, t.Team, readOnly,
			at, t.ExpiresAt.UnixMicro(), 0, store.BoolInt(t.Owner.SecondFactor)); err != nil {
			return fmt.Errorf("insert token: %w", err)
		}
		// The owner's revoked and expired tokens past the newest
		// keptDeadTokens go on the way: the audit log keeps their story,
		// and a loop of creates and revokes cannot grow the table.
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`DELETE FROM tokens WHERE owner = ? AND (revoked_at > 0 OR expires_at <= ?) AND id NOT IN (
			SELECT id FROM tokens WHERE owner = ? AND (revoked_at > 0 OR expires_at <= ?) ORDER BY created_at DESC, id DESC LIMIT ?)`),
			owner, at, owner, at, KeptDeadTokens); err != nil {
			return fmt.Errorf("remove the owner's old dead tokens: %w", err)
		}
		return nil
	})
}

// KeptDeadTokens is how many of one owner's revoked or expired tokens stay
// listed (the newest).
const KeptDeadTokens = 100

// tokenRow is a tokens row as scanned, before decoding.
type tokenRow struct {
	t                         token.Token
	groups                    string
	readOnly, secondFactor    int
	created, expires, revoked int64
}

// dest is where Scan puts tokenColumns.
func (r *tokenRow) dest() []any {
	return []any{&r.t.ID, &r.t.Owner.Issuer, &r.t.Owner.Subject, &r.t.Owner.Email, &r.groups, &r.t.Name, &r.t.SecretHash, &r.t.Team,
		&r.readOnly, &r.created, &r.expires, &r.revoked, &r.secondFactor}
}

// token decodes the scanned row.
func (r *tokenRow) token() (token.Token, error) {
	t := r.t
	t.Owner.SecondFactor = r.secondFactor != 0
	if err := json.Unmarshal([]byte(r.groups), &t.Owner.Groups); err != nil {
		return t, fmt.Errorf("token %s: stored groups are corrupt: %w", t.ID, err)
	}
	t.ReadOnly = r.readOnly != 0
	t.CreatedAt, t.ExpiresAt = time.UnixMicro(r.created).UTC(), time.UnixMicro(r.expires).UTC()
	if r.revoked != 0 {
		t.RevokedAt = time.UnixMicro(r.revoked).UTC()
	}
	return t, nil
}

// scanToken scans and decodes one tokens row (tokenColumns).
func scanToken(row store.Scanner) (token.Token, error) {
	var r tokenRow
	if err := row.Scan(r.dest()...); err != nil {
		return r.t, err
	}
	return r.token()
}

// qualified prefixes each of a comma-separated column list with alias.
func qualified(alias, columns string) string {
	cols := strings.Split(columns, ", ")
	for i, c := range cols {
		cols[i] = alias + "." + c
	}
	return strings.Join(cols, ", ")
}

// Token implements token.Store.
func (s *Store) Token(ctx context.Context, id string) (token.Token, error) {
	t, err := scanToken(s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+tokenColumns+` FROM tokens WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, &fault.NotFound{Kind: "token", Name: id}
	}
	return t, err
}

// tokenAndOwnerQuery reads a token (tokenColumns), its owner's user record
// (userColumns, zeros when there is none) and whether there is one; built
// once, not on every authenticated request.
var tokenAndOwnerQuery = `SELECT ` + qualified("t", tokenColumns) + `, ` + userColumnsOrZero("u") + `, CASE WHEN u.id IS NULL THEN 0 ELSE 1 END
		FROM tokens t LEFT JOIN users u ON u.user_key = t.owner
		WHERE t.id = ?`

// TokenAndOwner implements token.Store: the token and its owner's user
// record in one statement, joined on the owner's key (the tokens row's
// owner, written by CreateToken as identity.Identity.String, is what a users
// row's user_key holds).
func (s *Store) TokenAndOwner(ctx context.Context, id string) (token.Token, *user.User, error) {
	c, err := s.creds.read(id, s.db.Now, func() (credential, string, error) {
		t, owner, err := s.tokenAndOwner(ctx, id)
		return credential{t: t, owner: owner}, t.Owner.String(), err
	})
	return c.t, c.owner, err
}

// tokenAndOwner is TokenAndOwner's read.
func (s *Store) tokenAndOwner(ctx context.Context, id string) (token.Token, *user.User, error) {
	var tr tokenRow
	var ur userRow
	var hasUser int
	err := s.db.Read().QueryRowContext(ctx, s.db.Q(tokenAndOwnerQuery), id).Scan(append(append(tr.dest(), ur.dest()...), &hasUser)...)
	if errors.Is(err, sql.ErrNoRows) {
		return token.Token{}, nil, &fault.NotFound{Kind: "token", Name: id}
	}
	if err != nil {
		return token.Token{}, nil, fmt.Errorf("get token %s: %w", id, err)
	}
	t, err := tr.token()
	if err != nil {
		return t, nil, err
	}
	u, err := ur.joined(hasUser)
	return t, u, err
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
		res, err := s.db.TxExec(ctx, tx, s.db.Q(`UPDATE tokens SET revoked_at = ? WHERE owner = ? AND id = ? AND revoked_at = 0`), at.UnixMicro(), owner, id)
		if err != nil {
			return err
		}
		if n, _ = res.RowsAffected(); n == 0 {
			return nil
		}
		return s.db.AppendChange(ctx, tx, string(live.Token), id) // what it opened closes
	})
	s.Forget(live.Change{Kind: live.Token, Subject: id}) // whether or not it committed: an error may come after
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
