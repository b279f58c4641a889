-- pgoutbox schema, version 2: started_at, when the handler (or publish)
-- of the current claim started; NULL while the event is claimed ahead and
-- waiting for a handler slot. Recovery charges a recovery (the poison
-- budget) only to rows whose attempt started. A nullable column without a
-- default: adding it rewrites nothing. The lock_timeout bounds how long
-- the ALTER TABLE queues for its lock, with writers queued behind it (see
-- 003_snoozes.sql).

SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} ADD COLUMN started_at timestamptz;

---- create above / drop below ----

SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} DROP COLUMN IF EXISTS started_at;
