-- Where a dispatched workload runs: the worker cluster of its current (or
-- last) run, and of each run ('': the cluster Gantry drives).
ALTER TABLE workloads ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
ALTER TABLE workload_runs ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
