-- Carbon-aware deferral (workload.Deferral): a flexible job held for
-- cleaner power is released into its queue at deferred_until (micros; 0
-- once released, and for every other workload); deferral is the plan and
-- its outcome (JSON of workload.Deferral, '' when it never waited).
ALTER TABLE workloads ADD COLUMN deferred_until BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN deferral TEXT NOT NULL DEFAULT '';
CREATE INDEX workloads_deferred ON workloads (deferred_until) WHERE deferred_until > 0;
