-- A team's settings carry a version, the API's ETag: a change made from an
-- older version is refused (If-Match), decided in the statement that writes.
ALTER TABLE team_settings ADD COLUMN version BIGINT NOT NULL DEFAULT 1
