-- Users as the identity provider last described them: groups refreshed at
-- every sign-in and provider-token use; tokens and sessions act with these
-- groups, not the ones they were made with. deactivated_at (0: active) stops
-- every session and token of the user at once.
CREATE TABLE users (
    id             TEXT   PRIMARY KEY, -- first 16 hex digits of SHA-256(issuer#subject)
    user_key       TEXT   NOT NULL UNIQUE, -- issuer#subject
    issuer         TEXT   NOT NULL,
    subject        TEXT   NOT NULL,
    email          TEXT   NOT NULL,
    name           TEXT   NOT NULL,
    groups         TEXT   NOT NULL, -- JSON array
    groups_at      BIGINT NOT NULL, -- Unix microseconds
    deactivated_at BIGINT NOT NULL DEFAULT 0,
    created_at     BIGINT NOT NULL,
    last_seen_at   BIGINT NOT NULL
)
