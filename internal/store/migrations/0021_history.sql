-- A workload's history: when it first turned Running, when it ended, how
-- many times it started running, and its main container's exit code (NULL:
-- not known). Microseconds; 0: not yet. Filled in from its runs for
-- workloads recorded before.
ALTER TABLE workloads ADD COLUMN started_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN ended_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN exit_code INTEGER;
UPDATE workloads SET
    started_at = COALESCE((SELECT MIN(r.started_at) FROM workload_runs r WHERE r.workload_id = workloads.id), 0),
    attempts = (SELECT COUNT(*) FROM workload_runs r WHERE r.workload_id = workloads.id);
UPDATE workloads SET ended_at = updated_at WHERE status IN ('Succeeded', 'Failed', 'Stopped', 'IdleStopped', 'Deleted');
-- A job that Succeeded without a run on record ran once, for no time seen
-- (as the lifecycle counts it now).
UPDATE workloads SET attempts = 1, started_at = updated_at WHERE status = 'Succeeded' AND attempts = 0;
