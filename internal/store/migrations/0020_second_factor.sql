-- Whether the provider said a second factor was used at the sign-in a
-- session or a token came from (1) or not (0): roles the policy marks need it.
ALTER TABLE sessions ADD COLUMN second_factor INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN second_factor INTEGER NOT NULL DEFAULT 0
