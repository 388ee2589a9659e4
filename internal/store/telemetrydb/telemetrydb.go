// Package telemetrydb stores GPU telemetry: the series (a device, or a
// share of one, with the pod and workload it is attributed to), raw samples,
// rollups at each resolution and the periods waiting for them, retention in
// small batches, and each node's GPU records (health, XIDs). It implements
// telemetry.Store.
package telemetrydb

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// Store is the telemetry of one database. Build one per process: it
// remembers the series this process has written.
type Store struct {
	db   *store.DB
	seen seriesSeen // telemetry series this process has written
}

var _ telemetry.Store = (*Store)(nil)

// New is the telemetry of db.
func New(db *store.DB) *Store { return &Store{db: db} }

// The telemetry tables' metric columns, in telemetry.Metric order.
var (
	metricCols = func() []string {
		var out []string
		for _, m := range telemetry.AllMetrics() {
			out = append(out, m.Info().Name)
		}
		return out
	}()
	sampleCols = "series_id, t, share, " + strings.Join(metricCols, ", ")
	rollupCols = func() string {
		cols := []string{"series_id", "bucket", "n"}
		for _, c := range metricCols {
			cols = append(cols, c+"_avg", c+"_max", c+"_p95")
		}
		return strings.Join(append(cols, "joules"), ", ")
	}()
	seriesCols = "id, node, device, gpu, gpu_index, model, mig_profile, mig_instance, namespace, pod, container, workload, attribution"
)

// seriesSeen remembers series this process has written (id → attribution),
// so that a batch writes only new or changed series. Entries expire: a
// series another replica pruned (no samples left) is written again within
// seriesSeenTTL, and its samples, keyed by the same id, show again.
type seriesSeen struct {
	mu sync.Mutex
	m  map[int64]seenSeries
}

type seenSeries struct {
	attribution string
	expires     time.Time
}

const (
	maxSeriesSeen = 200000
	seriesSeenTTL = time.Hour
)

func (c *seriesSeen) known(id int64, attribution string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	return ok && e.attribution == attribution && time.Now().Before(e.expires) //clock:allow a cache of its own, expired by wall time
}

func (c *seriesSeen) add(ids map[int64]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m)+len(ids) > maxSeriesSeen {
		c.m = make(map[int64]seenSeries, len(ids))
	}
	exp := time.Now().Add(seriesSeenTTL) //clock:allow a cache of its own, expired by wall time
	for id, a := range ids {
		c.m[id] = seenSeries{a, exp}
	}
}

func (c *seriesSeen) reset() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

// rowsPerInsert is how many rows one multi-row INSERT carries (18 or 48
// parameters a row: well under SQLite's and PostgreSQL's limits).
const rowsPerInsert = 200

// placeholders is "(?, ?, …), (…)" for rows of n columns.
func placeholders(rows, n int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", rows), ", ")
}

// nullFloat turns NaN into NULL.
func nullFloat(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// AppendSamples implements telemetry.Store.
func (s *Store) AppendSamples(ctx context.Context, rs []telemetry.Stored) error {
	if len(rs) == 0 {
		return nil
	}
	newSeries := map[int64]telemetry.Stored{}
	ids := make([]int64, len(rs))
	type period struct {
		res    int64
		bucket int64
	}
	periods := map[period]bool{}
	for i, r := range rs {
		ids[i] = r.Series.ID()
		if !s.seen.known(ids[i], r.Attribution) {
			newSeries[ids[i]] = r
		}
		for _, res := range telemetry.Resolutions {
			b := telemetry.Bucket(r.Time, res)
			periods[period{int64(res / time.Second), ms(b)}] = true
			if next := b.Add(res); !r.Time.Add(telemetry.EnergyGap).Before(next) {
				// The energy of the interval from this sample to the
				// series' next is counted in the period it ends in: a late
				// sample changes the next period's too.
				periods[period{int64(res / time.Second), ms(next)}] = true
			}
		}
	}
	// Rows are locked in one order — series by id, pending marks by
	// resolution then bucket — so that two pushes that touch the same rows
	// wait for each other instead of deadlocking (PostgreSQL: 40P01, one
	// push refused; seen with 13 nodes pushing at once).
	seriesIDs := slices.Sorted(maps.Keys(newSeries))
	marks := slices.SortedFunc(maps.Keys(periods), func(a, b period) int {
		return cmp.Or(cmp.Compare(a.res, b.res), cmp.Compare(a.bucket, b.bucket))
	})
	// Two pushes that bring the same new series at once (an agent's retry
	// beside its first try) race on its row: store.Upsert.
	err := store.Upsert(func() error {
		return s.db.Tx(ctx, func(tx *sql.Tx) error {
			for _, id := range seriesIDs {
				r := newSeries[id]
				k, d := r.Series, r.Series.Device
				profile, instance := "", -1
				if d.MIG != nil {
					profile, instance = d.MIG.Profile, d.MIG.InstanceID
				}
				_, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO gpu_series (`+seriesCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET attribution = excluded.attribution WHERE gpu_series.attribution <> excluded.attribution`),
					id, k.Node, d.ID(), d.GPU, d.Index, d.Model, profile, instance, k.Pod.Namespace, k.Pod.Name, k.Pod.Container, k.Workload, r.Attribution)
				if err != nil {
					return fmt.Errorf("series %s on %s: %w", d.ID(), k.Node, err)
				}
			}
			if err := s.insertSamples(ctx, tx, rs, ids); err != nil {
				return err
			}
			for _, p := range marks {
				if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO gpu_rollup_pending (res, bucket, marked) VALUES (?, ?, 1)
				ON CONFLICT (res, bucket) DO UPDATE SET marked = gpu_rollup_pending.marked + 1`), p.res, p.bucket); err != nil {
					return fmt.Errorf("mark rollups pending: %w", err)
				}
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	seen := make(map[int64]string, len(newSeries))
	for id, r := range newSeries {
		seen[id] = r.Attribution
	}
	s.seen.add(seen)
	return nil
}

// insertSamples inserts the samples, ignoring repeats: on PostgreSQL as one
// statement over arrays (unnest), on SQLite as multi-row INSERTs.
func (s *Store) insertSamples(ctx context.Context, tx *sql.Tx, rs []telemetry.Stored, ids []int64) error {
	if s.db.Driver() == store.Postgres {
		ts, shares := make([]int64, len(rs)), make([]float64, len(rs))
		cols := make([][]*float64, len(metricCols))
		for m := range cols {
			cols[m] = make([]*float64, len(rs))
		}
		for i, r := range rs {
			ts[i], shares[i] = ms(r.Time), r.Share
			for m, v := range r.Values {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					cols[m][i] = &r.Values[m]
				}
			}
		}
		args := []any{ids, ts, shares}
		casts := []string{"$1::bigint[]", "$2::bigint[]", "$3::float8[]"}
		for m := range cols {
			args = append(args, cols[m])
			casts = append(casts, fmt.Sprintf("$%d::float8[]", m+4))
		}
		_, err := s.db.TxExec(ctx, tx, `INSERT INTO gpu_samples (`+sampleCols+`) SELECT * FROM unnest(`+strings.Join(casts, ", ")+`) ON CONFLICT (series_id, t) DO NOTHING`, args...)
		if err != nil {
			return fmt.Errorf("samples: %w", err)
		}
		return nil
	}
	ncols := 3 + len(metricCols)
	for start := 0; start < len(rs); start += rowsPerInsert {
		end := min(start+rowsPerInsert, len(rs))
		args := make([]any, 0, (end-start)*ncols)
		for i := start; i < end; i++ {
			r := rs[i]
			args = append(args, ids[i], ms(r.Time), r.Share)
			for _, v := range r.Values {
				args = append(args, nullFloat(v))
			}
		}
		q := `INSERT INTO gpu_samples (` + sampleCols + `) VALUES ` + placeholders(end-start, ncols) + ` ON CONFLICT (series_id, t) DO NOTHING`
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(q), args...); err != nil {
			return fmt.Errorf("samples: %w", err)
		}
	}
	return nil
}

// PendingRollups implements telemetry.Store.
func (s *Store) PendingRollups(ctx context.Context, res time.Duration, closedBefore time.Time, limit int) ([]telemetry.Pending, error) {
	// A period [b, b+res) has closed when b+res <= closedBefore.
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT bucket, marked FROM gpu_rollup_pending WHERE res = ? AND bucket <= ? ORDER BY bucket LIMIT ?`),
		int64(res/time.Second), ms(closedBefore.Add(-res)), limit)
	if err != nil {
		return nil, fmt.Errorf("pending rollups: %w", err)
	}
	return store.Collect(rows, func(r store.Scanner) (telemetry.Pending, error) {
		var b, m int64
		err := r.Scan(&b, &m)
		return telemetry.Pending{Bucket: fromMS(b), Mark: m}, err
	})
}

// scanSample reads series_id, t, share and the metric columns.
func scanSample(r store.Scanner) (telemetry.Sample, error) {
	var id, t int64
	var share float64
	vals := make([]sql.NullFloat64, len(metricCols))
	dest := []any{&id, &t, &share}
	for i := range vals {
		dest = append(dest, &vals[i])
	}
	if err := r.Scan(dest...); err != nil {
		return telemetry.Sample{}, err
	}
	sm := telemetry.Sample{Series: id, Time: fromMS(t), Share: share, Values: telemetry.NoValues()}
	for i, v := range vals {
		if v.Valid {
			sm.Values[i] = v.Float64
		}
	}
	return sm, nil
}

// SamplesBetween implements telemetry.Store.
func (s *Store) SamplesBetween(ctx context.Context, from, to time.Time, fn func(telemetry.Sample) error) error {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+sampleCols+` FROM gpu_samples WHERE t >= ? AND t < ? ORDER BY series_id, t`), ms(from), ms(to))
	if err != nil {
		return fmt.Errorf("samples: %w", err)
	}
	return store.Each(rows, scanSample, fn)
}

// WriteRollups implements telemetry.Store.
func (s *Store) WriteRollups(ctx context.Context, res time.Duration, p telemetry.Pending, rs []telemetry.Rollup) error {
	r64 := int64(res / time.Second)
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`DELETE FROM gpu_rollups WHERE res = ? AND bucket = ?`), r64, ms(p.Bucket)); err != nil {
			return err
		}
		ncols := 5 + 3*len(metricCols)
		for start := 0; start < len(rs); start += rowsPerInsert {
			end := min(start+rowsPerInsert, len(rs))
			args := make([]any, 0, (end-start)*ncols)
			for _, r := range rs[start:end] {
				args = append(args, r64, r.Series, ms(r.Bucket), r.N)
				for m := range metricCols {
					args = append(args, nullFloat(r.Avg[m]), nullFloat(r.Max[m]), nullFloat(r.P95[m]))
				}
				args = append(args, nullFloat(r.Joules))
			}
			if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO gpu_rollups (res, `+rollupCols+`) VALUES `+placeholders(end-start, ncols)), args...); err != nil {
				return fmt.Errorf("rollups: %w", err)
			}
		}
		_, err := s.db.TxExec(ctx, tx, s.db.Q(`DELETE FROM gpu_rollup_pending WHERE res = ? AND bucket = ? AND marked <= ?`), r64, ms(p.Bucket), p.Mark)
		return err
	})
}

// deleteOldest deletes about limit of the oldest rows of table (time column
// col, extra condition where) older than cutoff: everything older than the
// limit-th oldest row's time, so each statement is small.
func (s *Store) deleteOldest(ctx context.Context, table, col, where string, args []any, cutoff time.Time, limit int) (int64, error) {
	cond := col + ` < ?` + where
	qargs := append([]any{ms(cutoff)}, args...)
	var upper int64
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT `+col+` FROM `+table+` WHERE `+cond+` ORDER BY `+col+` LIMIT 1 OFFSET ?`), append(qargs, limit)...).Scan(&upper)
	del := `DELETE FROM ` + table + ` WHERE ` + cond
	dargs := qargs
	switch {
	case errors.Is(err, sql.ErrNoRows): // fewer than limit rows: all of them
	case err != nil:
		return 0, fmt.Errorf("oldest %s: %w", table, err)
	default:
		// At least one row is strictly older than upper (limit rows come
		// before it), unless they all share its time: then take that time too.
		var lowest int64
		if err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT MIN(`+col+`) FROM `+table+` WHERE `+cond), qargs...).Scan(&lowest); err != nil {
			return 0, fmt.Errorf("oldest %s: %w", table, err)
		}
		op := " < ?"
		if lowest == upper {
			op = " <= ?"
		}
		del += ` AND ` + col + op
		dargs = append(append([]any{}, qargs...), upper)
	}
	res, err := s.db.ExecContext(ctx, s.db.Q(del), dargs...)
	if err != nil {
		return 0, fmt.Errorf("delete old %s: %w", table, err)
	}
	return res.RowsAffected()
}

// DeleteSamplesBefore implements telemetry.Store.
func (s *Store) DeleteSamplesBefore(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	return s.deleteOldest(ctx, "gpu_samples", "t", "", nil, cutoff, limit)
}

// DeleteRollupsBefore implements telemetry.Store.
func (s *Store) DeleteRollupsBefore(ctx context.Context, res time.Duration, cutoff time.Time, limit int) (int64, error) {
	return s.deleteOldest(ctx, "gpu_rollups", "bucket", " AND res = ?", []any{int64(res / time.Second)}, cutoff, limit)
}

// DeleteOrphanSeries implements telemetry.Store: series with neither
// samples nor rollups left.
func (s *Store) DeleteOrphanSeries(ctx context.Context) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM gpu_series WHERE NOT EXISTS (SELECT 1 FROM gpu_samples WHERE series_id = gpu_series.id)
		AND NOT EXISTS (SELECT 1 FROM gpu_rollups WHERE series_id = gpu_series.id)`)
	if err != nil {
		return 0, fmt.Errorf("delete series without data: %w", err)
	}
	n, err := res.RowsAffected()
	if n > 0 {
		s.seen.reset()
	}
	return n, err
}

func scanSeries(r store.Scanner) (telemetry.SeriesRecord, error) {
	var rec telemetry.SeriesRecord
	var deviceID, profile string
	var instance int
	k := &rec.Key
	err := r.Scan(&rec.ID, &k.Node, &deviceID, &k.Device.GPU, &k.Device.Index, &k.Device.Model, &profile, &instance,
		&k.Pod.Namespace, &k.Pod.Name, &k.Pod.Container, &k.Workload, &rec.Attribution)
	if instance >= 0 {
		k.Device.MIG = &telemetry.MIGInstance{UUID: deviceID, Profile: profile, InstanceID: instance}
	}
	return rec, err
}

// WorkloadSeries implements telemetry.Store.
func (s *Store) WorkloadSeries(ctx context.Context, workload string) ([]telemetry.SeriesRecord, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+seriesCols+` FROM gpu_series WHERE workload = ? ORDER BY device, namespace, pod, container`), workload)
	if err != nil {
		return nil, fmt.Errorf("series of %s: %w", workload, err)
	}
	return store.Collect(rows, scanSeries)
}

// idList is "?, ?, …" for n ids, and the ids as arguments.
func idList(ids []int64) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", "), args
}

// Samples implements telemetry.Store.
func (s *Store) Samples(ctx context.Context, series []int64, from, to time.Time, fn func(telemetry.Sample) error) error {
	for start := 0; start < len(series); start += 500 {
		in, args := idList(series[start:min(start+500, len(series))])
		rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+sampleCols+` FROM gpu_samples WHERE series_id IN (`+in+`) AND t >= ? AND t < ? ORDER BY series_id, t`),
			append(args, ms(from), ms(to))...)
		if err != nil {
			return fmt.Errorf("samples: %w", err)
		}
		if err := store.Each(rows, scanSample, fn); err != nil {
			return err
		}
	}
	return nil
}

func scanRollup(r store.Scanner) (telemetry.Rollup, error) {
	var id, bucket int64
	ro := telemetry.Rollup{Avg: telemetry.NoValues(), Max: telemetry.NoValues(), P95: telemetry.NoValues(), Joules: math.NaN()}
	vals := make([]sql.NullFloat64, 3*len(metricCols)+1)
	dest := []any{&id, &bucket, &ro.N}
	for i := range vals {
		dest = append(dest, &vals[i])
	}
	if err := r.Scan(dest...); err != nil {
		return ro, err
	}
	ro.Series, ro.Bucket = id, fromMS(bucket)
	if j := vals[len(vals)-1]; j.Valid {
		ro.Joules = j.Float64
	}
	for m := range metricCols {
		for j, into := range []*telemetry.Values{&ro.Avg, &ro.Max, &ro.P95} {
			if v := vals[3*m+j]; v.Valid {
				into[m] = v.Float64
			}
		}
	}
	return ro, nil
}

// Rollups implements telemetry.Store.
func (s *Store) Rollups(ctx context.Context, res time.Duration, series []int64, from, to time.Time, fn func(telemetry.Rollup) error) error {
	for start := 0; start < len(series); start += 500 {
		in, args := idList(series[start:min(start+500, len(series))])
		rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+rollupCols+` FROM gpu_rollups WHERE res = ? AND series_id IN (`+in+`) AND bucket >= ? AND bucket < ? ORDER BY series_id, bucket`),
			append(append([]any{int64(res / time.Second)}, args...), ms(from), ms(to))...)
		if err != nil {
			return fmt.Errorf("rollups: %w", err)
		}
		if err := store.Each(rows, scanRollup, fn); err != nil {
			return err
		}
	}
	return nil
}

// SeriesEnergy implements telemetry.Store: one row a series, summed in
// the database over the one-minute rollups whose minute starts in [from,
// to).
func (s *Store) SeriesEnergy(ctx context.Context, series []int64, from, to time.Time) (map[int64]telemetry.EnergySum, error) {
	out := map[int64]telemetry.EnergySum{}
	for start := 0; start < len(series); start += 500 {
		in, args := idList(series[start:min(start+500, len(series))])
		rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT series_id, COALESCE(SUM(joules), 0), COUNT(joules), COUNT(*) FROM gpu_rollups
			WHERE res = ? AND series_id IN (`+in+`) AND bucket >= ? AND bucket < ? GROUP BY series_id`),
			append(append([]any{int64(telemetry.Minute / time.Second)}, args...), ms(from), ms(to))...)
		if err != nil {
			return nil, fmt.Errorf("series energy: %w", err)
		}
		for rows.Next() {
			var id int64
			var e telemetry.EnergySum
			var all int
			if err := rows.Scan(&id, &e.Joules, &e.Minutes, &all); err != nil {
				rows.Close()
				return nil, fmt.Errorf("series energy: %w", err)
			}
			e.Unmeasured = all - e.Minutes
			out[id] = e
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("series energy: %w", err)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("series energy: %w", err)
		}
	}
	return out, nil
}

const gpuCols = `node, gpu, state, agent, seen_at, healthy, reason, since, xid, xid_at`

func scanGPU(r store.Scanner) (telemetry.GPURecord, error) {
	var g telemetry.GPURecord
	var uuid, state string
	var seen, since, xidAt int64
	if err := r.Scan(&g.Node, &uuid, &state, &g.Agent, &seen, &g.Healthy, &g.Reason, &since, &g.XID, &xidAt); err != nil {
		return g, err
	}
	if err := json.Unmarshal([]byte(state), &g.State); err != nil {
		return g, fmt.Errorf("GPU %s on %s: stored state is corrupt: %w", uuid, g.Node, err)
	}
	g.SeenAt, g.Since = fromMS(seen), fromMS(since)
	if xidAt != 0 {
		g.XIDAt = fromMS(xidAt)
	}
	return g, nil
}

// UpdateNodeGPUs implements telemetry.Store.
func (s *Store) UpdateNodeGPUs(ctx context.Context, node string, fn func(old []telemetry.GPURecord) ([]telemetry.GPURecord, error)) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.db.Q(`SELECT `+gpuCols+` FROM gpu_devices WHERE node = ? ORDER BY gpu`+s.db.ForUpdate()), node)
		if err != nil {
			return err
		}
		old, err := store.Collect(rows, scanGPU)
		if err != nil {
			return err
		}
		next, err := fn(old)
		if err != nil {
			return err
		}
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`DELETE FROM gpu_devices WHERE node = ?`), node); err != nil {
			return err
		}
		for _, g := range next {
			state, err := json.Marshal(g.State)
			if err != nil {
				return err
			}
			var xidAt int64
			if !g.XIDAt.IsZero() {
				xidAt = ms(g.XIDAt)
			}
			if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO gpu_devices (`+gpuCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
				node, g.State.GPU, string(state), g.Agent, ms(g.SeenAt), g.Healthy, g.Reason, ms(g.Since), int64(g.XID), xidAt); err != nil {
				return fmt.Errorf("GPU %s: %w", g.State.GPU, err)
			}
		}
		return nil
	})
}

// NodeGPUs implements telemetry.Store.
func (s *Store) NodeGPUs(ctx context.Context, node string) ([]telemetry.GPURecord, error) {
	q, args := `SELECT `+gpuCols+` FROM gpu_devices ORDER BY node, gpu`, []any{}
	if node != "" {
		q, args = `SELECT `+gpuCols+` FROM gpu_devices WHERE node = ? ORDER BY gpu`, []any{node}
	}
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("GPUs: %w", err)
	}
	return store.Collect(rows, scanGPU)
}

// LatestSamples implements telemetry.Store.
func (s *Store) LatestSamples(ctx context.Context, node string, since time.Time) ([]telemetry.Latest, error) {
	cols := "s.id, s.node, s.device, s.gpu, s.gpu_index, s.model, s.mig_profile, s.mig_instance, s.namespace, s.pod, s.container, s.workload, s.attribution, x.series_id, x.t, x.share"
	for _, c := range metricCols {
		cols += ", x." + c
	}
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+cols+` FROM gpu_series s JOIN gpu_samples x ON x.series_id = s.id
		WHERE s.node = ? AND x.t >= ? AND x.t = (SELECT MAX(t) FROM gpu_samples WHERE series_id = s.id)`), node, ms(since))
	if err != nil {
		return nil, fmt.Errorf("latest samples of %s: %w", node, err)
	}
	return store.Collect(rows, func(r store.Scanner) (telemetry.Latest, error) {
		var l telemetry.Latest
		var deviceID, profile string
		var instance int
		var t int64
		var share float64
		k := &l.Series.Key
		vals := make([]sql.NullFloat64, len(metricCols))
		dest := []any{&l.Series.ID, &k.Node, &deviceID, &k.Device.GPU, &k.Device.Index, &k.Device.Model, &profile, &instance,
			&k.Pod.Namespace, &k.Pod.Name, &k.Pod.Container, &k.Workload, &l.Series.Attribution, &l.Sample.Series, &t, &share}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := r.Scan(dest...); err != nil {
			return l, err
		}
		if instance >= 0 {
			k.Device.MIG = &telemetry.MIGInstance{UUID: deviceID, Profile: profile, InstanceID: instance}
		}
		l.Sample.Time, l.Sample.Values = fromMS(t), telemetry.NoValues()
		for i, v := range vals {
			if v.Valid {
				l.Sample.Values[i] = v.Float64
			}
		}
		return l, nil
	})
}
