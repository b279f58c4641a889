-- pgoutbox schema, version 12: fillfactor 50 (below), and the per-key order index of the outbox
-- table ({{.order_idx}}, migration 007) stays only where per-key ordering
-- is used (issue 25, docs/schema.md). Every keyed event (aggregate_id or
-- partition_key set) pays one entry in it at insert, at its claim and at
-- each retry: 15.97 WAL records per insert, claim and completion against
-- 12.93 for an event without a key. Only dispatchers with Ordering PerKey
-- read it (their claim probes each key's head), and admin's blocked-key
-- views; without it no key is blocked, since nothing orders.
--
-- migrations.Config.KeyOrder chooses. With it this migration changes
-- nothing (the index of version 7 stays), and migrations.Migrate builds
-- the index after the migrations, without blocking writes, when it is
-- missing (KeyOrder turned on later). Without it this migration drops the
-- index. A later Migrate without KeyOrder never drops an index that exists
-- (one replica migrating without the option must not take it from
-- running ordered dispatchers); to drop it, run outside a transaction:
--
--   DROP INDEX CONCURRENTLY IF EXISTS <schema>.<table>_order_idx;
--
-- To build it yourself (what Migrate does with KeyOrder, and what to run
-- when these files are applied by another tool and KeyOrder is turned on
-- after version 12):
--
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS <table>_order_idx ON <schema>.<table>
--       ((coalesce(partition_key, aggregate_id)), seq)
--       WHERE status <> 'SENT' AND coalesce(partition_key, aggregate_id) IS NOT NULL;
--
-- (a build that failed leaves an INVALID index of that name: drop it as
-- above and build again).
--
-- The drop takes the table's ACCESS EXCLUSIVE lock until this
-- migration's transaction commits: a few milliseconds (dropping an index
-- reads no row), but it queues behind any transaction that holds a lock
-- on the table, and every Emit and claim queues behind it meanwhile. The
-- lock_timeout bounds that wait (see 003_snoozes.sql), and Migrate tries
-- again. To drop it without that lock, drop it CONCURRENTLY as above
-- first; this migration then finds nothing to drop.
--
-- A dispatcher of version 11 that is running keeps working without the
-- index (an ordered one probes the keys' heads through the table's other
-- indexes: correct, slower). One started after this migration finds the
-- index missing and refuses to start (its Verify): upgrade it, or migrate
-- with KeyOrder.
--
-- Fillfactor 50 instead of 80 (docs/schema.md, "Storage settings"): a
-- heartbeat renewal changes no indexed column, but it is a HOT update
-- (no index entry) only when its row's page has room for the new
-- version. The claim's new versions use the room an insert left; at 80
-- only the rows whose page pruning had freed could be renewed HOT (48%,
-- 1.04 index entries per renewal); at 50 the claim's versions stay on
-- their page and pruning frees the inserted ones, so every renewal was
-- HOT (100%, 0 entries) and a claim wrote 4.22 WAL records per event
-- instead of 4.80 (benchmarks -case walcost -fillfactor). The table
-- holds only the backlog, which now takes twice the pages. ALTER TABLE
-- SET takes SHARE UPDATE EXCLUSIVE (Emit and claims go on) and rewrites
-- nothing: pages written from now on follow it.
SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} SET (fillfactor = 50);
{{if .key_order}}
-- migrations.Config.KeyOrder is set: the order index of {{.table}} stays.
{{else}}
-- migrations.Config.KeyOrder is not set: the order index of {{.table}} goes.
DROP INDEX IF EXISTS {{.schema}}.{{.order_idx}};
{{end}}
---- create above / drop below ----

-- Sets fillfactor 80 again and builds the order index again (dispatchers
-- of version 11 need it). Like 007, CREATE INDEX blocks writes to the
-- table (Emit) while it reads the table once; on a large table build it
-- first CONCURRENTLY (above), and this finds it (IF NOT EXISTS; an
-- invalid one left by a failed CONCURRENTLY build is dropped and built
-- again).
SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} SET (fillfactor = 80);
DO $$
DECLARE
    i regclass := to_regclass('{{.schema}}.{{.order_idx}}');
BEGIN
    IF i IS NOT NULL AND NOT (SELECT indisvalid FROM pg_index WHERE indexrelid = i) THEN
        EXECUTE format('DROP INDEX %s', i);
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS {{.order_idx}} ON {{.table}} ((coalesce(partition_key, aggregate_id)), seq)
    WHERE status <> 'SENT' AND coalesce(partition_key, aggregate_id) IS NOT NULL;
