package workloads

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/trial"
)

var _ trial.Store = (*Store)(nil)

const trialColumns = `id, team, owner, template, spec, runs, created_at, idempotency_key, request_hash`

// CreateTrial implements trial.Store.
func (s *Store) CreateTrial(ctx context.Context, t trial.Trial) error {
	spec, err := json.Marshal(t.Spec)
	if err != nil {
		return fmt.Errorf("trial %s: encode its spec: %w", t.ID, err)
	}
	rs, err := json.Marshal(t.Runs)
	if err != nil {
		return fmt.Errorf("trial %s: encode its runs: %w", t.ID, err)
	}
	if _, err := s.db.ExecContext(ctx, s.db.Q(`INSERT INTO trials (`+trialColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		t.ID, t.Team.String(), t.Owner, t.Spec.Template, string(spec), string(rs), t.CreatedAt.UnixMicro(), t.IdempotencyKey, t.RequestHash); err != nil {
		if t.IdempotencyKey != "" && store.UniqueViolation(err) {
			return &fault.Conflict{Kind: "trial", Name: t.IdempotencyKey, Reason: "Idempotency-Key already used"}
		}
		return fmt.Errorf("insert trial %s: %w", t.ID, err)
	}
	return nil
}

// TrialByKey implements trial.Store.
func (s *Store) TrialByKey(ctx context.Context, owner, key string) (trial.Trial, error) {
	t, err := scanTrial(s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+trialColumns+` FROM trials WHERE owner = ? AND idempotency_key = ?`), owner, key))
	if errors.Is(err, sql.ErrNoRows) {
		return t, &fault.NotFound{Kind: "trial", Name: key}
	}
	if err != nil {
		return t, fmt.Errorf("get the trial of key %s: %w", key, err)
	}
	return t, nil
}

// Trial implements trial.Store.
func (s *Store) Trial(ctx context.Context, id string) (trial.Trial, error) {
	t, err := scanTrial(s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+trialColumns+` FROM trials WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, &fault.NotFound{Kind: "trial", Name: id}
	}
	if err != nil {
		return t, fmt.Errorf("get trial %s: %w", id, err)
	}
	return t, nil
}

// UpdateTrialRuns implements trial.Store.
func (s *Store) UpdateTrialRuns(ctx context.Context, id string, runs []trial.Run) error {
	b, err := json.Marshal(runs)
	if err != nil {
		return fmt.Errorf("trial %s: encode its runs: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE trials SET runs = ? WHERE id = ?`), string(b), id)
	if err != nil {
		return fmt.Errorf("update trial %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update trial %s: %w", id, err)
	}
	if n == 0 {
		return &fault.NotFound{Kind: "trial", Name: id}
	}
	return nil
}

// ListTrials implements trial.Store.
func (s *Store) ListTrials(ctx context.Context, teams []team.Name, limit int) ([]trial.Trial, error) {
	if teams != nil && len(teams) == 0 {
		return nil, nil
	}
	q := `SELECT ` + trialColumns + ` FROM trials`
	var args []any
	if teams != nil {
		q += ` WHERE team IN (?` + strings.Repeat(", ?", len(teams)-1) + `)`
		for _, t := range teams {
			args = append(args, t.String())
		}
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("list trials: %w", err)
	}
	defer rows.Close()
	var out []trial.Trial
	for rows.Next() {
		t, err := scanTrial(rows)
		if err != nil {
			return nil, fmt.Errorf("list trials: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func scanTrial(row store.Scanner) (trial.Trial, error) {
	var t trial.Trial
	var tm, spec, rs string
	var created int64
	var template string // the spec's own, kept in a column for a reader of the table
	if err := row.Scan(&t.ID, &tm, &t.Owner, &template, &spec, &rs, &created, &t.IdempotencyKey, &t.RequestHash); err != nil {
		return t, err
	}
	t.Team, t.CreatedAt = team.Name(tm), time.UnixMicro(created).UTC()
	if err := json.Unmarshal([]byte(spec), &t.Spec); err != nil {
		return t, fmt.Errorf("trial %s: stored spec is corrupt: %w", t.ID, err)
	}
	if err := json.Unmarshal([]byte(rs), &t.Runs); err != nil {
		return t, fmt.Errorf("trial %s: stored runs are corrupt: %w", t.ID, err)
	}
	return t, nil
}
