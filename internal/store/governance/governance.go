// Package governance stores what the platform team governs Gantry by: the
// template catalog's versions (templates.go), budget alerts and the webhook
// outbox they are queued in (one transaction), the GPU classes' price
// history, teams' own settings, and the platform team's edits over the
// files (overlays.go). It implements catalog.Store, budget.Store's budget
// half (the audit log is auditlog's), notify.Outbox, cull.Notifier,
// overrides.Store and overlay.Store.
package governance

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/cull"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/overlay"
	"github.com/gantryhq/gantry/internal/overrides"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/auditlog"
	"github.com/gantryhq/gantry/internal/team"
)

// Store is the governance of one database.
type Store struct{ db *store.DB }

var (
	_ catalog.Store   = (*Store)(nil)
	_ notify.Outbox   = (*Store)(nil)
	_ cull.Settings   = (*Store)(nil)
	_ overrides.Store = (*Store)(nil)
	_ overlay.Store   = (*Store)(nil)
)

// New is the governance of db.
func New(db *store.DB) *Store { return &Store{db: db} }

// RecordBudgetAlert implements budget.Store: the alert is recorded, its
// webhook put in the outbox and rec appended to the audit log, in one
// transaction — only if no alert for the same team, cost center, period
// and threshold was recorded before (recorded false then, and nothing
// written).
func (s *Store) RecordBudgetAlert(ctx context.Context, a budget.Alert, m notify.Message, rec audit.Record) (recorded bool, err error) {
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO budget_alerts (team, cost_center, period_start, threshold_pct, at, spent, amount)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`),
			a.Team, a.CostCenter, a.From.UnixMicro(), int(math.Round(a.Threshold*100)), a.At.UnixMicro(), a.Spent, a.Amount)
		if err != nil {
			return fmt.Errorf("record budget alert: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		if err := s.db.InsertNotification(ctx, tx, m); err != nil {
			return err
		}
		if _, err := auditlog.AppendIn(ctx, s.db, tx, rec); err != nil {
			return fmt.Errorf("audit budget alert: %w", err)
		}
		recorded = true
		return nil
	})
	if err != nil {
		recorded = false
	}
	return recorded, err
}

// BudgetAlerts implements budget.Store: the alerts recorded for a team's
// period, oldest first.
func (s *Store) BudgetAlerts(ctx context.Context, t team.Name, from time.Time) ([]budget.Alert, error) {
	team := t.String()
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT team, cost_center, period_start, threshold_pct, at, spent, amount FROM budget_alerts
		WHERE team = ? AND period_start = ? ORDER BY at, cost_center, threshold_pct`), team, from.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("list budget alerts: %w", err)
	}
	return store.Collect(rows, func(r store.Scanner) (budget.Alert, error) {
		var a budget.Alert
		var start, at int64
		var pct int
		if err := r.Scan(&a.Team, &a.CostCenter, &start, &pct, &at, &a.Spent, &a.Amount); err != nil {
			return a, err
		}
		a.From, a.At, a.Threshold = time.UnixMicro(start).UTC(), time.UnixMicro(at).UTC(), float64(pct)/100
		return a, nil
	})
}

// Notify implements workload.Notifier: a message into the outbox.
func (s *Store) Notify(ctx context.Context, m notify.Message) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error { return s.db.InsertNotification(ctx, tx, m) })
}

// DueNotifications implements notify.Outbox: undelivered messages due at
// now, oldest first.
func (s *Store) DueNotifications(ctx context.Context, now time.Time, limit int) ([]notify.Message, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT id, event, body, created_at, attempts, next_at FROM notifications
		WHERE delivered_at = 0 AND gave_up_at = 0 AND next_at <= ? ORDER BY next_at, id LIMIT ?`), now.UnixMicro(), limit)
	if err != nil {
		return nil, fmt.Errorf("list due notifications: %w", err)
	}
	return store.Collect(rows, func(r store.Scanner) (notify.Message, error) {
		var m notify.Message
		var body string
		var created, next int64
		if err := r.Scan(&m.ID, &m.Event, &body, &created, &m.Attempts, &next); err != nil {
			return m, err
		}
		m.Body, m.Created, m.NextAt = []byte(body), time.UnixMicro(created).UTC(), time.UnixMicro(next).UTC()
		return m, nil
	})
}

// NotificationSent implements notify.Outbox.
func (s *Store) NotificationSent(ctx context.Context, id string, attempts int, delivered bool, next time.Time, why string, now time.Time) error {
	var err error
	switch {
	case delivered:
		_, err = s.db.ExecContext(ctx, s.db.Q(`UPDATE notifications SET attempts = ?, delivered_at = ?, last_error = '' WHERE id = ?`), attempts, now.UnixMicro(), id)
	case next.IsZero():
		_, err = s.db.ExecContext(ctx, s.db.Q(`UPDATE notifications SET attempts = ?, gave_up_at = ?, last_error = ? WHERE id = ?`), attempts, now.UnixMicro(), why, id)
	default:
		_, err = s.db.ExecContext(ctx, s.db.Q(`UPDATE notifications SET attempts = ?, next_at = ?, last_error = ? WHERE id = ?`), attempts, next.UnixMicro(), why, id)
	}
	if err != nil {
		return fmt.Errorf("record notification %s: %w", id, err)
	}
	return nil
}

// RecordPrices adds a row to each class's price history whose price differs
// from its newest row (or that has none), as of at; it returns how many.
func (s *Store) RecordPrices(ctx context.Context, classes []gpu.Class, at time.Time) (int, error) {
	n := 0
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		for _, c := range classes {
			cur := c.Price.Currency
			if cur == "" {
				cur = "USD"
			}
			var od, spot float64
			var currency string
			err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT on_demand, spot, currency FROM gpu_prices WHERE class = ? ORDER BY since DESC LIMIT 1`), c.Name).Scan(&od, &spot, &currency)
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return fmt.Errorf("price history of %s: %w", c.Name, err)
			case od == c.Price.OnDemand && spot == c.Price.Spot && currency == cur:
				continue
			}
			if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO gpu_prices (class, since, on_demand, spot, currency) VALUES (?, ?, ?, ?, ?)`),
				c.Name, at.UnixMicro(), c.Price.OnDemand, c.Price.Spot, cur); err != nil {
				return fmt.Errorf("price history of %s: %w", c.Name, err)
			}
			n++
		}
		return nil
	})
	return n, err
}

// PriceHistory is a class's prices, oldest first.
func (s *Store) PriceHistory(ctx context.Context, class string) ([]gpu.PriceRecord, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT class, since, on_demand, spot, currency FROM gpu_prices WHERE class = ? ORDER BY since`), class)
	if err != nil {
		return nil, fmt.Errorf("price history of %s: %w", class, err)
	}
	return store.Collect(rows, func(r store.Scanner) (gpu.PriceRecord, error) {
		var p gpu.PriceRecord
		var since int64
		err := r.Scan(&p.Class, &since, &p.Price.OnDemand, &p.Price.Spot, &p.Price.Currency)
		p.Since = time.UnixMicro(since).UTC()
		return p, err
	})
}

// TeamSettings implements overrides.Store: a team's settings (none: empty,
// version 0).
func (s *Store) TeamSettings(ctx context.Context, t team.Name) (overrides.Settings, error) {
	team := t.String()
	var data, by string
	var at, version int64
	err := s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT data, updated_by, updated_at, version FROM team_settings WHERE team = ?`), team).Scan(&data, &by, &at, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return overrides.Settings{Templates: map[string]overrides.Template{}}, nil
	}
	if err != nil {
		return overrides.Settings{}, fmt.Errorf("settings of team %s: %w", team, err)
	}
	var set overrides.Settings
	if err := json.Unmarshal([]byte(data), &set); err != nil {
		return overrides.Settings{}, fmt.Errorf("settings of team %s are corrupt: %w", team, err)
	}
	if set.Templates == nil {
		set.Templates = map[string]overrides.Template{}
	}
	set.UpdatedBy, set.UpdatedAt, set.Version = by, time.UnixMicro(at).UTC(), version
	return set, nil
}

// PutTeamSettings implements overrides.Store: the team's settings replaced
// in one statement, which also checks the version when one is given.
func (s *Store) PutTeamSettings(ctx context.Context, t team.Name, set overrides.Settings, ifVersion *int64) (int64, error) {
	team := t.String()
	data, err := json.Marshal(set)
	if err != nil {
		return 0, err
	}
	var version int64
	switch {
	case ifVersion == nil:
		err = s.db.QueryRowContext(ctx, s.db.Q(`INSERT INTO team_settings (team, data, updated_by, updated_at, version) VALUES (?, ?, ?, ?, 1)
			ON CONFLICT (team) DO UPDATE SET data = excluded.data, updated_by = excluded.updated_by, updated_at = excluded.updated_at,
				version = team_settings.version + 1
			RETURNING version`),
			team, string(data), set.UpdatedBy, set.UpdatedAt.UnixMicro()).Scan(&version)
	case *ifVersion == 0:
		// None yet: created, or refused if someone created them meanwhile.
		err = s.db.QueryRowContext(ctx, s.db.Q(`INSERT INTO team_settings (team, data, updated_by, updated_at, version) VALUES (?, ?, ?, ?, 1)
			ON CONFLICT (team) DO NOTHING RETURNING version`),
			team, string(data), set.UpdatedBy, set.UpdatedAt.UnixMicro()).Scan(&version)
	default:
		err = s.db.QueryRowContext(ctx, s.db.Q(`UPDATE team_settings SET data = ?, updated_by = ?, updated_at = ?, version = version + 1
			WHERE team = ? AND version = ? RETURNING version`),
			string(data), set.UpdatedBy, set.UpdatedAt.UnixMicro(), team, *ifVersion).Scan(&version)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, &fault.Stale{Kind: "settings of team", Name: team}
	}
	if err != nil {
		return 0, fmt.Errorf("settings of team %s: %w", team, err)
	}
	return version, nil
}

// Teams implements budget.Store: the teams with any workload, sorted.
func (s *Store) Teams(ctx context.Context) ([]string, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT DISTINCT team FROM workloads ORDER BY team`)
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return store.Collect(rows, func(r store.Scanner) (string, error) {
		var t string
		return t, r.Scan(&t)
	})
}

// PruneNotifications implements notify.Outbox.
func (s *Store) PruneNotifications(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM notifications WHERE (delivered_at > 0 AND delivered_at < ?) OR (gave_up_at > 0 AND gave_up_at < ?)`),
		before.UnixMicro(), before.UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("prune notifications: %w", err)
	}
	return res.RowsAffected()
}
