// Package runsdb is the store of training runs' progress reports (package
// runs): the reports as posted and each workload's summary of them.
package runsdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/store"
)

// Store implements runs.Store.
type Store struct{ db *store.DB }

// New returns the store on db.
func New(db *store.DB) *Store { return &Store{db: db} }

var _ runs.Store = (*Store)(nil)

const progressCols = `reports, step, total_steps, epoch, metrics, first_at, reported_at, run_from, run_from_step, resumed_from, restarts, rate, watch, verdict, kept_by, kept_at`

// AppendReports implements runs.Store: the summary row is locked (made
// first when there is none), the reports numbered after it, inserted, and
// the summary written, in one transaction.
func (s *Store) AppendReports(ctx context.Context, workload string, rs []runs.Report, update func(runs.Summary) runs.Summary) (runs.Summary, error) {
	var out runs.Summary
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO run_progress (workload, `+progressCols+`)
			VALUES (?, 0, 0, 0, NULL, '{}', 0, 0, 0, 0, -1, 0, 0, '{}', '', '', 0) ON CONFLICT (workload) DO NOTHING`), workload); err != nil {
			return fmt.Errorf("run progress of %s: %w", workload, err)
		}
		lock := ""
		if s.db.Driver() == store.Postgres {
			lock = " FOR UPDATE" // SQLite's write transactions are already serial
		}
		old, err := scanSummary(tx.QueryRowContext(ctx, s.db.Q(`SELECT `+progressCols+` FROM run_progress WHERE workload = ?`+lock), workload))
		if err != nil {
			return fmt.Errorf("run progress of %s: %w", workload, err)
		}
		old.Workload = workload
		if err := s.insert(ctx, tx, workload, old.Reports, rs); err != nil {
			return err
		}
		out = update(old)
		metrics, err := json.Marshal(out.Metrics)
		if err != nil {
			return err
		}
		watch, err := json.Marshal(out.Watch)
		if err != nil {
			return err
		}
		verdict := ""
		if out.Verdict != nil {
			b, err := json.Marshal(out.Verdict)
			if err != nil {
				return err
			}
			verdict = string(b)
		}
		var kept int64
		if !out.KeptAt.IsZero() {
			kept = out.KeptAt.UnixMilli()
		}
		_, err = tx.ExecContext(ctx, s.db.Q(`UPDATE run_progress SET reports = ?, step = ?, total_steps = ?, epoch = ?, metrics = ?, first_at = ?,
			reported_at = ?, run_from = ?, run_from_step = ?, resumed_from = ?, restarts = ?, rate = ?, watch = ?, verdict = ?, kept_by = ?, kept_at = ?
			WHERE workload = ?`),
			out.Reports, out.Step, out.TotalSteps, nullable(out.Epoch), string(metrics), out.FirstAt.UnixMilli(), out.ReportedAt.UnixMilli(),
			out.RunFrom.UnixMilli(), out.RunFromStep, out.ResumedFrom, out.Restarts, out.Rate, string(watch), verdict, out.KeptBy, kept, workload)
		if err != nil {
			return fmt.Errorf("run progress of %s: %w", workload, err)
		}
		return nil
	})
	return out, err
}

// insert adds the reports numbered from seq, in multi-row INSERTs.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, workload string, seq int64, rs []runs.Report) error {
	const cols, per = 8, 100 // 800 parameters a statement: under SQLite's limit
	for start := 0; start < len(rs); start += per {
		chunk := rs[start:min(start+per, len(rs))]
		var q strings.Builder
		q.WriteString(`INSERT INTO run_reports (workload, seq, t, step, total_steps, epoch, resumed_from, metrics) VALUES `)
		args := make([]any, 0, len(chunk)*cols)
		for i, r := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
			m, err := json.Marshal(r.Metrics)
			if err != nil {
				return err
			}
			if r.Metrics == nil {
				m = []byte("{}")
			}
			args = append(args, workload, seq+int64(start+i), r.Time.UnixMilli(), r.Step, r.TotalSteps, nullable(r.Epoch), r.ResumedFrom, string(m))
		}
		if _, err := tx.ExecContext(ctx, s.db.Q(q.String()), args...); err != nil {
			return fmt.Errorf("run reports of %s: %w", workload, err)
		}
	}
	return nil
}

func nullable(f float64) any {
	if math.IsNaN(f) {
		return nil
	}
	return f
}

func scanSummary(row store.Scanner) (runs.Summary, error) {
	var s runs.Summary
	var epoch sql.NullFloat64
	var metrics, watch, verdict string
	var first, reported, from, kept int64
	if err := row.Scan(&s.Reports, &s.Step, &s.TotalSteps, &epoch, &metrics, &first, &reported, &from, &s.RunFromStep, &s.ResumedFrom, &s.Restarts, &s.Rate,
		&watch, &verdict, &s.KeptBy, &kept); err != nil {
		return s, err
	}
	if err := json.Unmarshal([]byte(watch), &s.Watch); err != nil {
		return s, fmt.Errorf("watch: %w", err)
	}
	if verdict != "" {
		s.Verdict = &runs.Verdict{}
		if err := json.Unmarshal([]byte(verdict), s.Verdict); err != nil {
			return s, fmt.Errorf("verdict: %w", err)
		}
	}
	if kept != 0 {
		s.KeptAt = time.UnixMilli(kept).UTC()
	}
	s.Epoch = math.NaN()
	if epoch.Valid {
		s.Epoch = epoch.Float64
	}
	if err := json.Unmarshal([]byte(metrics), &s.Metrics); err != nil {
		return s, fmt.Errorf("metrics: %w", err)
	}
	if s.Reports > 0 {
		s.FirstAt, s.ReportedAt, s.RunFrom = time.UnixMilli(first).UTC(), time.UnixMilli(reported).UTC(), time.UnixMilli(from).UTC()
	} else {
		s.Metrics, s.ResumedFrom = nil, -1 // none yet: runs.Apply starts it
	}
	return s, nil
}

// RunSummary implements runs.Store.
func (s *Store) RunSummary(ctx context.Context, workload string) (runs.Summary, error) {
	sum, err := scanSummary(s.db.QueryRowContext(ctx, s.db.Q(`SELECT `+progressCols+` FROM run_progress WHERE workload = ?`), workload))
	if errors.Is(err, sql.ErrNoRows) || err == nil && sum.Reports == 0 {
		return runs.Summary{}, &fault.NotFound{Kind: "run progress", Name: workload}
	}
	if err != nil {
		return runs.Summary{}, fmt.Errorf("run progress of %s: %w", workload, err)
	}
	sum.Workload = workload
	return sum, nil
}

// RunSummaries implements runs.Store.
func (s *Store) RunSummaries(ctx context.Context, workloads []string) (map[string]runs.Summary, error) {
	out := map[string]runs.Summary{}
	for start := 0; start < len(workloads); start += 500 {
		chunk := workloads[start:min(start+500, len(workloads))]
		args := make([]any, len(chunk))
		for i, w := range chunk {
			args[i] = w
		}
		rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT workload, `+progressCols+` FROM run_progress
			WHERE reports > 0 AND workload IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)`), args...)
		if err != nil {
			return nil, fmt.Errorf("run progress: %w", err)
		}
		sums, err := store.Collect(rows, func(row store.Scanner) (runs.Summary, error) {
			var w string
			sum, err := scanSummary(workloadFirst{row, &w})
			sum.Workload = w
			return sum, err
		})
		if err != nil {
			return nil, fmt.Errorf("run progress: %w", err)
		}
		for _, sum := range sums {
			out[sum.Workload] = sum
		}
	}
	return out, nil
}

// workloadFirst scans a row's first column into w and the rest as a
// summary's.
type workloadFirst struct {
	row store.Scanner
	w   *string
}

func (r workloadFirst) Scan(dest ...any) error { return r.row.Scan(append([]any{r.w}, dest...)...) }

// RunReports implements runs.Store.
func (s *Store) RunReports(ctx context.Context, workload string, since time.Time, limit int) ([]runs.Report, error) {
	rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT t, step, total_steps, epoch, resumed_from, metrics FROM run_reports
		WHERE workload = ? AND t >= ? ORDER BY seq DESC LIMIT ?`), workload, since.UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("run reports of %s: %w", workload, err)
	}
	rs, err := store.Collect(rows, func(row store.Scanner) (runs.Report, error) {
		var r runs.Report
		var t int64
		var epoch sql.NullFloat64
		var metrics string
		if err := row.Scan(&t, &r.Step, &r.TotalSteps, &epoch, &r.ResumedFrom, &metrics); err != nil {
			return r, err
		}
		r.Time, r.Epoch = time.UnixMilli(t).UTC(), math.NaN()
		if epoch.Valid {
			r.Epoch = epoch.Float64
		}
		return r, json.Unmarshal([]byte(metrics), &r.Metrics)
	})
	if err != nil {
		return nil, fmt.Errorf("run reports of %s: %w", workload, err)
	}
	for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
		rs[i], rs[j] = rs[j], rs[i]
	}
	return rs, nil
}

// DeleteRunsBefore removes the reports older than before, up to limit rows
// (the server passes telemetry's rollup retention); it returns how many.
func (s *Store) DeleteRunsBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM run_reports WHERE (workload, seq) IN
		(SELECT workload, seq FROM run_reports WHERE t < ? LIMIT ?)`), before.UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete old run reports: %w", err)
	}
	return res.RowsAffected()
}
