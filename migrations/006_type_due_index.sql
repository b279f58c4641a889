-- pgoutbox schema, version 6: the due rows of each event type. A
-- dispatcher that claims only the types it can deliver (its handlers and
-- publish types) walks this index once per type, so a backlog of types it
-- does not handle is never read by its claims (see docs/dispatcher.md,
-- "Which events a dispatcher claims"). Only PENDING rows are in it, like
-- the due index.
--
-- Its predicate is written "(status || '') = 'PENDING'", not "status =
-- 'PENDING'" like the due index's, so that the planner can use each index
-- only for the statements written for it: the claim of every type (status
-- = 'PENDING') cannot take this one (it had, on a table whose rows were
-- all of one type: a full scan of this index and a sort, instead of the
-- head of the due index), and a leg of the typed claim, which repeats
-- this predicate, cannot take the due index (it had, for a type with many
-- rows, filtering its way past 100,000 rows of other types).
--
-- CREATE INDEX blocks writes to the table (Emit) while it reads the table
-- once; it runs in the migration's transaction, so it cannot be
-- CONCURRENTLY. On a large table, build it first without blocking writes:
--
--   CREATE INDEX CONCURRENTLY <table>_type_due_idx ON <schema>.<table>
--       (event_type, next_attempt_at, seq) WHERE (status || '') = 'PENDING';
--
-- and this migration then finds it (IF NOT EXISTS) and only records the
-- version. The lock_timeout bounds how long it queues for its lock, with
-- writers queued behind it (see 003_snoozes.sql).

SET LOCAL lock_timeout = '2s';
CREATE INDEX IF NOT EXISTS {{.type_due_idx}} ON {{.table}} (event_type, next_attempt_at, seq)
    WHERE (status || '') = 'PENDING';

---- create above / drop below ----

-- Drops the type due index of {{.table}}: dispatchers of version 6 then
-- refuse to start (Verify); with SkipVerify their typed claims read every
-- row of each type they claim, SENT ones included.
SET LOCAL lock_timeout = '2s';
DROP INDEX IF EXISTS {{.schema}}.{{.type_due_idx}};
