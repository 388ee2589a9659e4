-- A run's rollups by resolution and time: the hour rollup's recomputation
-- and a series read select one run's minutes or hours in a window, which
-- the primary key (res, workload, metric, bucket) serves only by scanning
-- every metric's rows of the run.
CREATE INDEX run_rollups_time ON run_rollups (res, workload, bucket);
