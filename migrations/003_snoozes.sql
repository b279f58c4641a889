-- pgoutbox schema, version 3: snoozes, how often a handler gave the event
-- back with outbox.Snooze (due again later, no attempt spent). The
-- dispatcher bounds it (MaxSnoozes) and a replay resets it. NOT NULL with
-- a constant default: PostgreSQL 11 and later add it without rewriting
-- the table, and existing rows read 0.

ALTER TABLE {{.table}} ADD COLUMN snoozes integer NOT NULL DEFAULT 0;

---- create above / drop below ----

ALTER TABLE {{.table}} DROP COLUMN IF EXISTS snoozes;
