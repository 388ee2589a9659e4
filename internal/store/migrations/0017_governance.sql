-- Approvals: why a launch waits for a team-admin, until when (Unix
-- microseconds), and the decision (approved, denied, expired): who, why, when.
ALTER TABLE workloads ADD COLUMN approval_why TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN approval_expires BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN approval_decision TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN approval_by TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN approval_note TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN approval_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX workloads_approval_expires ON workloads (status, approval_expires);
-- Budget alerts sent: one per team (and cost center, '' for the team's
-- budget), period and threshold (in percent), ever — the key is what makes an
-- alert go out once, whichever replica leads.
CREATE TABLE budget_alerts (
    team          TEXT   NOT NULL,
    cost_center   TEXT   NOT NULL,
    period_start  BIGINT NOT NULL,
    threshold_pct INTEGER NOT NULL,
    at            BIGINT NOT NULL,
    spent         DOUBLE PRECISION NOT NULL,
    amount        DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (team, cost_center, period_start, threshold_pct)
);
-- The webhook outbox: a message is written with what caused it and sent by
-- the leader until delivered or given up. Unix microseconds; 0: not yet.
CREATE TABLE notifications (
    id           TEXT PRIMARY KEY,
    event        TEXT   NOT NULL,
    body         TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      BIGINT NOT NULL,
    delivered_at BIGINT NOT NULL DEFAULT 0,
    gave_up_at   BIGINT NOT NULL DEFAULT 0,
    last_error   TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX notifications_due ON notifications (delivered_at, gave_up_at, next_at);
-- The GPU classes' price history: a row whenever a class's price (per
-- GPU-hour) differs from its newest row, from Gantry's start or a reload of
-- the classes. Unix microseconds.
CREATE TABLE gpu_prices (
    class     TEXT   NOT NULL,
    since     BIGINT NOT NULL,
    on_demand DOUBLE PRECISION NOT NULL,
    spot      DOUBLE PRECISION NOT NULL,
    currency  TEXT   NOT NULL,
    PRIMARY KEY (class, since)
);
-- Each team's own lifecycle choices per template (package overrides), as
-- JSON, with who changed them last and when (Unix microseconds).
CREATE TABLE team_settings (
    team       TEXT PRIMARY KEY,
    data       TEXT   NOT NULL,
    updated_by TEXT   NOT NULL,
    updated_at BIGINT NOT NULL
);
-- The pods of a spot job the cluster evicted (their UIDs, comma-separated):
-- the job starts again after each, up to its template's spotRequeues.
ALTER TABLE workloads ADD COLUMN spot_evictions TEXT NOT NULL DEFAULT '';
