-- Personal access tokens. Only the SHA-256 of the secret is kept; the secret is
-- shown once, at creation. groups is the owner's groups when the token was made
-- (JSON), team and read_only optionally narrow what it may do.
CREATE TABLE tokens (
    id          TEXT    PRIMARY KEY,
    owner       TEXT    NOT NULL, -- issuer#subject
    issuer      TEXT    NOT NULL,
    subject     TEXT    NOT NULL,
    email       TEXT    NOT NULL,
    groups      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    secret_hash TEXT    NOT NULL,
    team        TEXT    NOT NULL,
    read_only   INTEGER NOT NULL,
    created_at  BIGINT  NOT NULL,
    expires_at  BIGINT  NOT NULL,
    revoked_at  BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX tokens_by_owner ON tokens (owner, created_at)
