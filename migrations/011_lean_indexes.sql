-- pgoutbox schema, version 11: the outbox table keeps only the indexes
-- that the claim, the lease keeper, recovery and per-key order read
-- (issue 25, docs/schema.md). Its rows are PENDING or PROCESSING (version
-- 10 moved the others out), so the operator's list indexes of versions 5
-- and 8, the finished and failed indexes and the type due index go: every
-- event paid an entry in each at insert and most transitions, and nothing
-- needs them now. An Emit now writes the heap row, the primary key and
-- the due index (and the order index for a keyed event).
--
-- The lease index (lease_until) gives way to the held index (locked_at):
-- a heartbeat renewal changes lease_until, so with lease_until indexed no
-- renewal could be a HOT update. Recovery reads every PROCESSING row
-- through the held index and tests its lease; the PROCESSING rows are the
-- leases the dispatchers hold, bounded by their configuration. A renewal
-- and Start now change no indexed column.
--
-- The stray index holds the SENT and FAILED rows still in the table: the
-- SENT rows of version 9 until migrations.Migrate has moved them, and
-- what a dispatcher of version 9 still running writes. purge.Sweep reads
-- it; in steady state it is empty and costs nothing.
--
-- The migration first takes the table's ACCESS EXCLUSIVE lock (queueing
-- at most lock_timeout for it, see 008_list_indexes.sql), builds the two
-- indexes and drops eight. While it holds the lock nothing reads or
-- writes the table: a second or so per million rows for each index it
-- builds. On a large table, build them first without blocking anything
-- (one statement at a time, outside a transaction):
--
--   CREATE INDEX CONCURRENTLY <table>_held_idx ON <schema>.<table> (locked_at)
--       WHERE status = 'PROCESSING';
--   CREATE INDEX CONCURRENTLY <table>_stray_idx ON <schema>.<table> (seq)
--       WHERE status IN ('SENT', 'FAILED');
--
-- and this migration then finds them (IF NOT EXISTS; an invalid one left
-- by a failed CONCURRENTLY build is dropped and built again), so its lock
-- is held for the drops only.
--
-- A dispatcher of version 9 that is already running keeps working: its
-- statements name columns, not indexes. One started after this migration
-- is refused by its own Verify (indexes it knows are missing, and the
-- version is newer than it knows), with an error that says to upgrade.

SET LOCAL lock_timeout = '2s';
LOCK TABLE {{.table}} IN ACCESS EXCLUSIVE MODE;
DO $$
DECLARE
    i regclass;
BEGIN
    FOREACH i IN ARRAY ARRAY[to_regclass('{{.schema}}.{{.held_idx}}'), to_regclass('{{.schema}}.{{.stray_idx}}')] LOOP
        IF i IS NOT NULL AND NOT (SELECT indisvalid FROM pg_index WHERE indexrelid = i) THEN
            EXECUTE format('DROP INDEX %s', i);
        END IF;
    END LOOP;
END $$;
CREATE INDEX IF NOT EXISTS {{.held_idx}} ON {{.table}} (locked_at) WHERE status = 'PROCESSING';
CREATE INDEX IF NOT EXISTS {{.stray_idx}} ON {{.table}} (seq) WHERE status IN ('SENT', 'FAILED');
DROP INDEX IF EXISTS {{.schema}}.{{.lease_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.finished_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.seq_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.type_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.aggregate_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.code_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.failed_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.type_due_idx}};

---- create above / drop below ----

-- Builds the indexes of version 9 again (under ACCESS EXCLUSIVE, like the
-- up migration) and drops the held and stray indexes.
SET LOCAL lock_timeout = '2s';
LOCK TABLE {{.table}} IN ACCESS EXCLUSIVE MODE;
CREATE INDEX IF NOT EXISTS {{.lease_idx}} ON {{.table}} (lease_until) WHERE status = 'PROCESSING';
CREATE INDEX IF NOT EXISTS {{.finished_idx}} ON {{.table}} (status, coalesce(sent_at, failed_at))
    WHERE status IN ('SENT', 'FAILED');
CREATE INDEX IF NOT EXISTS {{.seq_idx}} ON {{.table}} (seq);
CREATE INDEX IF NOT EXISTS {{.type_idx}} ON {{.table}} (event_type, seq);
CREATE INDEX IF NOT EXISTS {{.aggregate_idx}} ON {{.table}} (aggregate_id, seq) WHERE aggregate_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS {{.code_idx}} ON {{.table}} (last_error_code, seq) WHERE last_error_code IS NOT NULL;
CREATE INDEX IF NOT EXISTS {{.failed_idx}} ON {{.table}} (last_error_code, seq) WHERE status = 'FAILED';
CREATE INDEX IF NOT EXISTS {{.type_due_idx}} ON {{.table}} (event_type, next_attempt_at, seq)
    WHERE (status || '') = 'PENDING';
DROP INDEX IF EXISTS {{.schema}}.{{.held_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.stray_idx}};
