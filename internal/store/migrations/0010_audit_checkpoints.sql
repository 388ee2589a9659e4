-- Signed checkpoints of the audit log's head: record seq had hash `hash`,
-- signed (ed25519, with a key the database never holds) at `at`. Gantry also
-- writes each one outside the database (its log, optionally a file); `gantry
-- audit verify --checkpoints` finds records rewritten, recomputed or deleted
-- up to the latest one. One checkpoint per record.
CREATE TABLE audit_checkpoints (
    seq       BIGINT PRIMARY KEY, -- the audit record covered
    hash      TEXT   NOT NULL,    -- that record's hash
    at        BIGINT NOT NULL,    -- when signed, Unix microseconds
    key_id    TEXT   NOT NULL,
    signature TEXT   NOT NULL     -- base64
)
