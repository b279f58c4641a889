-- pgoutbox schema, version 13: the operators' audit table of
-- {{.table}}, and a BRIN index on its SENT history's sent_at (issue 28,
-- docs/schema.md).
--
-- {{.audit}} holds one row per audited operator action (package admin
-- with an Actor: the operator console, outboxctl replay, skip and purge):
-- who (actor, source), what (action: replay, skip or purge), with which
-- parameters (filter: ids, type, code, times, limits; never a payload)
-- and how many rows it changed, and the caller's request id when it
-- gave one (request_id, NULL otherwise): its unique index makes a request
-- single use, so that a confirmation posted twice acts once. Each row is inserted in the action's own
-- transaction. admin.AuditLog pages it newest first through the primary
-- key; the time index serves a trim by age (DELETE ... WHERE at < ...).
-- Nothing writes it but an audited action: it costs Emit and the
-- dispatchers nothing.
--
-- {{.sent_time_idx}} is a BRIN index on the history's sent_at, which the
-- console's activity view (admin.Activity: events sent in the last
-- minutes) reads instead of every row of the current time partition. The
-- history is append-only in sent_at order, so each range of 128 pages
-- summarizes to a narrow [min, max] of sent_at, and a completion's
-- insert lands in the partition's last range, not summarized yet, where a
-- BRIN insert writes nothing (vacuum summarizes the ranges it finds
-- full). Measured with benchmarks -case walcost: a completion to the
-- history wrote 6.242 WAL records per event against 6.163 on version 12
-- (5.209 against 5.208 without an aggregate id), 0.010 of them on this
-- index; a B-tree would add one per event (docs/schema.md, "Version 13").
--
-- CREATE INDEX on the partitioned history builds the index on each
-- partition, reading each once (a BRIN build reads the heap and writes a
-- few pages: 0.18 s for a million events in cache), under a SHARE lock on
-- the history that completions (which insert into it) wait for until this
-- migration commits. The lock_timeout bounds the wait for the lock (see
-- 003_snoozes.sql). On a very large history build it first without
-- blocking completions, one partition at a time, outside a transaction:
--
--   CREATE INDEX IF NOT EXISTS <table>_sent_time_idx ON ONLY <schema>.<table>_sent USING brin (sent_at);
--   -- for each partition P (and the default partition):
--   CREATE INDEX CONCURRENTLY P_sent_at_brin ON <schema>.P USING brin (sent_at);
--   ALTER INDEX <schema>.<table>_sent_time_idx ATTACH PARTITION <schema>.P_sent_at_brin;
--
-- and this migration finds it (IF NOT EXISTS).
--
-- A dispatcher of version 12 keeps working on a version 13 schema: it
-- never names the new table, and its Verify accepts a newer version
-- whose objects it relies on are all there.

SET LOCAL lock_timeout = '2s';
CREATE TABLE {{.audit}} (
    id bigint GENERATED ALWAYS AS IDENTITY,
    at timestamptz NOT NULL DEFAULT now(),
    actor text NOT NULL,
    source text NOT NULL,
    action text NOT NULL,
    filter jsonb NOT NULL,
    rows bigint NOT NULL,
    request_id uuid,
    CONSTRAINT {{.audit_pkey}} PRIMARY KEY (id)
);
CREATE INDEX {{.audit_time_idx}} ON {{.audit}} (at);
CREATE UNIQUE INDEX {{.audit_req_idx}} ON {{.audit}} (request_id);
CREATE INDEX IF NOT EXISTS {{.sent_time_idx}} ON {{.sent}} USING brin (sent_at);

---- create above / drop below ----

-- Drops the audit table of {{.table}}, with its rows, and the history's
-- BRIN index. The lock_timeout bounds the wait for the history's lock
-- (see 003_snoozes.sql).
SET LOCAL lock_timeout = '2s';
DROP INDEX IF EXISTS {{.schema}}.{{.sent_time_idx}};
DROP TABLE {{.audit}};
