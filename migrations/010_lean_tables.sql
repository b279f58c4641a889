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
DROP TABLE {{.sent}};
DROP TABLE {{.dead}};
