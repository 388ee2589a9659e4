-- The energy a series' pod used in each rollup period, in joules
-- (telemetry.IntervalJoules: its GPU's energy counter, else its power
-- readings, times its share of the GPU; NULL when neither could say).
-- Summed per workload for showback's kWh.
ALTER TABLE gpu_rollups ADD COLUMN joules DOUBLE PRECISION;
