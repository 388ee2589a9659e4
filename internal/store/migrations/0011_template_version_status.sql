-- A template version's standing, set by the platform team after the fact:
-- active, deprecated (launches warned) or revoked (launches and starts
-- refused, running workloads flagged). Revoked is final.
ALTER TABLE template_versions ADD COLUMN status TEXT NOT NULL DEFAULT 'active';
ALTER TABLE template_versions ADD COLUMN status_reason TEXT NOT NULL DEFAULT ''
