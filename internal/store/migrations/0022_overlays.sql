-- The platform team's edits made through the API to what the files in git
-- also set: a GPU class's price, a team's quota or budget (kind), by class
-- or team (key), as JSON; who made it and when (microseconds).
CREATE TABLE overlays (
    kind  TEXT   NOT NULL,
    key   TEXT   NOT NULL,
    value TEXT   NOT NULL,
    by_whom TEXT NOT NULL,
    at    BIGINT NOT NULL,
    PRIMARY KEY (kind, key)
);
