-- When a workload's max runtime ends (UnixMicro; 0: never). Set at launch and
-- at every start; the lifecycle loop stops services, notebooks and VMs past it
-- (Jobs also carry activeDeadlineSeconds, which the cluster enforces).
ALTER TABLE workloads ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX workloads_expires_at ON workloads (expires_at) WHERE expires_at > 0
