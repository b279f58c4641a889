-- pgoutbox log schema, version 2 (issue 27, docs/relay-design.md 1.2 and
-- 5): retention. A part of the log is retired once every consumer group
-- is past it; the functions below compute that rule themselves, so a
-- caller (the relay's retention service, outboxctl relay maintain) cannot
-- retire what a group has not delivered. Detaching and dropping the empty
-- parts is not here: DETACH PARTITION CONCURRENTLY cannot run in a
-- function, and needs the log's owner (internal/relay/retention does it).

-- {{.part_truncate}}() empties the parts every group is past: a part
-- [lo, hi) is retired when hi <= the smallest pg_snapshot_xmin of the
-- snapshots of the groups' cursor ticks (last_tick), over every group,
-- stopped or without a lease included. Every xid below a snapshot's xmin
-- had finished when it was taken, so every committed event of the part
-- was in a batch at or before each group's cursor, and no new xid routes
-- there. No group: nothing is retired (the log keeps everything).
--
-- Per retired part that holds rows it takes ACCESS EXCLUSIVE with NOWAIT
-- (a late reader or a pg_dump holding the part makes it busy, tried
-- again next pass: never waited for) and truncates it. It returns one row
-- per retired part: its name, its lower bound, whether this call
-- truncated it, whether it was busy; a row with neither is an empty part
-- waiting to be detached and dropped. SECURITY DEFINER: TRUNCATE needs
-- the log's owner.
CREATE FUNCTION {{.part_truncate}}()
RETURNS TABLE (part text, lo xid8, truncated boolean, busy boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $pgoutbox_fn$
DECLARE
    n_groups bigint;
    n_lost   bigint;
    horizon  numeric;
    p        record;
    has_rows boolean;
BEGIN
    SELECT count(*), count(*) FILTER (WHERE t.tick_id IS NULL), min(pg_snapshot_xmin(t.snapshot)::text::numeric)
    INTO n_groups, n_lost, horizon
    FROM {{.cursors}} c LEFT JOIN {{.ticks}} t ON t.tick_id = c.last_tick;
    IF n_groups = 0 OR n_lost > 0 THEN
        RETURN; -- no group, or a cursor on a tick that is gone: retire nothing
    END IF;
    FOR p IN
        SELECT r.relname::text AS name,
               ('x' || lpad(right(r.relname, 10), 16, '0'))::bit(64)::bigint::numeric * {{.part_xids}} AS plo
        FROM pg_inherits i JOIN pg_class r ON r.oid = i.inhrelid
        WHERE i.inhparent = {{.log_lit}}::regclass
          AND length(r.relname) = length({{.name_lit}}) + 12
          AND left(r.relname, length({{.name_lit}}) + 2) = {{.name_lit}} || '_x'
          AND right(r.relname, 10) ~ '^[0-9a-f]{10}$'
        ORDER BY 2
    LOOP
        EXIT WHEN p.plo + {{.part_xids}} > horizon;
        part := p.name;
        lo := p.plo::text::xid8;
        truncated := false;
        busy := false;
        BEGIN
            EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE NOWAIT', {{.schema_lit}}, p.name);
            EXECUTE format('SELECT EXISTS (SELECT FROM %I.%I)', {{.schema_lit}}, p.name) INTO has_rows;
            IF has_rows THEN
                EXECUTE format('TRUNCATE %I.%I', {{.schema_lit}}, p.name);
                truncated := true;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            busy := true;
        END;
        RETURN NEXT;
    END LOOP;
END
$pgoutbox_fn$;
REVOKE EXECUTE ON FUNCTION {{.part_truncate}}() FROM PUBLIC;

-- {{.tick_trim}}(p_limit) deletes at most p_limit of the oldest ticks
-- below every group's cursor tick (the smallest last_tick): the cursor
-- ticks and every newer one stay. No group: nothing is deleted. It
-- returns how many it deleted; the caller calls it again while that is
-- p_limit. SECURITY DEFINER: callers need no DELETE on the ticks.
--
-- It first locks the cursors in SHARE mode, NOWAIT (busy: it deletes
-- nothing and returns 0; the next pass tries again), so that no cursor
-- is written between reading the smallest last_tick and the delete: a
-- group created meanwhile at the oldest tick (which it reads FOR KEY
-- SHARE) would otherwise be left on a deleted tick. Cursor moves wait
-- for the one short delete.
CREATE FUNCTION {{.tick_trim}}(p_limit integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $pgoutbox_fn$
DECLARE
    keep bigint;
    n    bigint;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'pgoutbox: invalid limit %: want at least 1', p_limit USING ERRCODE = '22023';
    END IF;
    BEGIN
        LOCK TABLE {{.cursors}} IN SHARE MODE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;
    END;
    SELECT min(last_tick) INTO keep FROM {{.cursors}};
    IF keep IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM {{.ticks}}
    WHERE tick_id IN (SELECT tick_id FROM {{.ticks}} WHERE tick_id < keep ORDER BY tick_id LIMIT p_limit);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$pgoutbox_fn$;
REVOKE EXECUTE ON FUNCTION {{.tick_trim}}(integer) FROM PUBLIC;

---- create above / drop below ----

DROP FUNCTION {{.tick_trim}}(integer);
DROP FUNCTION {{.part_truncate}}();
