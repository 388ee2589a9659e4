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
		_, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO sessions (id_hash, issuer, subject, email, name, groups, csrf, created_at, expires_at, second_factor) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			ses.IDHash, ses.Identity.Issuer, ses.Identity.Subject, ses.Identity.Email, ses.Identity.Name, string(groups), ses.CSRF,
			ses.CreatedAt.UnixMicro(), ses.ExpiresAt.UnixMicro(), store.BoolInt(ses.Identity.SecondFactor))
		if err != nil {
			return fmt.Errorf("insert session: %w", err)
		}
		return nil
	})
}

// Session implements weblogin.Store.
func (s *Store) Session(ctx context.Context, idHash string) (weblogin.Session, error) {
	var ses weblogin.Session
	var groups string
	var created, expires int64
	var secondFactor int
	err := s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT id_hash, issuer, subject, email, name, groups, csrf, created_at, expires_at, second_factor FROM sessions WHERE id_hash = ?`), idHash).
		Scan(&ses.IDHash, &ses.Identity.Issuer, &ses.Identity.Subject, &ses.Identity.Email, &ses.Identity.Name, &groups, &ses.CSRF, &created, &expires, &secondFactor)
	ses.Identity.SecondFactor = secondFactor != 0
	if errors.Is(err, sql.ErrNoRows) {
		return ses, &fault.NotFound{Kind: "session", Name: "cookie"}
	}
	if err != nil {
		return ses, fmt.Errorf("read session: %w", err)
	}
	if err := json.Unmarshal([]byte(groups), &ses.Identity.Groups); err != nil {
		return ses, fmt.Errorf("session: stored groups are corrupt: %w", err)
	}
	ses.CreatedAt, ses.ExpiresAt = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC()
	return ses, nil
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
