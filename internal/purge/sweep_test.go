package purge_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// sqlname.Columns are the outbox table's columns in table order, and the
// dead letters' and the history's.
func TestColumnsAreTheTables(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, table := range []string{"outbox_events", "outbox_events_dead", "outbox_events_sent", "outbox_events_sent_default"} {
		var cols []string
		require.NoError(t, f.db.Pool.QueryRow(context.Background(), `SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table).Scan(&cols))
		require.Equal(t, sqlname.Columns, cols, table)
	}
}

// Sweep moves the strays, SENT rows to the history and FAILED rows to
// the dead letters, oldest (seq) first, at most limit a call, every
// column carried over (a missing sent_at or failed_at becomes now());
// PENDING and PROCESSING rows stay; a stray another transaction holds
// waits for the next sweep.
func TestSweepMovesStraysOfBothKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	_, err := f.db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at, failed_at, attempts, last_error_code,
	lock_token, lease_until, aggregate_id, headers, payload)
SELECT gen_random_uuid(), 'sweep.' || i, s, CASE WHEN s = 'SENT' AND i <> 4 THEN now() - i * interval '1 hour' END,
	CASE WHEN s = 'FAILED' AND i <> 9 THEN now() - i * interval '1 hour' END, i, CASE WHEN s = 'FAILED' THEN 'boom' END,
	CASE WHEN s = 'PROCESSING' THEN gen_random_uuid() END, CASE WHEN s = 'PROCESSING' THEN now() + interval '1 hour' END,
	'agg-' || i, jsonb_build_object('n', i), '\x7b7d'
FROM generate_series(1, 12) AS i,
	LATERAL (SELECT (ARRAY['SENT', 'FAILED', 'PENDING', 'PROCESSING'])[1 + i % 4] AS s) AS st`)
	require.NoError(t, err)
	snapshot := func(table string) map[string]string {
		rows, err := f.db.Pool.Query(ctx, `SELECT id::text, (to_jsonb(o) - 'sent_at' - 'failed_at')::text FROM `+table+` AS o`)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var id, row string
			require.NoError(t, rows.Scan(&id, &row))
			out[id] = row
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := snapshot("outbox_events")

	holder, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT 1 FROM outbox_events WHERE event_type = 'sweep.5' FOR UPDATE`) // a FAILED row
	require.NoError(t, err)

	moved, err := purge.Sweep(ctx, f.db.Pool, f.names, 2)
	require.NoError(t, err)
	require.Equal(t, 2, moved)
	var types []string
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT array_agg(event_type ORDER BY seq) FROM outbox_events_sent`).Scan(&types))
	require.Equal(t, []string{"sweep.4", "sweep.8"}, types, "the oldest SENT strays first")

	moved, err = purge.Sweep(ctx, f.db.Pool, f.names, 100)
	require.NoError(t, err)
	require.Equal(t, 3, moved, "the third SENT stray and the two FAILED ones not held")
	require.NoError(t, holder.Rollback(ctx))
	moved, err = purge.Sweep(ctx, f.db.Pool, f.names, 100)
	require.NoError(t, err)
	require.Equal(t, 1, moved)
	moved, err = purge.Sweep(ctx, f.db.Pool, f.names, 100)
	require.NoError(t, err)
	require.Zero(t, moved)

	sent, dead, hot := snapshot("outbox_events_sent"), snapshot("outbox_events_dead"), snapshot("outbox_events")
	require.Len(t, sent, 3)
	require.Len(t, dead, 3)
	require.Len(t, hot, 6)
	for id, row := range before {
		got, ok := sent[id]
		if !ok {
			got, ok = dead[id]
		}
		if !ok {
			got = hot[id]
		}
		require.Equal(t, row, got, "every column but the times carried over")
	}
	var missing int
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_events_sent WHERE sent_at IS NULL OR sent_at > now() - interval '1 minute' AND event_type <> 'sweep.4')
		+ (SELECT count(*) FROM outbox_events_dead WHERE failed_at IS NULL OR failed_at > now() - interval '1 minute' AND event_type <> 'sweep.9')`).Scan(&missing))
	require.Zero(t, missing, "sent_at and failed_at kept, set to now() where missing")
	var stamped time.Time
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT failed_at FROM outbox_events_dead WHERE event_type = 'sweep.9'`).Scan(&stamped))
	require.False(t, stamped.IsZero())
}

// A FAILED stray whose id is a dead letter already (an event emitted
// again with a dead letter's id, failed by a dispatcher of version 9)
// replaces that dead letter: refused, it would fail every sweep.
func TestSweepReplacesADeadLetterOfTheSameID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := "0190c5a0-0000-7000-8000-0000000000aa"
	_, err := f.db.Pool.Exec(ctx, `INSERT INTO outbox_events_dead (id, seq, event_type, failed_at) VALUES ($1, 1, 'old', now())`, id)
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, failed_at) VALUES ($1, 'new', 'FAILED', now())`, id)
	require.NoError(t, err)
	moved, err := purge.Sweep(ctx, f.db.Pool, f.names, 10)
	require.NoError(t, err)
	require.Equal(t, 1, moved)
	var typ string
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT event_type FROM outbox_events_dead WHERE id = $1`, id).Scan(&typ))
	require.Equal(t, "new", typ)
}
