-- Metering: what a workload costs running (USD per hour at its class's price
-- when launched, spot or on demand, a MIG slice at its share), the time it
-- ran before its current run, and when its current run began (0: not
-- running), both in microseconds.
ALTER TABLE workloads ADD COLUMN price_per_hour DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN running_us BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN running_since BIGINT NOT NULL DEFAULT 0;
-- Each run of a workload (Running until it left Running; ended_at 0 while it
-- runs), for costs over a period. Microseconds.
CREATE TABLE workload_runs (
    workload_id TEXT   NOT NULL,
    started_at  BIGINT NOT NULL,
    ended_at    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (workload_id, started_at)
);
CREATE INDEX workload_runs_started ON workload_runs (started_at);
