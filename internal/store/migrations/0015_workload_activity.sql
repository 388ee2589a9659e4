-- When a person last used a workload (its API, its interactive UI, a
-- keep-alive): the idle culler stops only what neither its GPUs nor its
-- people use. Unix microseconds.
CREATE TABLE workload_activity (
    workload_id TEXT PRIMARY KEY,
    at          BIGINT NOT NULL
);
