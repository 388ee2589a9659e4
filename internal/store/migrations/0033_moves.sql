-- Work Gantry moved off (or kept on) a node quarantined for a failed GPU
-- (package quarantine): one row per workload, node and quarantine mark
-- (mark_at, microseconds), with where the move stands (phase) and what
-- Gantry did (detail). Times in microseconds; resumed_from -1: not said.
CREATE TABLE moves (
    workload_id TEXT NOT NULL,
    node TEXT NOT NULL,
    mark_at BIGINT NOT NULL,
    gpu TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    reason TEXT NOT NULL,
    kind TEXT NOT NULL,
    phase TEXT NOT NULL,
    detail TEXT NOT NULL,
    at BIGINT NOT NULL,
    resumed_at BIGINT NOT NULL DEFAULT 0,
    resumed_on TEXT NOT NULL DEFAULT '',
    resumed_from BIGINT NOT NULL DEFAULT -1,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (workload_id, node, mark_at)
);
CREATE INDEX moves_open ON moves (at) WHERE phase IN ('requeueing', 'moving');
