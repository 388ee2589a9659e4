package accounts

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/live"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/user"
	"github.com/gantryhq/gantry/internal/weblogin"
)

// CreateLogin implements weblogin.Store; expired logins are removed on the way.
func (s *Store) CreateLogin(ctx context.Context, l weblogin.Login) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`DELETE FROM logins WHERE expires_at < ?`), s.db.Now().UnixMicro()); err != nil {
			return fmt.Errorf("remove expired logins: %w", err)
		}
		_, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO logins (state_hash, nonce, verifier, return_to, expires_at) VALUES (?, ?, ?, ?, ?)`),
			l.StateHash, l.Nonce, l.Verifier, l.ReturnTo, l.ExpiresAt.UnixMicro())
		if err != nil {
			return fmt.Errorf("insert login: %w", err)
		}
		return nil
	})
}

// TakeLogin implements weblogin.Store: it returns and deletes the login, so
// that two callbacks with one state cannot both get it.
func (s *Store) TakeLogin(ctx context.Context, stateHash string) (weblogin.Login, error) {
	var l weblogin.Login
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var expires int64
		err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT state_hash, nonce, verifier, return_to, expires_at FROM logins WHERE state_hash = ?`), stateHash).
			Scan(&l.StateHash, &l.Nonce, &l.Verifier, &l.ReturnTo, &expires)
		if errors.Is(err, sql.ErrNoRows) {
			return &fault.NotFound{Kind: "login", Name: "state"}
		}
		if err != nil {
			return err
		}
		res, err := s.db.TxExec(ctx, tx, s.db.Q(`DELETE FROM logins WHERE state_hash = ?`), stateHash)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return &fault.NotFound{Kind: "login", Name: "state"}
		}
		l.ExpiresAt = time.UnixMicro(expires).UTC()
		return nil
	})
	return l, err
}

// CreateSession implements weblogin.Store; expired sessions are removed on the way.
func (s *Store) CreateSession(ctx context.Context, ses weblogin.Session) error {
	groups, err := json.Marshal(ses.Identity.Groups)
	if err != nil {
		return err
	}
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`DELETE FROM sessions WHERE expires_at < ?`), s.db.Now().UnixMicro()); err != nil {
			return fmt.Errorf("remove expired sessions: %w", err)
		}
		_, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO sessions (`+sessionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			ses.IDHash, ses.Identity.Issuer, ses.Identity.Subject, ses.Identity.Email, ses.Identity.Name, string(groups), ses.CSRF,
			ses.CreatedAt.UnixMicro(), ses.ExpiresAt.UnixMicro(), store.BoolInt(ses.Identity.SecondFactor))
		if err != nil {
			return fmt.Errorf("insert session: %w", err)
		}
		return nil
	})
}

// sessionColumns are a session's columns, in sessionRow.dest's order.
const sessionColumns = `id_hash, issuer, subject, email, name, groups, csrf, created_at, expires_at, second_factor`

// sessionAndUserQuery reads a session, its user's record (zeros when there
// is none) and whether there is one, joined on the user's key
// (identity.Identity.String of the session's issuer and subject); built
// once, not on every browser request.
var sessionAndUserQuery = `SELECT ` + qualified("s", sessionColumns) + `, ` + userColumnsOrZero("u") + `, CASE WHEN u.id IS NULL THEN 0 ELSE 1 END
		FROM sessions s LEFT JOIN users u ON u.user_key = CASE WHEN s.issuer = '' THEN s.subject ELSE s.issuer || '#' || s.subject END
		WHERE s.id_hash = ?`

type sessionRow struct {
	ses              weblogin.Session
	groups           string
	created, expires int64
	secondFactor     int
}

func (r *sessionRow) dest() []any {
	return []any{&r.ses.IDHash, &r.ses.Identity.Issuer, &r.ses.Identity.Subject, &r.ses.Identity.Email, &r.ses.Identity.Name, &r.groups, &r.ses.CSRF, &r.created, &r.expires, &r.secondFactor}
}

func (r *sessionRow) session() (weblogin.Session, error) {
	ses := r.ses
	ses.Identity.SecondFactor = r.secondFactor != 0
	if err := json.Unmarshal([]byte(r.groups), &ses.Identity.Groups); err != nil {
		return ses, fmt.Errorf("session: stored groups are corrupt: %w", err)
	}
	ses.CreatedAt, ses.ExpiresAt = time.UnixMicro(r.created).UTC(), time.UnixMicro(r.expires).UTC()
	return ses, nil
}

// SessionAndUser implements weblogin.Store: a session and its user's
// record in one statement, kept per replica for a few seconds once
// CacheCredentials is on (see kept).
func (s *Store) SessionAndUser(ctx context.Context, idHash string) (weblogin.Session, *user.User, error) {
	v, err := s.sessions.read(idHash, s.db.Now, func() (session, string, error) {
		ses, u, err := s.sessionAndUser(ctx, idHash)
		return session{ses: ses, user: u}, ses.Identity.String(), err
	})
	return v.ses, v.user, err
}

// sessionAndUser is SessionAndUser's read.
func (s *Store) sessionAndUser(ctx context.Context, idHash string) (weblogin.Session, *user.User, error) {
	var sr sessionRow
	var ur userRow
	var hasUser int
	err := s.db.Read().QueryRowContext(ctx, s.db.Q(sessionAndUserQuery), idHash).Scan(append(append(sr.dest(), ur.dest()...), &hasUser)...)
	if errors.Is(err, sql.ErrNoRows) {
		return weblogin.Session{}, nil, &fault.NotFound{Kind: "session", Name: "cookie"}
	}
	if err != nil {
		return weblogin.Session{}, nil, fmt.Errorf("read session: %w", err)
	}
	ses, err := sr.session()
	if err != nil {
		return ses, nil, err
	}
	u, err := ur.joined(hasUser)
	return ses, u, err
}

// DeleteSession implements weblogin.Store; deleting a missing session is not an error.
func (s *Store) DeleteSession(ctx context.Context, idHash string) error {
	var issuer, subject string
	err := s.db.TxChanges(ctx, func(tx *sql.Tx) error {
		err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT issuer, subject FROM sessions WHERE id_hash = ?`), idHash).Scan(&issuer, &subject)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`DELETE FROM sessions WHERE id_hash = ?`), idHash); err != nil {
			return err
		}
		// What the session opened is checked again (and closes).
		return s.db.AppendChange(ctx, tx, string(live.User), identity.Identity{Issuer: issuer, Subject: subject}.String())
	})
	if subject != "" {
		s.Forget(live.Change{Kind: live.User, Subject: identity.Identity{Issuer: issuer, Subject: subject}.String()})
	}
	if err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}
