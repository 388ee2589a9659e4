-- Early stopping (package runs): each run's rules' state (a JSON object by
-- rule), the rule that fired (JSON, '' while none did), and who chose to
-- keep the run going, when (Unix milliseconds; 0: nobody).
ALTER TABLE run_progress ADD COLUMN watch TEXT NOT NULL DEFAULT '{}';
ALTER TABLE run_progress ADD COLUMN verdict TEXT NOT NULL DEFAULT '';
ALTER TABLE run_progress ADD COLUMN kept_by TEXT NOT NULL DEFAULT '';
ALTER TABLE run_progress ADD COLUMN kept_at BIGINT NOT NULL DEFAULT 0;
-- Retention deletes reports by age across runs.
CREATE INDEX run_reports_t ON run_reports (t);
