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
--   CREATE INDEX IF NOT EXISTS <table>_sent_time_idx ON ONLY <schema>.<table>_sent USING brin (sent_at) WITH (autosummarize = on);
--   -- for each partition P (and the default partition):
--   CREATE INDEX CONCURRENTLY P_sent_at_brin ON <schema>.P USING brin (sent_at) WITH (autosummarize = on);
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
CREATE INDEX IF NOT EXISTS {{.sent_time_idx}} ON {{.sent}} USING brin (sent_at) WITH (autosummarize = on);

-- {{.sent_summarize}}() summarizes the full block ranges of the BRIN
-- index not summarized yet, on each partition of the history (and the
-- default partition), and returns how many it summarized. The retention
-- pass of each dispatcher calls it: without it only VACUUM summarizes
-- (autosummarize asks autovacuum, which may be off or behind), and
-- admin.Activity would read every unsummarized range of the current
-- partition. The last, partial range is left alone: summarized, every
-- completion landing in it would update its summary (a WAL record per
-- event); unsummarized, Activity reads at most its 128 pages. A
-- partition whose lock is not free within 100ms (a VACUUM summarizing
-- it) is skipped, to the next call. Only the partitions that Activity
-- can read are visited, newest first: the default partition and those
-- whose range ends less than an hour ago (Activity's longest window); a
-- partition closed before gets no new rows, and visiting each of its
-- ranges on every pass would cost each pass in proportion to the whole
-- history. SECURITY DEFINER (only the owner may summarize); EXECUTE is
-- for the dispatcher's role.
CREATE FUNCTION {{.sent_summarize}}() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET lock_timeout = '100ms' SET TimeZone = 'UTC'
AS $pgoutbox_fn$
DECLARE
    idx regclass;
    full_ranges bigint;
    per_range int;
    total bigint := 0;
BEGIN
    FOR idx IN
        SELECT i.inhrelid::regclass
        FROM pg_inherits AS i
        JOIN pg_index AS x ON x.indexrelid = i.inhrelid
        JOIN pg_class AS t ON t.oid = x.indrelid
        LEFT JOIN LATERAL regexp_match(pg_get_expr(t.relpartbound, t.oid),
            '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m ON true
        WHERE i.inhparent = {{.sent_time_lit}}::regclass
            AND (m IS NULL OR m[2] = 'MAXVALUE' OR btrim(m[2], '''')::timestamptz > now() - interval '1 hour')
        ORDER BY CASE WHEN m IS NULL OR m[2] = 'MAXVALUE' THEN NULL ELSE btrim(m[2], '''')::timestamptz END DESC NULLS FIRST
    LOOP
        BEGIN
            SELECT coalesce((SELECT split_part(o, '=', 2)::int FROM unnest(c.reloptions) AS o
                    WHERE starts_with(o, 'pages_per_range=')), 128),
                pg_relation_size(x.indrelid) / current_setting('block_size')::bigint
            INTO per_range, full_ranges
            FROM pg_class AS c JOIN pg_index AS x ON x.indexrelid = c.oid WHERE c.oid = idx;
            full_ranges := full_ranges / per_range;
            FOR r IN 0 .. full_ranges - 1 LOOP
                total := total + brin_summarize_range(idx, r * per_range);
            END LOOP;
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
    END LOOP;
    RETURN total;
END
$pgoutbox_fn$;
REVOKE EXECUTE ON FUNCTION {{.sent_summarize}}() FROM PUBLIC;

---- create above / drop below ----

-- Drops the audit table of {{.table}}, with its rows, and the history's
-- BRIN index and its summarizing function. The lock_timeout bounds the wait for the history's lock
-- (see 003_snoozes.sql).
SET LOCAL lock_timeout = '2s';
DROP FUNCTION IF EXISTS {{.sent_summarize}}();
DROP INDEX IF EXISTS {{.schema}}.{{.sent_time_idx}};
DROP TABLE {{.audit}};
