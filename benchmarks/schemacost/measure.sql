-- Per-event cost of pgoutbox's statements on one outbox table, from
-- EXPLAIN (ANALYZE, BUFFERS, WAL) of each statement as pgoutbox sends it.
CREATE SCHEMA IF NOT EXISTS s16util;
CREATE TABLE IF NOT EXISTS s16util.results (
    variant text, phase text, events bigint, stmts bigint,
    wal_bytes numeric, wal_records numeric, wal_fpi numeric,
    hit numeric, rd numeric, dirtied numeric, written numeric, exec_ms numeric,
    at timestamptz DEFAULT clock_timestamp());



-- run one EXPLAIN and return the plan's top node with execution time
CREATE OR REPLACE FUNCTION s16util.add(INOUT acc jsonb, j json) LANGUAGE plpgsql AS $$
DECLARE p json := j->0->'Plan';
BEGIN
  acc := jsonb_build_object(
    'n', coalesce((acc->>'n')::numeric, 0) + 1,
    'wal_bytes', coalesce((acc->>'wal_bytes')::numeric, 0) + (p->>'WAL Bytes')::numeric,
    'wal_records', coalesce((acc->>'wal_records')::numeric, 0) + (p->>'WAL Records')::numeric,
    'wal_fpi', coalesce((acc->>'wal_fpi')::numeric, 0) + (p->>'WAL FPI')::numeric,
    'hit', coalesce((acc->>'hit')::numeric, 0) + (p->>'Shared Hit Blocks')::numeric,
    'rd', coalesce((acc->>'rd')::numeric, 0) + (p->>'Shared Read Blocks')::numeric,
    'dirtied', coalesce((acc->>'dirtied')::numeric, 0) + (p->>'Shared Dirtied Blocks')::numeric,
    'written', coalesce((acc->>'written')::numeric, 0) + (p->>'Shared Written Blocks')::numeric,
    'exec_ms', coalesce((acc->>'exec_ms')::numeric, 0) + (j->0->>'Execution Time')::numeric);
END $$;

CREATE OR REPLACE PROCEDURE s16util.save(variant text, phase text, events bigint, acc jsonb) LANGUAGE sql AS $$
  INSERT INTO s16util.results (variant, phase, events, stmts, wal_bytes, wal_records, wal_fpi, hit, rd, dirtied, written, exec_ms)
  VALUES (variant, phase, events, (acc->>'n')::bigint, (acc->>'wal_bytes')::numeric, (acc->>'wal_records')::numeric,
    (acc->>'wal_fpi')::numeric, (acc->>'hit')::numeric, (acc->>'rd')::numeric, (acc->>'dirtied')::numeric,
    (acc->>'written')::numeric, (acc->>'exec_ms')::numeric);
$$;

-- measure(variant, table, n, form): n single-event emits (form 'unnest' or
-- 'values'), then claims of 100 until none is left; even batches complete
-- as SENT, odd batches retry (PENDING in an hour).
CREATE OR REPLACE PROCEDURE s16util.measure(variant text, t text, n int, form text DEFAULT 'unnest', rep int DEFAULT 30, hdr text DEFAULT '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}') LANGUAGE plpgsql AS $$
DECLARE
  ins text; claim text; sent text; retry text; j json; tok uuid; ids uuid[]; b int := 0;
  a_ins jsonb; a_claim jsonb; a_sent jsonb; a_retry jsonb; n_claim bigint := 0; n_sent bigint := 0; n_retry bigint := 0;
BEGIN
  IF form = 'unnest' THEN
    ins := format($q$INSERT INTO %s (id, event_type, aggregate_type, aggregate_id,
	partition_key, idempotency_key, content_type, payload, headers, next_attempt_at)
SELECT u.id, u.event_type, NULLIF(u.aggregate_type, ''), NULLIF(u.aggregate_id, ''),
	NULLIF(u.partition_key, ''), NULLIF(u.idempotency_key, ''), NULLIF(u.content_type, ''),
	u.payload, u.headers::jsonb, now() + u.delay_us * interval '1 microsecond'
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
	$7::text[], $8::bytea[], $9::text[], $10::bigint[])
	AS u(id, event_type, aggregate_type, aggregate_id, partition_key, idempotency_key,
	content_type, payload, headers, delay_us)$q$, t);
  ELSE
    ins := format($q$INSERT INTO %s (id, event_type, aggregate_type, aggregate_id,
	partition_key, idempotency_key, content_type, payload, headers, next_attempt_at)
VALUES (($1::uuid[])[1], ($2::text[])[1], NULLIF(($3::text[])[1], ''), NULLIF(($4::text[])[1], ''),
	NULLIF(($5::text[])[1], ''), NULLIF(($6::text[])[1], ''), NULLIF(($7::text[])[1], ''),
	($8::bytea[])[1], ($9::text[])[1]::jsonb, now() + ($10::bigint[])[1] * interval '1 microsecond')$q$, t);
  END IF;
  claim := format($q$WITH due AS MATERIALIZED (
	SELECT id FROM %1$s
	WHERE status = 'PENDING' AND next_attempt_at <= now()
	ORDER BY next_attempt_at, seq
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), ids AS MATERIALIZED (
	SELECT ARRAY(SELECT id FROM due) AS a
)
UPDATE %1$s AS o
SET status = 'PROCESSING', lock_token = $2, lock_owner = $3, locked_at = now(), heartbeat_at = now(),
	lease_until = now() + $4::bigint * interval '1 microsecond',
	started_at = CASE WHEN o.recoveries = 0 THEN now() END
WHERE o.id = ANY ((SELECT a FROM ids)::uuid[])
RETURNING o.id, o.event_type, coalesce(o.aggregate_type, ''), coalesce(o.aggregate_id, ''),
	coalesce(o.partition_key, ''), coalesce(o.idempotency_key, ''), coalesce(o.content_type, ''),
	o.payload, o.headers, o.attempts, o.snoozes, o.created_at, o.lease_until, o.next_attempt_at, o.seq, o.started_at IS NOT NULL, o.recoveries > 0$q$, t);
  sent := format($q$UPDATE %1$s AS o
SET status = 'SENT', sent_at = now(), attempts = o.attempts + 1, lease_until = NULL, heartbeat_at = NULL
WHERE o.id = ANY (ARRAY(SELECT unnest($1::uuid[]))) AND o.lock_token = $2::uuid AND (o.status || '') = 'PROCESSING' AND clock_timestamp() < o.lease_until
RETURNING o.id$q$, t);
  retry := format($q$UPDATE %1$s AS o
SET status = CASE WHEN x.final THEN 'FAILED' ELSE 'PENDING' END,
	attempts = o.attempts + CASE WHEN x.snooze THEN 0 ELSE 1 END,
	snoozes = o.snoozes + CASE WHEN x.snooze THEN 1 ELSE 0 END,
	next_attempt_at = CASE WHEN x.final THEN o.next_attempt_at
		ELSE now() + x.delay * interval '1 microsecond' END,
	failed_at = CASE WHEN x.final THEN now() END,
	last_error_code = CASE WHEN x.snooze THEN o.last_error_code ELSE x.code END,
	last_error = CASE WHEN x.snooze THEN o.last_error ELSE left(x.message, 2048) END, lease_until = NULL, heartbeat_at = NULL,
	attempt_log = CASE WHEN x.snooze THEN o.attempt_log ELSE CASE WHEN jsonb_array_length(o.attempt_log) >= 10 THEN o.attempt_log - 0 ELSE o.attempt_log END || jsonb_build_array(jsonb_build_object('attempt', o.attempts + 1, 'outcome', CASE WHEN x.final THEN 'failed' ELSE 'retry' END, 'code', x.code, 'message', left(x.message, 512), 'owner', o.lock_owner, 'started', o.locked_at, 'ended', now())) END
FROM unnest($1::uuid[], $3::text[], $4::text[], $5::bool[], $6::bigint[], $7::bool[])
	AS x(id, code, message, final, delay, snooze)
WHERE o.id = ANY (ARRAY(SELECT unnest($1::uuid[]))) AND o.lock_token = $2::uuid AND (o.status || '') = 'PROCESSING' AND clock_timestamp() < o.lease_until AND o.id = x.id
RETURNING o.id, o.status, o.attempts, o.next_attempt_at$q$, t);

  FOR i IN 1..n LOOP
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) ' || ins INTO j USING
      ARRAY[(lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '7' || substr(md5(random()::text), 1, 19))::uuid],
      ARRAY['order.created'], ARRAY['order'], ARRAY['order-' || (random() * 1e9)::bigint], ARRAY[''], ARRAY[''],
      ARRAY['application/json'], ARRAY[convert_to(repeat('{"k":"v"}', rep), 'UTF8')],
      ARRAY[hdr], ARRAY[0::bigint];
    a_ins := s16util.add(a_ins, j);
    COMMIT;
  END LOOP;
  CALL s16util.save(variant, 'insert', n, a_ins);
  COMMIT;
  LOOP
    tok := gen_random_uuid();
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) ' || claim INTO j USING 100, tok, 'bench', 30000000::bigint;

    EXECUTE format('SELECT array_agg(id) FROM %s WHERE lock_token = $1 AND status = ''PROCESSING''', t) INTO ids USING tok;
    EXIT WHEN ids IS NULL;
    a_claim := s16util.add(a_claim, j); n_claim := n_claim + cardinality(ids);
    COMMIT;
    IF b % 2 = 0 THEN
      EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) ' || sent INTO j USING ids, tok;
      a_sent := s16util.add(a_sent, j); n_sent := n_sent + cardinality(ids);
    ELSE
      EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) ' || retry INTO j USING ids, tok,
        array_fill('handler_error'::text, ARRAY[cardinality(ids)]), array_fill('boom'::text, ARRAY[cardinality(ids)]),
        array_fill(false, ARRAY[cardinality(ids)]), array_fill(3600000000::bigint, ARRAY[cardinality(ids)]),
        array_fill(false, ARRAY[cardinality(ids)]);
      a_retry := s16util.add(a_retry, j); n_retry := n_retry + cardinality(ids);
    END IF;
    COMMIT;
    b := b + 1;
  END LOOP;
  CALL s16util.save(variant, 'claim', n_claim, a_claim);
  CALL s16util.save(variant, 'sent', n_sent, a_sent);
  CALL s16util.save(variant, 'retry', n_retry, a_retry);
  COMMIT;
END $$;


CREATE OR REPLACE VIEW s16util.per_event AS
SELECT variant, phase, events,
  round(wal_bytes / events) AS wal_b, round(wal_records / events, 2) AS wal_rec, wal_fpi AS fpi,
  round(hit / events, 2) AS hit, round(dirtied / events, 2) AS dirtied, round(exec_ms * 1000 / events, 1) AS exec_us, at
FROM s16util.results;
