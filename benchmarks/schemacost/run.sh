#!/bin/bash
# Issue 16's tool, kept to reproduce benchmarks/analysis.md's schema 7/8
# figures. Issue 25's WAL per transition on the current schema is a case of
# the Go suite: `go run ./benchmarks -case walcost` (part of `make bench`).
# run.sh VARIANT N [form] [rep] [hdr]: create the outbox in schema s16_VARIANT
# with $OUTBOXCTL migrate, change it as VARIANT says, and measure N events
# with s16util.measure (measure.sql, loaded first). The issue 16 figures
# (benchmarks/analysis.md) were taken with an outboxctl built from main at
# 3c708e3, schema version 7, so "base" is version 7 and "p008" applies
# migration 008's indexes by hand; the no_* variants drop version 7 indexes.
# form is unnest (the emitter's statement) or values; rep is the payload
# size in 9-byte repetitions; hdr the headers. Drops s16_VARIANT first.
U=${PGOUTBOX_TEST_DATABASE_URL:?set PGOUTBOX_TEST_DATABASE_URL}
v=$1; n=$2; form=${3:-unnest}; rep=${4:-30}; hdr=${5:-'{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'}
s=s16_$v; T=$s.outbox_events; p=outbox_events
psql "$U" -q -c "DROP SCHEMA IF EXISTS $s CASCADE" 2>/dev/null
${OUTBOXCTL:-outboxctl} migrate -url "$U" -schema $s -table outbox_events >/dev/null || exit 1
case $v in
  base|values|small) ;;
  no_seq|no_type|no_aggregate|no_code|no_failed|no_type_due|no_order|no_finished) psql "$U" -q -c "DROP INDEX $s.${p}_${v#no_}_idx" ;;
  ff100) psql "$U" -q -c "ALTER TABLE $T SET (fillfactor = 100)" ;;
  no_checks) psql "$U" -q -c "ALTER TABLE $T DROP CONSTRAINT ${p}_status_check, DROP CONSTRAINT ${p}_lease_check, DROP CONSTRAINT ${p}_attempts_check, DROP CONSTRAINT ${p}_log_check, DROP CONSTRAINT ${p}_error_check" ;;
  seqcache) psql "$U" -q -c "ALTER TABLE $T ALTER COLUMN seq SET CACHE 100" ;;
  minimal_idx) psql "$U" -q -c "DROP INDEX $s.${p}_seq_idx, $s.${p}_type_idx, $s.${p}_aggregate_idx, $s.${p}_code_idx, $s.${p}_failed_idx, $s.${p}_type_due_idx, $s.${p}_order_idx, $s.${p}_finished_idx" ;;
  p008*) psql "$U" -q -v ON_ERROR_STOP=1 -f $(dirname "$0")/$v.sql -v s=$s ;;
esac
psql "$U" -q -c "CHECKPOINT"; psql "$U" -q -v ON_ERROR_STOP=1 -c "CALL s16util.measure('$v','$T',$n,'$form',$rep,'$hdr')"
psql "$U" -Atc "SELECT '$v', c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid=c.relnamespace WHERE n.nspname='$s' AND c.relkind IN ('r','i') ORDER BY 2" >> ${SIZES:-/dev/stdout}
