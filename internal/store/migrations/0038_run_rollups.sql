-- Run metrics as series (package runs): each metric a run reported,
-- summarised per period as the GPU series are — res 60 (one minute) or 3600
-- (one hour) seconds, bucket the start of the period (Unix milliseconds),
-- the reports that carried it (n), their mean, largest value and 95th
-- percentile (an hour's: the largest of its minutes'). rollup_seq is the
-- first report of the run (run_reports.seq) the rollups may not hold yet:
-- the rollup pass reads from there, so the ingest path writes nothing more.
CREATE TABLE run_rollups (
    res      INTEGER NOT NULL,
    workload TEXT    NOT NULL,
    metric   TEXT    NOT NULL,
    bucket   BIGINT  NOT NULL,
    n        INTEGER NOT NULL,
    v_avg    DOUBLE PRECISION NOT NULL,
    v_max    DOUBLE PRECISION NOT NULL,
    v_p95    DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (res, workload, metric, bucket)
);
CREATE INDEX run_rollups_bucket ON run_rollups (bucket);
ALTER TABLE run_progress ADD COLUMN rollup_seq BIGINT NOT NULL DEFAULT 0;
