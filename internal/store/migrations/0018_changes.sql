-- The change feed: every change a live connection or a watch stream must
-- hear of (a workload's record, a token revoked, a user signed out,
-- deactivated or regrouped), numbered in commit order. The counter's row
-- is taken by each writer until it commits, so a reader that has seen seq n
-- has seen every change before it. Rows are kept for a while, then pruned.
CREATE TABLE change_counter (
    id INTEGER PRIMARY KEY,
    n  BIGINT NOT NULL
);
INSERT INTO change_counter (id, n) VALUES (1, 0);
CREATE TABLE changes (
    seq     BIGINT PRIMARY KEY,
    at      BIGINT NOT NULL,
    kind    TEXT   NOT NULL,
    subject TEXT   NOT NULL
);
CREATE INDEX changes_at ON changes (at)
