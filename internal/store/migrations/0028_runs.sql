-- Training runs' progress reports (package runs): every report a run
-- posted, in the order it posted them (seq), and each workload's summary of
-- them, updated with them in one transaction. Times are Unix milliseconds;
-- metrics are a JSON object of names to numbers.
CREATE TABLE run_reports (
    workload     TEXT   NOT NULL,
    seq          BIGINT NOT NULL,
    t            BIGINT NOT NULL,
    step         BIGINT NOT NULL,
    total_steps  BIGINT NOT NULL, -- 0: not said
    epoch        DOUBLE PRECISION, -- NULL: not said
    resumed_from BIGINT NOT NULL, -- -1: not said
    metrics      TEXT   NOT NULL,
    PRIMARY KEY (workload, seq)
);
CREATE INDEX run_reports_time ON run_reports (workload, t);
CREATE TABLE run_progress (
    workload      TEXT PRIMARY KEY,
    reports       BIGINT NOT NULL,
    step          BIGINT NOT NULL,
    total_steps   BIGINT NOT NULL,
    epoch         DOUBLE PRECISION,
    metrics       TEXT   NOT NULL,
    first_at      BIGINT NOT NULL,
    reported_at   BIGINT NOT NULL,
    run_from      BIGINT NOT NULL,
    run_from_step BIGINT NOT NULL,
    resumed_from  BIGINT NOT NULL,
    restarts      BIGINT NOT NULL,
    rate          DOUBLE PRECISION NOT NULL
);
