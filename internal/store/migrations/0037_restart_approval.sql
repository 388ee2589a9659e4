-- approval_restart: the approval a workload waits for (or got) is for
-- starting it again after a stop, its volumes kept (workload.Approval.Restart),
-- not for its launch: denied, it is Stopped as it was rather than Failed.
ALTER TABLE workloads ADD COLUMN approval_restart INTEGER NOT NULL DEFAULT 0;
