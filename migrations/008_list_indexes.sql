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
-- (admin.List, from this version on). The new indexes get new names so
-- that they can be built beforehand without blocking writes; the old
-- ones are then dropped.
--
-- CREATE INDEX blocks writes to the table (Emit, claims, completions)
-- while it reads the table, once per index, seconds per million rows; it
-- runs in the migration's transaction, so it cannot be CONCURRENTLY. On a
-- large table, build them first without blocking writes (one statement
-- at a time, outside a transaction; check indisvalid afterwards):
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
-- and this migration then finds them (IF NOT EXISTS) and only drops the
-- old ones (a DROP INDEX takes an ACCESS EXCLUSIVE lock for a moment).
-- The lock_timeout bounds how long it queues for its locks, with writers
-- queued behind it (see 003_snoozes.sql).

SET LOCAL lock_timeout = '2s';
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

---- create above / drop below ----

-- Back to the full operator indexes of version 5 on {{.table}}: every
-- claim writes them again. Builds them (blocking writes while it reads
-- the table; build them CONCURRENTLY first on a large table, see
-- 005_operator_indexes.sql) and drops the version 8 ones.
SET LOCAL lock_timeout = '2s';
CREATE INDEX IF NOT EXISTS {{.seq_idx}} ON {{.table}} (seq);
CREATE INDEX IF NOT EXISTS {{.type_idx}} ON {{.table}} (event_type, seq);
CREATE INDEX IF NOT EXISTS {{.aggregate_idx}} ON {{.table}} (aggregate_id, seq) WHERE aggregate_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS {{.code_idx}} ON {{.table}} (last_error_code, seq) WHERE last_error_code IS NOT NULL;
DROP INDEX IF EXISTS {{.schema}}.{{.seq_list_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.type_list_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.agg_list_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.code_list_idx}};
