// Package runsdb is the store of training runs' progress reports (package
// runs): the reports as posted and each workload's summary of them.
package runsdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
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

const progressCols = `reports, step, total_steps, epoch, metrics, first_at, reported_at, run_from, run_from_step, resumed_from, restarts, rate, watch, verdict, kept_by, kept_at, advanced_at`

// AppendReports implements runs.Store, in one transaction and a few
// statements however many appends there are: the summary rows are made
// where missing, locked and read in one upsert (in the order of their
// workloads' ids, so two batches never wait on each other in a circle),
// the appends applied in memory in their order (each numbering its reports
// after what its workload had), then the reports inserted and the
// summaries written — on PostgreSQL in one statement where they fit. On
// PostgreSQL the transaction's round trips are its time, and the requests
// queued behind it wait for them (runs.committer): it is pipelined in two
// (store.PipelinedTx: BEGIN with the upserts, the writes with COMMIT). On
// SQLite, a file of the process's own, the statements run one by one,
// prepared once per shape and kept.
func (s *Store) AppendReports(ctx context.Context, as []runs.Append) ([]runs.Summary, error) {
	var ids []string
	reports := 0
	for _, a := range as {
		ids = append(ids, a.Workload)
		reports += len(a.Reports)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make([]runs.Summary, len(as))
	// write applies the appends in their order to the summaries as they
	// were, cur, numbering their reports, and returns the statements that
	// write them.
	write := func(cur map[string]runs.Summary) ([]store.Stmt, error) {
		var rows []reportRow
		for i, a := range as {
			// Each append's summary is its own: Apply and Judge change
			// the maps in place, and an earlier append's caller keeps its.
			old := cur[a.Workload].Clone()
			old.Workload = a.Workload
			for j, r := range a.Reports {
				rows = append(rows, reportRow{a.Workload, old.Reports + int64(j), r})
			}
			out[i] = a.Update(old)
			cur[a.Workload] = out[i]
		}
		return s.writeStmts(rows, ids, cur)
	}
	cur := map[string]runs.Summary{}
	read := func(rows store.Rows) error {
		sums, err := readSummaries(rows)
		if err != nil {
			return fmt.Errorf("run progress of %s…: %w", ids[0], err)
		}
		maps.Copy(cur, sums)
		return nil
	}
	if s.db.Driver() == store.Postgres {
		if err := s.db.PipelinedTx(ctx, lockStmts(ids), read, func() ([]store.Stmt, error) { return write(cur) }); err != nil {
			return nil, fmt.Errorf("run reports and progress of %s…: %w", ids[0], err)
		}
		return out, nil
	}
	var qs []string
	for n := range chunks(len(ids), 1) {
		qs = append(qs, lockProgressQ(n))
	}
	for n := range chunks(len(ids), progressArgs) {
		qs = append(qs, writeProgressQ(n))
	}
	for n := range chunks(reports, reportArgs) {
		qs = append(qs, insertReportsQ(n))
	}
	prepared, err := s.db.WriteStmts(ctx, qs...)
	if err != nil {
		return nil, err
	}
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		for _, st := range lockStmts(ids) {
			var rows *sql.Rows
			var err error
			if p := prepared[st.Query]; p != nil {
				rows, err = tx.StmtContext(ctx, p).QueryContext(ctx, st.Args...)
			} else {
				rows, err = tx.QueryContext(ctx, st.Query, st.Args...)
			}
			if err != nil {
				return fmt.Errorf("run progress of %s…: %w", ids[0], err)
			}
			err = read(rows)
			rows.Close()
			if err != nil {
				return err
			}
		}
		stmts, err := write(cur)
		if err != nil {
			return err
		}
		for _, st := range stmts {
			if p := prepared[st.Query]; p != nil {
				_, err = tx.StmtContext(ctx, p).ExecContext(ctx, st.Args...)
			} else {
				_, err = tx.ExecContext(ctx, st.Query, st.Args...)
			}
			if err != nil {
				return fmt.Errorf("run reports and progress of %s…: %w", ids[0], err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockStmts make the summary rows of ids that are missing and read them
// all, locked (ids sorted).
func lockStmts(ids []string) []store.Stmt {
	var out []store.Stmt
	for part := range slices.Chunk(ids, per(1)) {
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		out = append(out, store.Stmt{Query: lockProgressQ(len(part)), Args: args})
	}
	return out
}

// readSummaries reads lockProgressQ's rows.
func readSummaries(rows store.Rows) (map[string]runs.Summary, error) {
	out := map[string]runs.Summary{}
	for rows.Next() {
		var id string
		sum, err := scanSummary(workloadFirst{rows, &id})
		if err != nil {
			return nil, fmt.Errorf("run progress of %s: %w", id, err)
		}
		out[id] = sum
	}
	return out, rows.Err()
}

// writeStmts insert the reports and write the summaries of ids (whose rows
// exist and are locked): in one statement on PostgreSQL where both fit,
// else in multi-row INSERTs and upserts of at most maxArgs each.
func (s *Store) writeStmts(rows []reportRow, ids []string, sums map[string]runs.Summary) ([]store.Stmt, error) {
	if s.db.Driver() == store.Postgres && len(rows) > 0 && len(rows)*reportArgs+len(ids)*progressArgs <= maxArgs {
		args, err := reportValues(nil, rows)
		if err != nil {
			return nil, err
		}
		if args, err = summaryValues(args, ids, sums); err != nil {
			return nil, err
		}
		return []store.Stmt{{Query: writeBothQ(len(rows), len(ids)), Args: args}}, nil
	}
	var out []store.Stmt
	for part := range slices.Chunk(rows, per(reportArgs)) {
		args, err := reportValues(make([]any, 0, len(part)*reportArgs), part)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Stmt{Query: insertReportsQ(len(part)), Args: args})
	}
	for part := range slices.Chunk(ids, per(progressArgs)) {
		args, err := summaryValues(make([]any, 0, len(part)*progressArgs), part, sums)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Stmt{Query: writeProgressQ(len(part)), Args: args})
	}
	return out, nil
}

// Statements take at most 800 parameters, under SQLite's oldest limit.
const (
	maxArgs      = 800
	progressArgs = 18 // the workload and progressCols
	reportArgs   = 8
)

// per is how many rows of cols parameters one statement carries: the
// statements' loops cut their rows with slices.Chunk(rows, per(cols)).
func per(cols int) int { return maxArgs / cols }

// chunks are the sizes n rows of cols parameters each go in, as
// slices.Chunk cuts them: full statements, then the rest (for preparing the
// statements before the transaction, when the rows are not made yet).
func chunks(n, cols int) func(func(int) bool) {
	return func(yield func(int) bool) {
		for ; n > 0; n -= per(cols) {
			if !yield(min(n, per(cols))) {
				return
			}
		}
	}
}

func rowsOf(n int, row string) string {
	return row + strings.Repeat(", "+row, n-1)
}

// lockProgressQ makes the summary rows of n workloads where missing, locks
// them all and returns them. The update that changes nothing is what locks
// and returns a row that was there (DO NOTHING would do neither); the rows
// are taken in the order of the VALUES, which is the ids' sorted order.
func lockProgressQ(n int) string {
	return `INSERT INTO run_progress (workload, ` + progressCols + `) VALUES ` +
		rowsOf(n, `(?, 0, 0, 0, NULL, '{}', 0, 0, 0, 0, -1, 0, 0, '{}', '', '', 0, 0)`) +
		` ON CONFLICT (workload) DO UPDATE SET reports = run_progress.reports RETURNING workload, ` + progressCols
}

func writeProgressQ(n int) string {
	return `INSERT INTO run_progress (workload, ` + progressCols + `) VALUES ` + rowsOf(n, "("+rowsOf(progressArgs, "?")+")") +
		` ON CONFLICT (workload) DO UPDATE SET reports = excluded.reports, step = excluded.step, total_steps = excluded.total_steps,
		epoch = excluded.epoch, metrics = excluded.metrics, first_at = excluded.first_at, reported_at = excluded.reported_at, run_from = excluded.run_from,
		run_from_step = excluded.run_from_step, resumed_from = excluded.resumed_from, restarts = excluded.restarts, rate = excluded.rate,
		watch = excluded.watch, verdict = excluded.verdict, kept_by = excluded.kept_by, kept_at = excluded.kept_at, advanced_at = excluded.advanced_at`
}

func insertReportsQ(n int) string {
	return `INSERT INTO run_reports (workload, seq, t, step, total_steps, epoch, resumed_from, metrics) VALUES ` + rowsOf(n, "(?, ?, ?, ?, ?, ?, ?, ?)")
}

// writeBothQ inserts r reports and writes n summaries in one statement
// (PostgreSQL: an INSERT in a WITH runs whether or not it is read), its
// arguments the reports' then the summaries'.
func writeBothQ(r, n int) string {
	return `WITH reports AS (` + insertReportsQ(r) + `) ` + writeProgressQ(n)
}

// summaryValues appends to args the parameters of writeProgressQ's rows
// for ids.
func summaryValues(args []any, ids []string, sums map[string]runs.Summary) ([]any, error) {
	for _, id := range ids {
		out := sums[id]
		metrics, err := json.Marshal(out.Metrics)
		if err != nil {
			return nil, err
		}
		watch, err := json.Marshal(out.Watch)
		if err != nil {
			return nil, err
		}
		verdict := ""
		if out.Verdict != nil {
			b, err := json.Marshal(out.Verdict)
			if err != nil {
				return nil, err
			}
			verdict = string(b)
		}
		var kept int64
		if !out.KeptAt.IsZero() {
			kept = out.KeptAt.UnixMilli()
		}
		args = append(args, id, out.Reports, out.Step, out.TotalSteps, nullable(out.Epoch), string(metrics), out.FirstAt.UnixMilli(), out.ReportedAt.UnixMilli(),
			out.RunFrom.UnixMilli(), out.RunFromStep, out.ResumedFrom, out.Restarts, out.Rate, string(watch), verdict, out.KeptBy, kept, millis(out.AdvancedAt))
	}
	return args, nil
}

// reportRow is a report as numbered for its workload.
type reportRow struct {
	workload string
	seq      int64
	r        runs.Report
}

// reportValues appends to args the parameters of insertReportsQ's rows.
func reportValues(args []any, rows []reportRow) ([]any, error) {
	for _, row := range rows {
		r := row.r
		m, err := json.Marshal(r.Metrics)
		if err != nil {
			return nil, err
		}
		if r.Metrics == nil {
			m = []byte("{}")
		}
		args = append(args, row.workload, row.seq, r.Time.UnixMilli(), r.Step, r.TotalSteps, nullable(r.Epoch), r.ResumedFrom, string(m))
	}
	return args, nil
}

// millis is t in Unix milliseconds, 0 for the zero time.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
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
	var first, reported, from, kept, advanced int64
	if err := row.Scan(&s.Reports, &s.Step, &s.TotalSteps, &epoch, &metrics, &first, &reported, &from, &s.RunFromStep, &s.ResumedFrom, &s.Restarts, &s.Rate,
		&watch, &verdict, &s.KeptBy, &kept, &advanced); err != nil {
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
	if advanced != 0 {
		s.AdvancedAt = time.UnixMilli(advanced).UTC()
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
	sum, err := scanSummary(s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+progressCols+` FROM run_progress WHERE workload = ?`), workload))
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
	if len(workloads) == 0 {
		return nil, nil
	}
	// The ids go as one JSON array, so the statement's text is the same
	// for every page: prepared once and kept by the read pool.
	ids, err := json.Marshal(workloads)
	if err != nil {
		return nil, err
	}
	from := `json_each(?) AS j`
	if s.db.Driver() == store.Postgres {
		from = `jsonb_array_elements_text(?::jsonb) AS j(value)`
	}
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT p.workload, `+progressCols+` FROM `+from+`
		JOIN run_progress AS p ON p.workload = j.value WHERE p.reports > 0`), string(ids))
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
	out := make(map[string]runs.Summary, len(sums))
	for _, sum := range sums {
		out[sum.Workload] = sum
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
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+reportCols+` FROM run_reports
		WHERE workload = ? AND t >= ? ORDER BY seq DESC LIMIT ?`), workload, since.UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("run reports of %s: %w", workload, err)
	}
	rs, err := store.Collect(rows, scanReport)
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
