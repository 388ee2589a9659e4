-- The audit log: append-only, each row chained to the one before by
-- hash = SHA-256(prev_hash and the row's fields); `gantry audit verify` finds
-- any row changed, deleted or inserted.
CREATE TABLE audit (
    seq        BIGINT PRIMARY KEY,
    at         BIGINT NOT NULL, -- Unix microseconds
    actor      TEXT   NOT NULL,
    action     TEXT   NOT NULL,
    object     TEXT   NOT NULL,
    decision   TEXT   NOT NULL, -- allow | deny
    status     INTEGER NOT NULL,
    reason     TEXT   NOT NULL,
    request_id TEXT   NOT NULL,
    source     TEXT   NOT NULL,
    prev_hash  TEXT   NOT NULL,
    hash       TEXT   NOT NULL
);
CREATE INDEX audit_by_actor ON audit (actor, seq)
