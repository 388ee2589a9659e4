-- The image a workload runs: its template's catalog image, verified at launch
-- and pinned by digest (repository@sha256:...). Re-rendering uses it, so a tag
-- that moves later never changes what a recorded workload runs.
ALTER TABLE workloads ADD COLUMN image TEXT NOT NULL DEFAULT ''
