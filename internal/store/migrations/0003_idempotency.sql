-- Idempotent launches: a caller's Idempotency-Key maps to the one workload it
-- created; request_hash tells a repeat from a different request under the same
-- key. NULL keys (no header) are not unique. endpoint is a service's or
-- notebook's in-cluster address.
ALTER TABLE workloads ADD COLUMN idempotency_key TEXT;
ALTER TABLE workloads ADD COLUMN request_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN endpoint TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX workloads_idempotency ON workloads (owner, idempotency_key)
