#!/bin/sh
# Heap size and vacuum time around a retention drain of 1,000,000 SENT
# rows (docs/operations.md, "Retention and vacuum"). Needs psql, go, and
# the pgstattuple extension (contrib). Usage:
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable sh benchmarks/retention/bloat.sh
set -eu
url=${DATABASE_URL:?set DATABASE_URL}
schema=retention_bloat
q() { psql "$url" -X -q -v ON_ERROR_STOP=1 "$@"; }
q -c "DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema; CREATE EXTENSION IF NOT EXISTS pgstattuple;"
DATABASE_URL=$url go run ./cmd/outboxctl migrate -schema $schema >/dev/null
t=$schema.outbox_events
report() {
	echo "== $1"
	q -c "SELECT pg_size_pretty(pg_relation_size('$t')) AS heap, pg_size_pretty(pg_indexes_size('$t')) AS indexes,
		(SELECT count(*) FROM $t) AS live_rows, round(free_percent) AS free_pct, round(dead_tuple_percent) AS dead_pct
		FROM pgstattuple('$t')"
	q -c "SELECT indexrelname, pg_size_pretty(pg_relation_size(indexrelid)) FROM pg_stat_user_indexes WHERE schemaname = '$schema' ORDER BY 1"
}
# Autovacuum off for the measurement, so that the vacuum timed below does
# all the work (with it on, the table's thresholds start one after about
# 5,000 deleted rows, and it runs alongside the deletes).
q -c "ALTER TABLE $t SET (autovacuum_enabled = false)"
# 1,000,000 SENT rows finished two days ago, 100,000 an hour ago; 200-byte
# payloads, as the emitter writes them.
q -c "\\timing on" -c "INSERT INTO $t (id, event_type, status, sent_at, payload, headers)
	SELECT gen_random_uuid(), 'bloat.test', 'SENT',
		now() - CASE WHEN i <= 1000000 THEN interval '48 hours' ELSE interval '1 hour' END,
		convert_to(repeat('x', 200), 'UTF8'), '{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}'
	FROM generate_series(1, 1100000) AS i"
q -c "VACUUM ANALYZE $t"
report "after insert (1.1M rows)"
# The retention job's statement (internal/purge), 5,000 rows a batch,
# until a batch comes back short.
start=$(date +%s.%N)
batches=0
while :; do
	n=$(q -At -c "WITH turn AS (SELECT pg_try_advisory_xact_lock(hashtextextended('pgoutbox.retention:$t', 0)) AS got),
gone AS (
	DELETE FROM $t AS o WHERE o.id = ANY (ARRAY(
		SELECT id FROM $t WHERE (SELECT got FROM turn) AND status = 'SENT' AND coalesce(sent_at, failed_at) < now() - interval '24 hours'
		ORDER BY coalesce(sent_at, failed_at) LIMIT 5000 FOR UPDATE SKIP LOCKED))
	AND o.status = 'SENT' RETURNING 1)
SELECT count(*) FROM gone")
	batches=$((batches + 1))
	[ "$n" -lt 5000 ] && break
done
echo "== deleted 1,000,000 rows in $batches batches: $(echo "$(date +%s.%N) - $start" | bc) s"
report "after the deletes, before vacuum"
q -c "\\timing on" -c "VACUUM (VERBOSE) $t" 2>&1 | grep -E "Time:|tuples:|pages:|index scan|removed" || true
report "after vacuum"
# Refill: 1,000,000 new rows go into the freed space; the heap does not grow.
q -c "INSERT INTO $t (id, event_type, status, sent_at, payload, headers)
	SELECT gen_random_uuid(), 'bloat.test', 'SENT', now(), convert_to(repeat('x', 200), 'UTF8'), '{}'
	FROM generate_series(1, 1000000)"
report "after 1,000,000 new rows"
q -c "DROP SCHEMA $schema CASCADE"
