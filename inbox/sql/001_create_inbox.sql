-- pgoutbox inbox, version 1: one row per (consumer, event) a consumer has
-- processed. A text/template: the names in double braces are quoted
-- identifiers that inbox.Migrate fills in.

-- The schema, when it is missing. Not CREATE SCHEMA IF NOT EXISTS alone:
-- PostgreSQL checks the CREATE privilege on the database before it looks
-- whether the schema exists, and a migrator that owns its schema needs no
-- database-wide privilege. One line, so that tools that split statements
-- at line-ending semicolons (goose) keep the block whole.
DO $$ BEGIN IF to_regnamespace('{{.schema}}') IS NULL THEN CREATE SCHEMA IF NOT EXISTS {{.schema}}; END IF; END $$;

CREATE TABLE {{.table}} (
    -- The consumer's own name: each consumer deduplicates independently.
    consumer      text        NOT NULL,
    -- The outbox event ID, stable across redeliveries.
    event_id      uuid        NOT NULL,
    -- SHA-256 of the event's type and payload, to tell a redelivery from a
    -- different event that reuses the ID.
    payload_hash  bytea       NOT NULL,
    -- When the consumer's transaction recorded the event (database clock).
    processed_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT {{.pkey}} PRIMARY KEY (consumer, event_id),
    CONSTRAINT {{.consumer_check}} CHECK (octet_length(consumer) BETWEEN 1 AND 255),
    CONSTRAINT {{.hash_check}} CHECK (octet_length(payload_hash) = 32)
);

-- Retention: Purge deletes the oldest rows first.
CREATE INDEX {{.processed_idx}} ON {{.table}} (processed_at);

---- create above / drop below ----

DROP TABLE IF EXISTS {{.table}};
