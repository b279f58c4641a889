package admin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// Counts.DueBlocked started from every FAILED row and probed the order
// index once per key of one: with 100,000 FAILED rows of distinct keys,
// Counts read 314,416 buffers (every heap page of the FAILED rows and
// three index pages per key), making outboxctl status and counts slow on
// a table that keeps its FAILED rows (no RetainFailed). It reads at most
// BlockedCountLimit FAILED rows now, counts at most SentCountLimit rows
// behind them, probes the order index per key (never the whole due
// backlog: flattened, the planner hashed the keys and read every due
// row), and says when its count is a lower bound (DueBlockedLimited).
func TestDueBlockedIsBoundedOnManyFailedKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 606,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	// 100,000 dead letters, 30,000 due PENDING rows and 470,000 SENT
	// rows, each of its own key, then a due PENDING row behind each of
	// the first 5,000 dead letters and 1,000 of unrelated keys.
	for _, stmt := range []string{
		`INSERT INTO outbox_events_dead (id, seq, event_type, aggregate_id, failed_at, last_error_code, next_attempt_at)
SELECT gen_random_uuid(), i, 'type.' || (i % 20), 'agg-' || i, now(), 'handler_error', now() - interval '1 minute'
FROM generate_series(1, 600000) AS i WHERE i % 6 = 0`,
		`INSERT INTO outbox_events_sent (id, seq, event_type, aggregate_id, sent_at, next_attempt_at)
SELECT gen_random_uuid(), i, 'type.' || (i % 20), 'agg-' || i, now(), now() - interval '1 minute'
FROM generate_series(1, 600000) AS i WHERE i % 6 <> 0 AND i % 20 <> 1`,
		`INSERT INTO outbox_events (id, seq, event_type, aggregate_id, next_attempt_at) OVERRIDING SYSTEM VALUE
SELECT gen_random_uuid(), i, 'type.' || (i % 20), 'agg-' || i, now() - interval '1 minute'
FROM generate_series(1, 600000) AS i WHERE i % 6 <> 0 AND i % 20 = 1`,
		`SELECT setval(pg_get_serial_sequence('outbox_events', 'seq'), 600000)`,
	} {
		_, err := db.Pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, aggregate_id, next_attempt_at)
SELECT gen_random_uuid(), 'type.1', CASE WHEN i <= 5000 THEN 'agg-' || (6 * i) ELSE 'other-' || i END, now() - interval '1 minute'
FROM generate_series(1, 6000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE outbox_events, outbox_events_dead, outbox_events_sent`)
	require.NoError(t, err)
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)

	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(100000), c.Failed)
	require.Equal(t, int64(36000), c.Due)
	require.True(t, c.DueBlockedLimited, "more FAILED heads than BlockedCountLimit: a lower bound")
	require.Positive(t, c.DueBlocked)
	require.LessOrEqual(t, c.DueBlocked, int64(5000))

	conn := db.Conn(t)
	// DueBlocked reads at most BlockedCountLimit+1 FAILED rows and probes
	// the order index once per key of one (about three buffers). Counts
	// and Summary read each counted row's index entry, or its heap page
	// when VACUUM could not mark the pages all-visible (other tests' open
	// transactions): their cost follows the rows that are not SENT, and
	// no more with DueBlocked.
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		p := testdb.Explain(t, conn, a.sql.dueBlocked)
		require.Empty(t, bigScans(t, conn, p), "due blocked %s: a sequential scan\n%s", mode, p.Text)
		require.Less(t, p.Buffers, maxPlanBuffers+4*float64(BlockedCountLimit), "due blocked %s: %v buffers\n%s", mode, p.Buffers, p.Text)
		t.Logf("due blocked %s: %v buffers, indexes %v", mode, p.Buffers, p.Indexes)
		for name, stmt := range map[string]string{"counts": a.sql.counts, "summary": a.sql.summary} {
			p := testdb.Explain(t, conn, stmt)
			require.Empty(t, historyScans(t, conn, p), "%s %s: a sequential scan of the history\n%s", name, mode, p.Text)
			t.Logf("%s %s: %v buffers, indexes %v", name, mode, p.Buffers, p.Indexes)
		}
	}
	s, err := a.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, c.DueBlocked, s.Counts.DueBlocked)
	require.True(t, s.Counts.DueBlockedLimited)
}
