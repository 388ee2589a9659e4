-- Templates: one row per name; versions are immutable rows below.
-- current_version is the live version (0 when deleted); last_version the highest
-- version ever stored, so numbering continues after a delete.
CREATE TABLE templates (
    name            TEXT    PRIMARY KEY,
    current_version INTEGER NOT NULL,
    last_version    INTEGER NOT NULL
);

CREATE TABLE template_versions (
    name       TEXT    NOT NULL REFERENCES templates (name),
    version    INTEGER NOT NULL,
    document   TEXT    NOT NULL, -- canonical JSON of the template
    digest     TEXT    NOT NULL, -- SHA-256 of document
    created_at BIGINT  NOT NULL, -- Unix microseconds
    created_by TEXT    NOT NULL,
    PRIMARY KEY (name, version)
);

CREATE TABLE workloads (
    id               TEXT    PRIMARY KEY,
    name             TEXT    NOT NULL,
    team             TEXT    NOT NULL,
    owner            TEXT    NOT NULL,
    template         TEXT    NOT NULL,
    template_version INTEGER NOT NULL,
    kind             TEXT    NOT NULL,
    gpu_class        TEXT    NOT NULL,
    mig_profile      TEXT    NOT NULL,
    gpu_count        INTEGER NOT NULL,
    parameters       TEXT    NOT NULL, -- JSON object of strings
    objects_hash     TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    created_at       BIGINT  NOT NULL, -- Unix microseconds
    updated_at       BIGINT  NOT NULL,
    FOREIGN KEY (template, template_version) REFERENCES template_versions (name, version)
);

CREATE INDEX workloads_by_created ON workloads (created_at DESC, id DESC);
CREATE INDEX workloads_by_team ON workloads (team, created_at DESC, id DESC);
CREATE INDEX workloads_by_owner ON workloads (owner, created_at DESC, id DESC);
