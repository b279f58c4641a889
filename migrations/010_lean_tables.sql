-- pgoutbox schema, version 10: dead letters and SENT history leave the
-- outbox table (issue 25, docs/schema.md). From this version on the
-- outbox table holds only work still to do, PENDING and PROCESSING rows;
-- version 11 then drops the indexes that served finished rows.
--
-- {{.dead}} holds the dead letters (FAILED rows): the same columns in
-- the same order (LIKE), seq carried over rather than generated, with the
-- operator's indexes (list by seq, type, aggregate and error code, age
-- for retention, and the order index that head-of-key blocking reads).
-- A FAILED outcome moves its row there in one statement; a replay moves
-- it back with its id and seq.
--
-- {{.sent}} is the SENT history: append-only, partitioned by sent_at,
-- retired by dropping whole partitions (never a mass DELETE). The
-- retention pass creates the time partitions ahead of need; the default
-- partition catches a row whose partition does not exist yet, so that a
-- completion never fails for want of one. Its id index is not unique: a
-- unique index of a partitioned table must hold the partition key.
--
-- The FAILED rows move here, in this transaction. It takes no lock on
-- the outbox table stronger than an UPDATE's (writers and dispatchers of
-- version 9 keep running); it locks the FAILED rows it moves. SENT rows
-- stay where they are: migrations.Migrate moves them after the last
-- migration in batches of their own transactions (purge.Sweep), as every
-- dispatcher's retention pass does with the SENT and FAILED rows that a
-- dispatcher of version 9 still running writes into the outbox table.

CREATE TABLE {{.dead}} (LIKE {{.table}} INCLUDING DEFAULTS,
    CONSTRAINT {{.dead_pkey}} PRIMARY KEY (id),
    CONSTRAINT {{.dead_check}} CHECK (status = 'FAILED')
) WITH (autovacuum_vacuum_cost_delay = 1);
ALTER TABLE {{.dead}} ALTER COLUMN status SET DEFAULT 'FAILED';
CREATE INDEX {{.dead_seq_idx}} ON {{.dead}} (seq);
CREATE INDEX {{.dead_type_idx}} ON {{.dead}} (event_type, seq);
CREATE INDEX {{.dead_agg_idx}} ON {{.dead}} (aggregate_id, seq) WHERE aggregate_id IS NOT NULL;
CREATE INDEX {{.dead_code_idx}} ON {{.dead}} (last_error_code, seq);
CREATE INDEX {{.dead_time_idx}} ON {{.dead}} (failed_at);
CREATE INDEX {{.dead_order_idx}} ON {{.dead}} ((coalesce(partition_key, aggregate_id)), seq)
    WHERE coalesce(partition_key, aggregate_id) IS NOT NULL;

CREATE TABLE {{.sent}} (LIKE {{.table}} INCLUDING DEFAULTS,
    CONSTRAINT {{.sent_check}} CHECK (status = 'SENT')
) PARTITION BY RANGE (sent_at);
ALTER TABLE {{.sent}} ALTER COLUMN status SET DEFAULT 'SENT';
CREATE TABLE {{.sent_default}} PARTITION OF {{.sent}} DEFAULT;
CREATE INDEX {{.sent_id_idx}} ON {{.sent}} (id);
CREATE INDEX {{.sent_seq_idx}} ON {{.sent}} (seq);
CREATE INDEX {{.sent_type_idx}} ON {{.sent}} (event_type, seq);
CREATE INDEX {{.sent_agg_idx}} ON {{.sent}} (aggregate_id, seq) WHERE aggregate_id IS NOT NULL;
CREATE INDEX {{.sent_def_idx}} ON {{.sent_default}} (sent_at);

-- The history's time partitions are created and dropped through these two
-- functions, which run as their owner, the migrator (SECURITY DEFINER):
-- PostgreSQL lets only the history's owner attach and detach partitions,
-- and only a role with CREATE on the schema create them, which no grant
-- on a table gives. Every name is fixed here; callers pass only times.
-- EXECUTE is for the roles migrations.RenderGrants names.
--
-- {{.sent_add}}(p_from, p_to) creates the partition of [p_from, p_to),
-- named after p_from (<table>_sYYYYMMDDHHMM, UTC), and attaches it;
-- false when a relation of that name exists already. The range is at
-- most 31 days, its bounds whole minutes.
CREATE FUNCTION {{.sent_add}}(p_from timestamptz, p_to timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC'
AS $pgoutbox_fn$
DECLARE
    part text;
BEGIN
    IF p_from IS NULL OR p_to IS NULL OR NOT isfinite(p_from) OR NOT isfinite(p_to)
        OR NOT p_from < p_to OR p_to - p_from > interval '31 days'
        OR date_trunc('minute', p_from) <> p_from OR date_trunc('minute', p_to) <> p_to THEN
        RAISE EXCEPTION 'pgoutbox: invalid partition range [%, %): want whole minutes, at most 31 days', p_from, p_to
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended({{.partitions_lock}}, 0));
    part := format('%I.%I', {{.schema_lit}}, {{.name_lit}} || '_s' || to_char(p_from, 'YYYYMMDDHH24MI'));
    IF to_regclass(part) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part, {{.sent_lit}});
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%L) TO (%L)', {{.sent_lit}}, part, p_from, p_to);
    RETURN true;
END
$pgoutbox_fn$;
REVOKE EXECUTE ON FUNCTION {{.sent_add}}(timestamptz, timestamptz) FROM PUBLIC;

-- {{.sent_drop}}(p_before) detaches and drops every time partition of the
-- history (a relation whose parent in pg_inherits is the history, never
-- its default partition) whose upper bound is at most p_before, oldest
-- first, and returns each one's name and rows: counted up to 1,024 pages
-- (8 MB), else pg_class.reltuples (the last vacuum's or analyze's).
CREATE FUNCTION {{.sent_drop}}(p_before timestamptz)
RETURNS TABLE (partition_name text, row_estimate bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC'
AS $pgoutbox_fn$
DECLARE
    r record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended({{.partitions_lock}}, 0));
    FOR r IN
        SELECT c.oid, c.relname, i.inhdetachpending, c.reltuples
        FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid,
            LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m
        WHERE i.inhparent = {{.sent_lit}}::regclass AND m IS NOT NULL AND m[2] <> 'MAXVALUE'
            AND c.oid <> (SELECT partdefid FROM pg_partitioned_table WHERE partrelid = {{.sent_lit}}::regclass)
            AND btrim(m[2], '''')::timestamptz <= p_before
        ORDER BY btrim(m[2], '''')::timestamptz
    LOOP
        partition_name := r.relname;
        IF pg_relation_size(r.oid) <= 1024 * current_setting('block_size')::bigint THEN
            EXECUTE format('SELECT count(*) FROM %s', r.oid::regclass) INTO row_estimate;
        ELSE
            row_estimate := greatest(r.reltuples, 0)::bigint;
        END IF;
        IF NOT r.inhdetachpending THEN
            EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', {{.sent_lit}}, r.oid::regclass);
        END IF;
        EXECUTE format('DROP TABLE %s', r.oid::regclass);
        RETURN NEXT;
    END LOOP;
END
$pgoutbox_fn$;
REVOKE EXECUTE ON FUNCTION {{.sent_drop}}(timestamptz) FROM PUBLIC;

WITH moved AS (
    DELETE FROM {{.table}} WHERE status = 'FAILED'
    RETURNING *
)
INSERT INTO {{.dead}} SELECT * FROM moved;

---- create above / drop below ----

-- Moves the dead letters and the SENT history back into {{.table}} (with
-- their seq) and drops both tables. The history is read in full: on a
-- large history, retire it first. An id in more than one of the three
-- tables (an event emitted again with the id of a dead letter or of a
-- sent event) cannot be moved back under the primary key: the migration
-- then refuses, naming one such id, and changes nothing; delete or purge
-- the older row first.
SET LOCAL lock_timeout = '2s';
DO $$
DECLARE
    dup uuid;
BEGIN
    SELECT id INTO dup FROM (
        SELECT id FROM {{.table}} UNION ALL SELECT id FROM {{.dead}} UNION ALL SELECT id FROM {{.sent}}
    ) AS a GROUP BY id HAVING count(*) > 1 LIMIT 1;
    IF dup IS NOT NULL THEN
        RAISE EXCEPTION 'pgoutbox: cannot migrate {{.table}} down to version 9: event id % is in more than one of the outbox table, its dead letters and its SENT history', dup;
    END IF;
END $$;
WITH moved AS (
    DELETE FROM {{.dead}} RETURNING *
)
INSERT INTO {{.table}} OVERRIDING SYSTEM VALUE SELECT * FROM moved;
WITH moved AS (
    DELETE FROM {{.sent}} RETURNING *
)
INSERT INTO {{.table}} OVERRIDING SYSTEM VALUE SELECT * FROM moved;
DROP FUNCTION {{.sent_drop}}(timestamptz);
DROP FUNCTION {{.sent_add}}(timestamptz, timestamptz);
DROP TABLE {{.sent}};
DROP TABLE {{.dead}};
