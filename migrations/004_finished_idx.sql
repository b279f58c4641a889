-- pgoutbox schema, version 4: an index of finished rows (SENT and FAILED)
-- by the time they finished, so that the dispatcher's retention job and
-- admin.Purge find the rows due for deletion without scanning the table
-- (a purge's last, empty call was a full scan: 14s at 10M rows). Only
-- SENT and FAILED rows are in it: an Emit (a PENDING row) adds no entry,
-- and a row enters it once, when it becomes SENT or FAILED. One index for
-- both statuses: status leads, so a SENT pass never walks FAILED rows
-- that are kept.
--
-- CREATE INDEX blocks writes to the table (Emit, claims, completions)
-- while it builds, seconds per million finished rows. On a large table,
-- build it first by hand without blocking writers, and this migration
-- finds it and does nothing (IF NOT EXISTS):
--   CREATE INDEX CONCURRENTLY <table>_finished_idx ON <schema>.<table>
--     (status, coalesce(sent_at, failed_at)) WHERE status IN ('SENT', 'FAILED');
-- The lock_timeout bounds the wait for the lock (see 003_snoozes.sql).

SET LOCAL lock_timeout = '2s';
CREATE INDEX IF NOT EXISTS {{.finished_idx}} ON {{.table}} (status, coalesce(sent_at, failed_at))
    WHERE status IN ('SENT', 'FAILED');

---- create above / drop below ----

-- The finished index of {{.table}}.
SET LOCAL lock_timeout = '2s';
DROP INDEX IF EXISTS {{.schema}}.{{.finished_idx}};
