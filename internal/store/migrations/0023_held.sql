-- Whether a team's spent budget holds the workload in its queue (1), a
-- field of its own rather than a prefix of its reason.
ALTER TABLE workloads ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
UPDATE workloads SET held = 1 WHERE reason LIKE 'held: %';
