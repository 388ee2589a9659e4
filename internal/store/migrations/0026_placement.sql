-- Where a workload runs, for showback at its node group's price: the node
-- group of its current (or last) run and that run's price per hour (0: its
-- class's, price_per_hour), and what its runs before the current one cost.
ALTER TABLE workloads ADD COLUMN node_group TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN run_price DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN ran_cost DOUBLE PRECISION NOT NULL DEFAULT 0;
UPDATE workloads SET ran_cost = price_per_hour * running_us / 3600000000.0;
-- Each run's node group and price per hour (0: the workload's price_per_hour).
ALTER TABLE workload_runs ADD COLUMN node_group TEXT NOT NULL DEFAULT '';
ALTER TABLE workload_runs ADD COLUMN price_per_hour DOUBLE PRECISION NOT NULL DEFAULT 0;
-- What machines kept warm ahead of the forecast cost (placeholder pods'
-- GPU-hours at their node group's price), per node group and day (UTC,
-- microseconds of its midnight): the platform's idle cost, and the daily cap.
CREATE TABLE warm_spend (
    node_group TEXT             NOT NULL,
    day        BIGINT           NOT NULL,
    cost       DOUBLE PRECISION NOT NULL DEFAULT 0,
    gpu_hours  DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (node_group, day)
);
