-- Per-row cost of a heartbeat renewal of n held rows, on the tables run.sh left
-- (s16_base, s16_p008): psql -f renew.sql. The rows are taken from PENDING
-- ones and marked PROCESSING first (not measured).
CREATE OR REPLACE FUNCTION pg_temp.renew(t text, n int) RETURNS TABLE (wal_rec numeric, wal_b numeric, fpi numeric, hit numeric) LANGUAGE plpgsql AS $$
DECLARE tok uuid := gen_random_uuid(); ids uuid[]; j json; toks uuid[];
BEGIN
  EXECUTE format($q$UPDATE %1$s SET status = 'PROCESSING', lock_token = $1, lease_until = now() + interval '1 hour', locked_at = now()
    WHERE id = ANY (ARRAY(SELECT id FROM %1$s WHERE status = 'PENDING' LIMIT $2))$q$, t) USING tok, n;
  EXECUTE format('SELECT array_agg(id) FROM %s WHERE lock_token = $1', t) INTO ids USING tok;
  toks := array_fill(tok, ARRAY[cardinality(ids)]);
  EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) ' || format($q$WITH req AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[]) AS r(id, token)
), locked AS MATERIALIZED (
	SELECT id FROM %1$s WHERE id = ANY (ARRAY(SELECT unnest($1::uuid[]))) FOR NO KEY UPDATE SKIP LOCKED
), changed AS (
	UPDATE %1$s AS o
	SET lease_until = now() + $3::bigint * interval '1 microsecond', heartbeat_at = now()
	FROM req AS x
	WHERE o.id = ANY (ARRAY(SELECT id FROM locked)) AND o.id = x.id AND o.lock_token = x.token
		AND (o.status || '') = 'PROCESSING' AND clock_timestamp() < o.lease_until
	RETURNING o.id, o.lock_token
)
SELECT id, lock_token, true FROM changed$q$, t) INTO j USING ids, toks, 60000000::bigint;
  RETURN QUERY SELECT round((j->0->'Plan'->>'WAL Records')::numeric / cardinality(ids), 2), round((j->0->'Plan'->>'WAL Bytes')::numeric / cardinality(ids)),
    (j->0->'Plan'->>'WAL FPI')::numeric, round((j->0->'Plan'->>'Shared Hit Blocks')::numeric / cardinality(ids), 2);
END $$;
SELECT 'base' AS v, * FROM pg_temp.renew('s16_base.outbox_events', 2000);
SELECT 'p008' AS v, * FROM pg_temp.renew('s16_p008.outbox_events', 2000);
SELECT 'base' AS v, * FROM pg_temp.renew('s16_base.outbox_events', 2000);
SELECT 'p008' AS v, * FROM pg_temp.renew('s16_p008.outbox_events', 2000);
