-- pgoutbox schema: the indexes operator tools read (admin and outboxctl:
-- counts, status, list, replay), so that their cost follows the rows they
-- show, not the millions of SENT rows a table may keep. Without them
-- every list page, count and replay call read the whole table (at 10M
-- rows: counts 1.5-2.3s, list 4.3-4.6s, each replay call 2.6-3.3s).
--
--   seq_idx        list without a filter, and of SENT rows, by keyset;
--                  the bounded count of SENT rows.
--   type_idx       list of one event type, in seq order.
--   aggregate_idx  list of one aggregate id; only rows that have one.
--   code_idx       list of one error code; only rows that failed once.
--   failed_idx     FAILED rows only: exact FAILED counts by code,
--                  replay by code, type and age, list of FAILED rows.
--
-- An Emit adds an entry to seq_idx, type_idx and (when the event has an
-- aggregate id) aggregate_idx; code_idx and failed_idx get entries only
-- when a row fails. Every status change already rewrites the row outside
-- HOT (the due and lease indexes' predicates read status), so a claim and
-- a completion add one entry to each index whose predicate the row meets.
-- docs/operations.md ("Large tables") has the measured costs.
--
-- CREATE INDEX blocks writes to the table (Emit, claims, completions)
-- while it builds, seconds per million rows. On a large table, build them
-- first by hand without blocking writers (one CREATE INDEX CONCURRENTLY
-- per line below, outside a transaction), and this migration finds them
-- and only records the version (IF NOT EXISTS):
--   CREATE INDEX CONCURRENTLY <table>_seq_idx ON <schema>.<table> (seq);
--   CREATE INDEX CONCURRENTLY <table>_type_idx ON <schema>.<table> (event_type, seq);
--   CREATE INDEX CONCURRENTLY <table>_aggregate_idx ON <schema>.<table> (aggregate_id, seq) WHERE aggregate_id IS NOT NULL;
--   CREATE INDEX CONCURRENTLY <table>_code_idx ON <schema>.<table> (last_error_code, seq) WHERE last_error_code IS NOT NULL;
--   CREATE INDEX CONCURRENTLY <table>_failed_idx ON <schema>.<table> (last_error_code, seq) WHERE status = 'FAILED';
-- The lock_timeout bounds the wait for the lock (see 003_snoozes.sql).

SET LOCAL lock_timeout = '2s';
CREATE INDEX IF NOT EXISTS {{.seq_idx}} ON {{.table}} (seq);
CREATE INDEX IF NOT EXISTS {{.type_idx}} ON {{.table}} (event_type, seq);
CREATE INDEX IF NOT EXISTS {{.aggregate_idx}} ON {{.table}} (aggregate_id, seq) WHERE aggregate_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS {{.code_idx}} ON {{.table}} (last_error_code, seq) WHERE last_error_code IS NOT NULL;
CREATE INDEX IF NOT EXISTS {{.failed_idx}} ON {{.table}} (last_error_code, seq) WHERE status = 'FAILED';

---- create above / drop below ----

-- The operator indexes of {{.table}}: admin and outboxctl then read the
-- whole table again.
SET LOCAL lock_timeout = '2s';
DROP INDEX IF EXISTS {{.schema}}.{{.seq_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.type_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.aggregate_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.code_idx}};
DROP INDEX IF EXISTS {{.schema}}.{{.failed_idx}};
