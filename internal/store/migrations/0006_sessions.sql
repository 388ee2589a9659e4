-- Browser sign-in. A login row holds what the callback needs (nonce, PKCE
-- verifier, where to return) under the SHA-256 of its state, for ten minutes,
-- and is taken (deleted) by the callback: a state works once. A session row is
-- a signed-in browser, kept under the SHA-256 of its cookie.
CREATE TABLE logins (
    state_hash TEXT   PRIMARY KEY,
    nonce      TEXT   NOT NULL,
    verifier   TEXT   NOT NULL,
    return_to  TEXT   NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE TABLE sessions (
    id_hash    TEXT   PRIMARY KEY,
    issuer     TEXT   NOT NULL,
    subject    TEXT   NOT NULL,
    email      TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    groups     TEXT   NOT NULL,
    csrf       TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_by_expiry ON sessions (expires_at)
