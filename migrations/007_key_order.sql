-- pgoutbox schema, version 7: per-key ordering (dispatcher.Config.Ordering
-- PerKey, see docs/ordering.md). The order key of an event is
-- coalesce(partition_key, aggregate_id); Emit stores '' as NULL, so an
-- event with neither has no key and is never ordered.
--
-- skipped_at: when an operator skipped a FAILED event at the head of its
-- key (admin.SkipHeads, outboxctl skip). The row stays FAILED; a skipped
-- row no longer blocks its key. Nullable with no default: PostgreSQL adds
-- it without rewriting the table or reading it.
--
-- The order index holds, per key in seq order, the rows that can block
-- the key (every status but SENT): the ordered claim probes it for the
-- head of each candidate's key and for the barrier that ends a run. Rows
-- without a key never enter it, so Emit of keyless events pays nothing
-- for it and neither does a table that does not use ordering beyond its
-- keyed rows. A SENT row leaves it when it is sent.
--
-- ALTER TABLE takes an ACCESS EXCLUSIVE lock and CREATE INDEX blocks
-- writes to the table (Emit) while it reads the table once; both run in
-- the migration's transaction, so the index cannot be built CONCURRENTLY
-- here. On a large table, build it first without blocking writes:
--
--   CREATE INDEX CONCURRENTLY <table>_order_idx ON <schema>.<table>
--       ((coalesce(partition_key, aggregate_id)), seq)
--       WHERE status <> 'SENT' AND coalesce(partition_key, aggregate_id) IS NOT NULL;
--
-- and this migration then finds it (IF NOT EXISTS), adds the column and
-- records the version. The lock_timeout bounds how long it queues for its
-- locks, with writers queued behind it (see 003_snoozes.sql).

SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} ADD COLUMN IF NOT EXISTS skipped_at timestamptz;
CREATE INDEX IF NOT EXISTS {{.order_idx}} ON {{.table}} ((coalesce(partition_key, aggregate_id)), seq)
    WHERE status <> 'SENT' AND coalesce(partition_key, aggregate_id) IS NOT NULL;

---- create above / drop below ----

-- Drops the order index and skipped_at of {{.table}}: dispatchers of
-- version 7 then refuse to start (Verify), and the skips operators made
-- are forgotten (those FAILED heads block their keys again under
-- BlockKey once a version 7 dispatcher runs after a new migration).
SET LOCAL lock_timeout = '2s';
DROP INDEX IF EXISTS {{.schema}}.{{.order_idx}};
ALTER TABLE {{.table}} DROP COLUMN IF EXISTS skipped_at;
