-- Migration 008's indexes applied by hand to a schema 7 table (run.sh p008).
SET search_path = :s;
DROP INDEX outbox_events_seq_idx, outbox_events_type_idx, outbox_events_aggregate_idx, outbox_events_code_idx;
CREATE INDEX outbox_events_seq_list_idx ON outbox_events (seq) WHERE status <> 'PROCESSING';
CREATE INDEX outbox_events_type_list_idx ON outbox_events (event_type, seq) WHERE status <> 'PROCESSING';
CREATE INDEX outbox_events_agg_list_idx ON outbox_events (aggregate_id, seq) WHERE aggregate_id IS NOT NULL AND status <> 'PROCESSING';
CREATE INDEX outbox_events_code_list_idx ON outbox_events (last_error_code, seq) WHERE last_error_code IS NOT NULL AND status <> 'PROCESSING';
