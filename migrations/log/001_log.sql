-- pgoutbox log schema, version 1 (issue 27, docs/relay-design.md): an
-- append-only log table that the relay reads in batches bounded by
-- snapshots, with its ticks, the ticker's lease row, the consumer groups'
-- cursors and parked events. A text/template: the names in double braces
-- are quoted identifiers that migrations.Migrate (Kind log) fills in.

DO $$ BEGIN IF to_regnamespace('{{.schema}}') IS NULL THEN CREATE SCHEMA IF NOT EXISTS {{.schema}}; END IF; END $$;

-- The log. Nothing here is ever updated: one heap row and one entry of
-- the xid index per event. xid is the writing transaction's top-level id
-- with its epoch (it never wraps); seq is insert order, the order of
-- events within a batch. No primary key: the event id is the consumers'
-- dedupe key, and a unique index of a partitioned table would have to
-- hold xid. Partitioned by xid range, {{.part_xids}} ids a part, with no
-- default partition (DETACH CONCURRENTLY refuses a table that has one):
-- the ticker and Migrate keep parts attached ahead of the current xid.
CREATE TABLE {{.log}} (
    xid             xid8        NOT NULL DEFAULT pg_current_xact_id(),
    seq             bigint      NOT NULL GENERATED ALWAYS AS IDENTITY,
    id              uuid        NOT NULL,
    event_type      text        NOT NULL,
    aggregate_type  text,
    aggregate_id    text,
    partition_key   text,
    idempotency_key text,
    content_type    text,
    payload         bytea,
    headers         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (xid);
CREATE INDEX {{.log_xid_idx}} ON {{.log}} (xid);

-- One row per tick: the snapshot of the tick's own statement. A batch of
-- a consumer group is every event visible in its target tick's snapshot
-- and not in its cursor tick's. last_seq is the seq sequence's last value
-- at the tick (lag in events, and "new events since" for the ticker).
-- sysid is the system identifier of the cluster that recorded the tick,
-- for the operator (a tick is judged by its snapshot alone: pg_upgrade
-- keeps the transaction ids under a new identifier).
CREATE TABLE {{.ticks}} (
    tick_id   bigint      NOT NULL PRIMARY KEY,
    snapshot  pg_snapshot NOT NULL,
    tick_time timestamptz NOT NULL DEFAULT now(),
    last_seq  bigint      NOT NULL,
    sysid     bigint      NOT NULL
);

-- The ticker's lease: one row. Any relay may tick; the one whose token
-- matches an unexpired lease does (the tick function checks it in the
-- tick's own transaction). next_tick is the next tick's id.
CREATE TABLE {{.ticker}} (
    one          boolean     NOT NULL DEFAULT true PRIMARY KEY CHECK (one),
    owner        text,
    token        uuid,
    lease_until  timestamptz,
    heartbeat_at timestamptz,
    next_tick    bigint      NOT NULL
);

-- One cursor per consumer group: every event visible in last_tick's
-- snapshot is done. batch_tick and batch_seq record an open batch (its
-- target tick, and the last seq done in it when the batch was cut at
-- MaxBatch) so that a restart resumes the same set. The group's reader
-- holds the row under a token-fenced lease. stopped_reason is set when
-- the group stopped on a snapshot that went backwards or a changed
-- database; nothing is read until an operator clears it.
CREATE TABLE {{.cursors}} (
    grp            text        NOT NULL PRIMARY KEY CHECK (char_length(grp) BETWEEN 1 AND 200),
    last_tick      bigint      NOT NULL,
    batch_tick     bigint,
    batch_seq      bigint,
    owner          text,
    token          uuid,
    lease_until    timestamptz,
    heartbeat_at   timestamptz,
    stopped_reason text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    moved_at       timestamptz NOT NULL DEFAULT now()
);

-- Keys a group parked: an event of the key was refused for good (or its
-- retries were spent), so the key's events wait in {{.parked}} while the
-- other keys flow. Replay and skip are requests the group's reader
-- carries out at a batch boundary.
CREATE TABLE {{.parked_keys}} (
    grp                 text        NOT NULL,
    key                 text        NOT NULL,
    parked_at           timestamptz NOT NULL DEFAULT now(),
    error_code          text,
    error               text        CHECK (char_length(error) <= 2048),
    replay_requested_at timestamptz,
    skip_requested_at   timestamptz,
    PRIMARY KEY (grp, key)
);

-- Parked events, per group: the log's columns, the key they were parked
-- under (NULL for an event without a key, parked alone) and why.
CREATE TABLE {{.parked}} (
    grp             text        NOT NULL,
    seq             bigint      NOT NULL,
    xid             xid8        NOT NULL,
    id              uuid        NOT NULL,
    event_type      text        NOT NULL,
    aggregate_type  text,
    aggregate_id    text,
    partition_key   text,
    idempotency_key text,
    content_type    text,
    payload         bytea,
    headers         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL,
    key             text,
    parked_at       timestamptz NOT NULL DEFAULT now(),
    error_code      text,
    error           text        CHECK (char_length(error) <= 2048),
    PRIMARY KEY (grp, seq)
);
CREATE INDEX {{.parked_key_idx}} ON {{.parked}} (grp, key, seq);

-- {{.part_add}}(p_lo) creates the part of [p_lo, p_lo + {{.part_xids}})
-- and attaches it; false when it exists already. p_lo must be a multiple
-- of {{.part_xids}}. ATTACH takes SHARE UPDATE EXCLUSIVE on the log:
-- writers are not blocked. SECURITY DEFINER: only the log's owner may
-- attach parts; callers pass only a number.
CREATE FUNCTION {{.part_add}}(p_lo xid8) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $pgoutbox_fn$
DECLARE
    lo numeric := p_lo::text::numeric;
    part text;
BEGIN
    IF p_lo IS NULL OR mod(lo, {{.part_xids}}) <> 0 THEN
        RAISE EXCEPTION 'pgoutbox: invalid part bound %: want a multiple of {{.part_xids}}', p_lo
            USING ERRCODE = '22023';
    END IF;
    part := format('%I.%I', {{.schema_lit}}, {{.name_lit}} || '_x' || lpad(to_hex(div(lo, {{.part_xids}})::bigint), 10, '0'));
    IF to_regclass(part) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS)', part, {{.log_lit}});
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%L) TO (%L)',
        {{.log_lit}}, part, lo::text, (lo + {{.part_xids}})::text);
    RETURN true;
END
$pgoutbox_fn$;
REVOKE EXECUTE ON FUNCTION {{.part_add}}(xid8) FROM PUBLIC;

-- The first parts: from the part of the current transaction id on, 16
-- parts ({{.part_xids}} ids each) ahead. The ticker adds more as the ids go by.
SELECT {{.part_add}}(((div(pg_current_xact_id()::text::numeric, {{.part_xids}}) + n) * {{.part_xids}})::text::xid8)
FROM generate_series(0, 15) AS n;

-- The baseline tick (1): the log is empty when it is taken, so every
-- event ever written is after it. A group created From Oldest starts here.
INSERT INTO {{.ticks}} (tick_id, snapshot, last_seq, sysid)
SELECT 1, pg_current_snapshot(), 0, (pg_control_system()).system_identifier;
INSERT INTO {{.ticker}} (next_tick) VALUES (2);

-- {{.tick}}(p_token, p_idle) records a tick when one is needed and
-- returns its id (made) or the last tick's (not made). The caller must
-- hold the ticker's lease: the ticker row is locked where the token
-- matches an unexpired lease, else SQLSTATE PGR01 (lease lost). The
-- snapshot is taken by a later statement than that lock, so under READ
-- COMMITTED it is newer than any tick committed before: a tick's snapshot
-- is never older than the tick before it. A snapshot whose xmax is below
-- the last tick's raises PGR02 (snapshot went backwards). The cluster's
-- system identifier is recorded, not checked: pg_upgrade keeps the
-- transaction ids (the snapshots stay valid) under a new identifier, and
-- a cluster whose ids are behind the ticks' is caught by PGR02. A tick is needed
-- when the seq sequence moved, when p_idle passed since the last, or when
-- events became visible whose insert did not move the sequence past the
-- last tick: a transaction that was running at the last tick (in its xip,
-- or at or above its xmax: a snapshot's xmax is the newest finished xid
-- plus one, so a running transaction above it is not in its xip) and has
-- committed since. That probe reads the xid index over the ids that began
-- since the last tick's xmax and the finished ones of its xip.
CREATE FUNCTION {{.tick}}(p_token uuid, p_idle interval, OUT tick_id bigint, OUT made boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $pgoutbox_fn$
DECLARE
    v_next  bigint;
    v_last  record;
    v_snap  pg_snapshot;
    v_seq   bigint;
    v_sysid bigint;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pgoutbox: tick needs READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = '25001';
    END IF;
    SELECT t.next_tick INTO v_next FROM {{.ticker}} AS t
    WHERE t.token = p_token AND t.lease_until > clock_timestamp()
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgoutbox: ticker lease lost' USING ERRCODE = 'PGR01';
    END IF;
    -- A new statement: a new snapshot, taken after the lock was granted.
    SELECT k.tick_id, k.snapshot, k.tick_time, k.last_seq, k.sysid,
           pg_current_snapshot() AS snap,
           coalesce(pg_sequence_last_value(pg_get_serial_sequence({{.log_lit}}, 'seq')), 0) AS seq,
           (pg_control_system()).system_identifier AS sysid_now
    INTO v_last
    FROM {{.ticks}} AS k ORDER BY k.tick_id DESC LIMIT 1;
    v_snap := v_last.snap;
    v_seq := v_last.seq;
    v_sysid := v_last.sysid_now;
    IF pg_snapshot_xmax(v_snap) < pg_snapshot_xmax(v_last.snapshot) THEN
        RAISE EXCEPTION 'pgoutbox: snapshot went backwards: xmax % below tick %''s %',
            pg_snapshot_xmax(v_snap), v_last.tick_id, pg_snapshot_xmax(v_last.snapshot)
            USING ERRCODE = 'PGR02';
    END IF;
    IF v_seq <= v_last.last_seq
       AND clock_timestamp() - v_last.tick_time < p_idle
       -- Two probes, not one OR: the planner turned the OR into a scan of
       -- the whole part's index (every tick, 100 a second when idle).
       AND NOT EXISTS (
           SELECT 1 FROM {{.log}} AS e
           WHERE e.xid >= pg_snapshot_xmax(v_last.snapshot) AND e.xid < pg_snapshot_xmax(v_snap)
             AND pg_visible_in_snapshot(e.xid, v_snap))
       AND NOT EXISTS (
           SELECT 1 FROM {{.log}} AS e
           WHERE e.xid = ANY (ARRAY(
                      SELECT pg_snapshot_xip(v_last.snapshot)
                      EXCEPT SELECT pg_snapshot_xip(v_snap)))
             AND pg_visible_in_snapshot(e.xid, v_snap)) THEN
        tick_id := v_last.tick_id;
        made := false;
        RETURN;
    END IF;
    INSERT INTO {{.ticks}} (tick_id, snapshot, tick_time, last_seq, sysid)
    VALUES (v_next, v_snap, clock_timestamp(), v_seq, v_sysid);
    UPDATE {{.ticker}} SET next_tick = v_next + 1, heartbeat_at = clock_timestamp() WHERE one;
    tick_id := v_next;
    made := true;
END
$pgoutbox_fn$;
REVOKE EXECUTE ON FUNCTION {{.tick}}(uuid, interval) FROM PUBLIC;

---- create above / drop below ----

DROP FUNCTION {{.tick}}(uuid, interval);

DROP FUNCTION {{.part_add}}(xid8);
DROP TABLE {{.parked}};
DROP TABLE {{.parked_keys}};
DROP TABLE {{.cursors}};
DROP TABLE {{.ticker}};
DROP TABLE {{.ticks}};
DROP TABLE {{.log}};
