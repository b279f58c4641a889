-- pgoutbox schema, version 1: the outbox table and the indexes its
-- dispatcher relies on. A text/template: the names in double braces are
-- quoted identifiers that migrations.Migrate (or migrations.Render) fills in.

-- The schema, when it is missing. Not CREATE SCHEMA IF NOT EXISTS alone:
-- PostgreSQL checks the CREATE privilege on the database before it looks
-- whether the schema exists, and a migrator that owns its schema needs no
-- database-wide privilege. One line, so that tools that split statements
-- at line-ending semicolons (goose) keep the block whole.
DO $$ BEGIN IF to_regnamespace('{{.schema}}') IS NULL THEN CREATE SCHEMA IF NOT EXISTS {{.schema}}; END IF; END $$;

CREATE TABLE {{.table}} (
    -- Identity of the event: UUIDv7 chosen at emit, stable across retries.
    id               uuid        NOT NULL,
    -- Tie-break for claim order among rows due at the same instant.
    seq              bigint      NOT NULL GENERATED ALWAYS AS IDENTITY,
    event_type       text        NOT NULL,
    aggregate_type   text,
    aggregate_id     text,
    partition_key    text,
    idempotency_key  text,
    content_type     text,
    payload          bytea,
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status           text        NOT NULL DEFAULT 'PENDING',
    -- Delivery attempts that ended (success or failure); recoveries of an
    -- expired lease do not count here.
    attempts         integer     NOT NULL DEFAULT 0,
    -- Times an expired lease was recovered; bounds poison events.
    recoveries       integer     NOT NULL DEFAULT 0,
    -- When the row is due (database clock).
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lock_token       uuid,
    lock_owner       text,
    locked_at        timestamptz,
    lease_until      timestamptz,
    heartbeat_at     timestamptz,
    last_error_code  text,
    last_error       text,
    -- The latest attempts, newest last, at most 10 entries.
    attempt_log      jsonb       NOT NULL DEFAULT '[]'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    failed_at        timestamptz,
    CONSTRAINT {{.pkey}} PRIMARY KEY (id),
    CONSTRAINT {{.status_check}} CHECK (status IN ('PENDING', 'PROCESSING', 'SENT', 'FAILED')),
    CONSTRAINT {{.lease_check}} CHECK (status <> 'PROCESSING' OR (lock_token IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT {{.attempts_check}} CHECK (attempts >= 0 AND recoveries >= 0),
    CONSTRAINT {{.log_check}} CHECK (jsonb_typeof(attempt_log) = 'array' AND jsonb_array_length(attempt_log) <= 10),
    CONSTRAINT {{.error_check}} CHECK (char_length(last_error) <= 2048)
) WITH (
    -- Every transition rewrites the row; keep room for the new version on
    -- the same page. See docs/schema.md.
    fillfactor = 80,
    -- Vacuum after a fixed number of dead rows, not a fraction of a table
    -- that may hold millions of SENT rows. See docs/schema.md.
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.0,
    autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_cost_delay = 1
);

-- Claim: due PENDING rows in due order. Only PENDING rows are in it, so it
-- stays small however many SENT rows the table keeps.
CREATE INDEX {{.due_idx}} ON {{.table}} (next_attempt_at, seq) WHERE status = 'PENDING';

-- Recovery: PROCESSING rows by lease expiry.
CREATE INDEX {{.lease_idx}} ON {{.table}} (lease_until) WHERE status = 'PROCESSING';

---- create above / drop below ----

DROP TABLE IF EXISTS {{.table}};
