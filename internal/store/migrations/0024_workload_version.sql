-- A workload row's version: every UPDATE of a row adds one to it, so that a
-- replica may keep decoded rows and read only (id, version) of a page to know
-- which it still holds as stored (internal/store/workloads' row cache).
ALTER TABLE workloads ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
-- The lists' indexes carry the version, so that a page's (id, version) are
-- read from the index alone.
DROP INDEX workloads_by_created;
DROP INDEX workloads_by_team;
DROP INDEX workloads_by_owner;
CREATE INDEX workloads_by_created ON workloads (created_at DESC, id DESC, version);
CREATE INDEX workloads_by_team ON workloads (team, created_at DESC, id DESC, version);
CREATE INDEX workloads_by_owner ON workloads (owner, created_at DESC, id DESC, version);
