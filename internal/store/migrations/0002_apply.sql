-- Launches are applied to the cluster after they are recorded: applied_hash is
-- the objects_hash last applied ('' until then), so a crash between recording and
-- applying is repaired by the reconciler. reason says why a workload is stuck or
-- failed.
ALTER TABLE workloads ADD COLUMN applied_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN reason TEXT NOT NULL DEFAULT ''
