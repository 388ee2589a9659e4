-- When a run last made progress (package runs): the time of its latest
-- report whose step went past the one before it, in Unix milliseconds (0:
-- never). The idle culler and the idle advice count it as use.
ALTER TABLE run_progress ADD COLUMN advanced_at BIGINT NOT NULL DEFAULT 0;
