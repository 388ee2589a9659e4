-- Trials (package trial): short, capped runs of one template on several
-- GPU classes and counts. A workload that is a trial's run names it
-- (trial, '' for every other) and keeps the caps its runs have
-- (trial_caps, JSON of workload.Trial), so that it renders again as
-- launched.
ALTER TABLE workloads ADD COLUMN trial TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN trial_caps TEXT NOT NULL DEFAULT '';
CREATE INDEX workloads_trial ON workloads (trial) WHERE trial <> '';

-- A trial: who asked, for what (spec, JSON of trial.Spec) and its runs
-- (JSON of []trial.Run: each choice and the workload launched for it, or
-- why none was).
CREATE TABLE trials (
    id TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    owner TEXT NOT NULL,
    template TEXT NOT NULL,
    spec TEXT NOT NULL,
    runs TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX trials_team ON trials (team, created_at);
