-- pgoutbox schema, version 8: the operator list indexes of version 5
-- (seq, type, aggregate, error code) leave out PROCESSING rows, so that a
-- claim no longer writes them.
--
-- No transition of a row is a HOT update (every one changes status, which
-- the partial indexes' predicates read), so each one adds an entry to
-- every index whose predicate the new row version meets. With the full
-- seq and type indexes and the aggregate index, a claim (PENDING ->
-- PROCESSING) and each heartbeat renewal added three entries nobody
-- reads: operators list PROCESSING rows through the lease index, which
-- holds only them. Without those entries a claim writes the primary key,
-- the lease index and (for a keyed event) the order index only: 8.98 ->
-- 5.85 WAL records and 1,121 -> 840 WAL bytes per claimed event
-- (benchmarks/analysis.md, "Issue 16: where the schema's cost comes
-- from"). Emit, completions and retries write as many entries as before.
--
-- Every operator query stays on an index: a list with a status filter
-- other than PROCESSING implies the new predicate; a list of PROCESSING
-- rows reads the lease index; a list without a status filter reads both
-- (admin.List, from this version on).
--
-- The indexes keep their version 5 names, with the new definitions: a
-- dispatcher or Verify of an earlier release (down to version 5) accepts
-- a newer schema whose index definitions changed, but refuses one that
-- lacks an index it knows by name, so renaming them would stop old
-- replicas from restarting during a rolling upgrade.
--
-- The migration first takes the table's ACCESS EXCLUSIVE lock (queueing
-- at most lock_timeout for it, with writers queued behind it, see
-- 003_snoozes.sql), builds the new indexes under temporary names, drops
-- the old ones and renames the new ones. Taking the strongest lock first
-- means it never upgrades a lock it holds: a transaction that read the
-- table makes it fail at once and cheaply, instead of after the builds,
-- and cannot deadlock with it. While it holds the lock, nothing reads or
-- writes the table: seconds per million rows, once per index. On a large
-- table, build the new indexes first without blocking anything (one
-- statement at a time, outside a transaction):
--
--   CREATE INDEX CONCURRENTLY <table>_seq_list_idx ON <schema>.<table> (seq)
--       WHERE status <> 'PROCESSING';
--   CREATE INDEX CONCURRENTLY <table>_type_list_idx ON <schema>.<table> (event_type, seq)
--       WHERE status <> 'PROCESSING';
--   CREATE INDEX CONCURRENTLY <table>_agg_list_idx ON <schema>.<table> (aggregate_id, seq)
--       WHERE aggregate_id IS NOT NULL AND status <> 'PROCESSING';
--   CREATE INDEX CONCURRENTLY <table>_code_list_idx ON <schema>.<table> (last_error_code, seq)
--       WHERE last_error_code IS NOT NULL AND status <> 'PROCESSING';
--
-- and this migration then finds them (IF NOT EXISTS), so that it holds
-- the lock only to drop and rename. One that a failed CONCURRENTLY build
-- left INVALID is dropped and built again here.
SET LOCAL lock_timeout = '2s';
LOCK TABLE {{.table}} IN ACCESS EXCLUSIVE MODE;
DO $$
DECLARE
    i regclass;
BEGIN
    FOREACH i IN ARRAY ARRAY[to_regclass('{{.schema}}.{{.seq_list_idx}}'), to_regclass('{{.schema}}.{{.type_list_idx}}'),
        to_regclass('{{.schema}}.{{.agg_list_idx}}'), to_regclass('{{.schema}}.{{.code_list_idx}}')] LOOP
        IF i IS NOT NULL AND NOT (SELECT indisvalid FROM pg_index WHERE indexrelid = i) THEN
            EXECUTE format('DROP INDEX %s', i);
        END IF;
    END LOOP;
END $$;
CREATE INDEX IF NOT EXISTS {{.seq_list_idx}} ON {{.table}} (seq)
    WHERE status <> 'PROCESSING';
CREATE INDEX IF NOT EXISTS {{.type_list_idx}} ON {{.table}} (event_type, seq)
    WHERE status <> 'PROCESSING';
CREATE INDEX IF NOT EXISTS {{.agg_list_idx}} ON {{.table}} (aggregate_id, seq)
    WHERE aggregate_id IS NOT NULL AND status <> 'PROCESSING';
CREATE INDEX IF NOT EXISTS {{.code_list_idx}} ON {{.table}} (last_error_code, seq)
    WHERE last_error_code IS NOT NULL AND status <> 'PROCESSING';
DROP INDEX IF EXISTS {{.schema}}.{{.seq_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.type_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.aggregate_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.code_idx}};
ALTER INDEX {{.schema}}.{{.seq_list_idx}} RENAME TO {{.seq_idx}};
ALTER INDEX {{.schema}}.{{.type_list_idx}} RENAME TO {{.type_idx}};
ALTER INDEX {{.schema}}.{{.agg_list_idx}} RENAME TO {{.aggregate_idx}};
ALTER INDEX {{.schema}}.{{.code_list_idx}} RENAME TO {{.code_idx}};

---- create above / drop below ----
-- Back to the full operator indexes of version 5 on {{.table}}, under
-- the same names: every claim writes them again. Takes the ACCESS
-- EXCLUSIVE lock first (see above), drops the version 8 indexes and
-- builds the full ones while it holds it.
SET LOCAL lock_timeout = '2s';
LOCK TABLE {{.table}} IN ACCESS EXCLUSIVE MODE;
DROP INDEX IF EXISTS {{.schema}}.{{.seq_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.type_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.aggregate_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.code_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.seq_list_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.type_list_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.agg_list_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.code_list_idx}};
CREATE INDEX {{.seq_idx}} ON {{.table}} (seq);
CREATE INDEX {{.type_idx}} ON {{.table}} (event_type, seq);
CREATE INDEX {{.aggregate_idx}} ON {{.table}} (aggregate_id, seq) WHERE aggregate_id IS NOT NULL;
CREATE INDEX {{.code_idx}} ON {{.table}} (last_error_code, seq) WHERE last_error_code IS NOT NULL;
