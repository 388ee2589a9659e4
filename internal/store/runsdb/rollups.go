package runsdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/telemetry"
)

const rollupArgs = 8 // res, workload, metric, bucket, n, v_avg, v_max, v_p95

// DueRollups implements runs.RollupStore. It reads every summary row past
// after (one a run that ever reported): cheap beside the reports, and the
// ingest path keeps writing only the columns it did.
func (s *Store) DueRollups(ctx context.Context, after string, limit int) ([]runs.RollupDue, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT workload, rollup_seq, reports FROM run_progress
		WHERE reports > rollup_seq AND workload > ? ORDER BY workload LIMIT ?`), after, limit)
	if err != nil {
		return nil, fmt.Errorf("runs to roll up: %w", err)
	}
	return store.Collect(rows, func(r store.Scanner) (runs.RollupDue, error) {
		var d runs.RollupDue
		return d, r.Scan(&d.Workload, &d.From, &d.Reports)
	})
}

// ReportStamps implements runs.RollupStore.
func (s *Store) ReportStamps(ctx context.Context, workload string, from int64, limit int) ([]runs.Stamp, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT seq, t FROM run_reports WHERE workload = ? AND seq >= ? ORDER BY seq LIMIT ?`), workload, from, limit)
	if err != nil {
		return nil, fmt.Errorf("run reports of %s: %w", workload, err)
	}
	return store.Collect(rows, func(r store.Scanner) (runs.Stamp, error) {
		var st runs.Stamp
		var t int64
		err := r.Scan(&st.Seq, &t)
		st.Time = time.UnixMilli(t).UTC()
		return st, err
	})
}

// ReportsBetween implements runs.RollupStore.
func (s *Store) ReportsBetween(ctx context.Context, workload string, from, to time.Time, fn func(runs.Report) error) error {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+reportCols+` FROM run_reports WHERE workload = ? AND t >= ? AND t < ? ORDER BY t, seq`),
		workload, from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return fmt.Errorf("run reports of %s: %w", workload, err)
	}
	if err := store.Each(rows, scanReport, fn); err != nil {
		return fmt.Errorf("run reports of %s: %w", workload, err)
	}
	return nil
}

const reportCols = `t, step, total_steps, epoch, resumed_from, metrics`

// scanReport reads reportCols.
func scanReport(row store.Scanner) (runs.Report, error) {
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
}

const upsertRollup = ` ON CONFLICT (res, workload, metric, bucket) DO UPDATE SET n = excluded.n, v_avg = excluded.v_avg, v_max = excluded.v_max, v_p95 = excluded.v_p95`

// WriteRunRollups implements runs.RollupStore: the mark moves first, and
// only from where it was read — its row stays locked to the commit, so of
// two replicas that read one mark one writes and the other writes nothing
// (a late report the second read would otherwise be overwritten by the
// first's older minute, past the mark); then the minutes are upserted (a
// minute computed again replaces itself; a metric never leaves one, as
// reports are only added) and each hour they fall in is summarised again
// from its minutes in SQL.
func (s *Store) WriteRunRollups(ctx context.Context, workload string, minutes []runs.MetricRollup, from, next int64) (bool, error) {
	minute, hour := int64(telemetry.Minute/time.Second), int64(telemetry.Hour/time.Second)
	var hours []int64
	for _, r := range minutes {
		hours = append(hours, telemetry.Bucket(r.Bucket, telemetry.Hour).UnixMilli())
	}
	slices.Sort(hours)
	hours = slices.Compact(hours)
	moved := false
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := s.db.TxExec(ctx, tx, s.db.Q(`UPDATE run_progress SET rollup_seq = ? WHERE workload = ? AND rollup_seq = ?`), next, workload, from)
		if err != nil {
			return fmt.Errorf("rollup mark: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return err // the mark moved on: nothing to write
		}
		moved = true
		for part := range slices.Chunk(minutes, per(rollupArgs)) {
			args := make([]any, 0, len(part)*rollupArgs)
			for _, r := range part {
				args = append(args, minute, workload, r.Metric, r.Bucket.UnixMilli(), r.N, r.Avg, r.Max, r.P95)
			}
			if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO run_rollups (res, workload, metric, bucket, n, v_avg, v_max, v_p95) VALUES `+
				rowsOf(len(part), "(?, ?, ?, ?, ?, ?, ?, ?)")+upsertRollup), args...); err != nil {
				return fmt.Errorf("minute rollups: %w", err)
			}
		}
		for _, h := range hours {
			if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO run_rollups (res, workload, metric, bucket, n, v_avg, v_max, v_p95)
				SELECT ?, workload, metric, ?, SUM(n), SUM(v_avg * n) / SUM(n), MAX(v_max), MAX(v_p95) FROM run_rollups
				WHERE res = ? AND workload = ? AND bucket >= ? AND bucket < ? GROUP BY workload, metric`+upsertRollup),
				hour, h, minute, workload, h, h+hour*1000); err != nil {
				return fmt.Errorf("hour rollups: %w", err)
			}
		}
		return nil
	})
	return moved && err == nil, err
}

// RunRollups implements runs.RollupStore.
func (s *Store) RunRollups(ctx context.Context, workload string, res time.Duration, from, to time.Time, metrics []string, fn func(runs.MetricRollup) error) error {
	args := []any{int64(res / time.Second), workload, from.UnixMilli(), to.UnixMilli()}
	only := ""
	if metrics != nil {
		if len(metrics) == 0 {
			return nil
		}
		only = ` AND metric IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(metrics)), ", ") + `)`
		for _, m := range metrics {
			args = append(args, m)
		}
	}
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT metric, bucket, n, v_avg, v_max, v_p95 FROM run_rollups
		WHERE res = ? AND workload = ? AND bucket >= ? AND bucket < ?`+only+` ORDER BY metric, bucket`), args...)
	if err != nil {
		return fmt.Errorf("run rollups of %s: %w", workload, err)
	}
	err = store.Each(rows, func(row store.Scanner) (runs.MetricRollup, error) {
		var r runs.MetricRollup
		var b int64
		err := row.Scan(&r.Metric, &b, &r.N, &r.Avg, &r.Max, &r.P95)
		r.Bucket = time.UnixMilli(b).UTC()
		return r, err
	}, fn)
	if err != nil {
		return fmt.Errorf("run rollups of %s: %w", workload, err)
	}
	return nil
}

// DeleteRunRollupsBefore implements runs.RollupStore.
func (s *Store) DeleteRunRollupsBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM run_rollups WHERE (res, workload, metric, bucket) IN
		(SELECT res, workload, metric, bucket FROM run_rollups WHERE bucket < ? LIMIT ?)`), before.UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete old run rollups: %w", err)
	}
	return res.RowsAffected()
}
