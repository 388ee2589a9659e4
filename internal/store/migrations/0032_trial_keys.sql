-- A trial started with an Idempotency-Key (package trial): the same key from
-- the same person answers with that trial and starts nothing new; the
-- request's fingerprint tells a repeat from a different request.
ALTER TABLE trials ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN request_hash TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX trials_key ON trials (owner, idempotency_key) WHERE idempotency_key <> '';
