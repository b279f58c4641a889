-- pgoutbox schema, version 3: snoozes, how often a handler gave the event
-- back with outbox.Snooze (due again later, no attempt spent). The
-- dispatcher bounds it (MaxSnoozes) and a replay resets it. NOT NULL with
-- a constant default: PostgreSQL 11 and later add it without rewriting
-- the table, and existing rows read 0.
--
-- ALTER TABLE takes an ACCESS EXCLUSIVE lock: while it waits for open
-- transactions on the table, every Emit and claim queues behind it. The
-- lock_timeout bounds that wait (and so the stall) to 2s; Migrate runs
-- each migration in its own transaction and tries again a few times when
-- the lock was not free (SQLSTATE 55P03).

SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} ADD COLUMN snoozes integer NOT NULL DEFAULT 0;

---- create above / drop below ----

SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} DROP COLUMN IF EXISTS snoozes;
