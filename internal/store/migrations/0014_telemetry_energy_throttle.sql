-- Energy and throttling (telemetry.Energy, PowerThrottled, ThermalThrottled),
-- appended to the metric columns in telemetry.Metric's order.
ALTER TABLE gpu_samples ADD COLUMN energy DOUBLE PRECISION;
ALTER TABLE gpu_samples ADD COLUMN power_throttled DOUBLE PRECISION;
ALTER TABLE gpu_samples ADD COLUMN thermal_throttled DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN energy_avg DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN energy_max DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN energy_p95 DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN power_throttled_avg DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN power_throttled_max DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN power_throttled_p95 DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN thermal_throttled_avg DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN thermal_throttled_max DOUBLE PRECISION;
ALTER TABLE gpu_rollups ADD COLUMN thermal_throttled_p95 DOUBLE PRECISION
