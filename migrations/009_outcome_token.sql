-- pgoutbox schema, version 9: outcome_token, the lock token of the claim
-- whose outcome (SENT, a retry, a snooze, FAILED) the row recorded last.
-- Every completion writes it in the same UPDATE as its outcome; claims,
-- renewals, recovery and releases leave it alone. A completion retried
-- after its reply was lost reads it back: the row shows that its own
-- outcome was recorded even after another replica claimed the event again
-- (a claim overwrites lock_token, not this column). See
-- internal/lease/doc.go, "Lost replies".
--
-- A nullable column without a default: adding it rewrites nothing, and
-- existing rows read NULL (no claim of this version recorded their
-- outcome). No index holds it, so writing it adds no index entry. The
-- lock_timeout bounds how long the ALTER TABLE queues for its lock, with
-- writers queued behind it (see 003_snoozes.sql).
--
-- A dispatcher of version 8 keeps working on a version 9 table during a
-- rolling upgrade: its Verify allows columns it does not know and accepts
-- a newer version whose objects it relies on are all there, and its
-- statements never name the column (its outcomes leave it as it was).

SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} ADD COLUMN outcome_token uuid;

---- create above / drop below ----

SET LOCAL lock_timeout = '2s';
ALTER TABLE {{.table}} DROP COLUMN IF EXISTS outcome_token;
