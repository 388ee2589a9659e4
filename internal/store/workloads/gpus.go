package workloads

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/workload"
)

// A workload's GPU use, for metering and idle culling: read from the
// telemetry tables (telemetrydb writes them), per workload.

// GPUActivity implements cull.Store: over the workload's samples since
// since that measured its use (utilization or SM activity; a sample
// measuring neither says nothing about idleness), the first and the newest,
// and the newest with its GPU in use (utilization above 1 % or SM activity
// above 0.01).
func (s *Store) GPUActivity(ctx context.Context, workload string, since time.Time) (telemetry.Activity, error) {
	var first, last, active sql.NullInt64
	err := s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT min(s.t), max(s.t), max(CASE WHEN s.gpu_util > 1 OR s.sm_active > 0.01 THEN s.t END)
		FROM gpu_samples s JOIN gpu_series r ON r.id = s.series_id
		WHERE r.workload = ? AND s.t >= ? AND (s.gpu_util IS NOT NULL OR s.sm_active IS NOT NULL)`), workload, since.UnixMilli()).Scan(&first, &last, &active)
	if err != nil {
		return telemetry.Activity{}, fmt.Errorf("GPU activity of %s: %w", workload, err)
	}
	at := func(v sql.NullInt64) time.Time {
		if !v.Valid {
			return time.Time{}
		}
		return time.UnixMilli(v.Int64).UTC()
	}
	return telemetry.Activity{First: at(first), Last: at(last), LastActive: at(active)}, nil
}

// GPUMinutes implements workload.Store: per workload, the one-minute rollup
// buckets in [from, to) in which any of its GPUs measured utilization or SM
// activity (Measured), and those in which one was active on average (GPU
// utilization above 1 %, or SM activity above 0.01: Active).
func (s *Store) GPUMinutes(ctx context.Context, from, to time.Time) (map[string]workload.GPUMinutes, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT workload, COUNT(*), SUM(active) FROM (
		SELECT r.workload AS workload, g.bucket AS bucket, MAX(CASE WHEN g.gpu_util_avg > 1 OR g.sm_active_avg > 0.01 THEN 1 ELSE 0 END) AS active
		FROM gpu_rollups g JOIN gpu_series r ON r.id = g.series_id
		WHERE g.res = ? AND g.bucket >= ? AND g.bucket < ? AND r.workload <> '' AND (g.gpu_util_avg IS NOT NULL OR g.sm_active_avg IS NOT NULL)
		GROUP BY r.workload, g.bucket) m GROUP BY workload`), int64(telemetry.Minute/time.Second), from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("GPU minutes: %w", err)
	}
	defer rows.Close()
	out := map[string]workload.GPUMinutes{}
	for rows.Next() {
		var id string
		var m workload.GPUMinutes
		if err := rows.Scan(&id, &m.Measured, &m.Active); err != nil {
			return nil, fmt.Errorf("GPU minutes: %w", err)
		}
		out[id] = m
	}
	return out, rows.Err()
}

// GPUEnergy implements workload.Store: per workload, the joules of its
// series' one-minute rollups in [from, to), in kWh by hour.
func (s *Store) GPUEnergy(ctx context.Context, from, to time.Time) (map[string]map[time.Time]float64, error) {
	// The hour (3,600,000 ms) is written out, not a parameter: PostgreSQL
	// groups by an expression only when it is the selected one, and two
	// parameters are two expressions.
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT r.workload, g.bucket - g.bucket % 3600000, SUM(g.joules)
		FROM gpu_rollups g JOIN gpu_series r ON r.id = g.series_id
		WHERE g.res = ? AND g.bucket >= ? AND g.bucket < ? AND r.workload <> '' AND g.joules IS NOT NULL
		GROUP BY r.workload, g.bucket - g.bucket % 3600000`), int64(telemetry.Minute/time.Second), from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("GPU energy: %w", err)
	}
	defer rows.Close()
	out := map[string]map[time.Time]float64{}
	for rows.Next() {
		var id string
		var h int64
		var j float64
		if err := rows.Scan(&id, &h, &j); err != nil {
			return nil, fmt.Errorf("GPU energy: %w", err)
		}
		if out[id] == nil {
			out[id] = map[time.Time]float64{}
		}
		out[id][time.UnixMilli(h).UTC()] += telemetry.KWh(j)
	}
	return out, rows.Err()
}
