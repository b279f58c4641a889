package purge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// On 1,000,000 dead letters, nearly all young (not due), a retention
// batch, a purge batch and a purge's dry-run count reach the due rows
// through the dead time index: no sequential scan, and buffers in
// proportion to the batch, not to the table; the last, empty batch of a
// drain reads next to nothing. Both plans a prepared statement can get
// are checked: a custom one and the generic one PostgreSQL switches to
// after five executions.
func TestRetentionPlanOnAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 1,000,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events_dead (id, seq, event_type, status, failed_at, payload)
SELECT gen_random_uuid(), i, 'plan.test', 'FAILED',
	now() - CASE WHEN i <= 22000 THEN interval '48 hours' + i * interval '1 second' ELSE (i % 3600) * interval '1 second' END,
	'\x7b7d'
FROM generate_series(1, 1000000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE outbox_events_dead`)
	require.NoError(t, err)
	var pages float64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = 'outbox_events_dead'::regclass`).Scan(&pages))

	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	batchSQL, exclSQL, countSQL := purge.New(names).FailedStatements()
	const batch = 1000
	day := (24 * time.Hour).Microseconds()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			conn := db.Conn(t)
			for _, q := range []string{"SET plan_cache_mode = " + mode,
				"PREPARE del(bigint, int, timestamptz, text) AS " + exclSQL, "PREPARE purge(bigint, int, timestamptz) AS " + batchSQL,
				"PREPARE cnt(bigint, int) AS " + countSQL} {
				_, err := conn.Exec(ctx, q)
				require.NoError(t, err)
			}
			// 22,000 due rows: the custom plans delete 12 batches of 1,000,
			// the generic ones the 10 left, then find none.
			for i := range 6 {
				for name, stmt := range map[string]string{"count": "EXECUTE cnt(%d, %d)",
					"retention": "EXECUTE del(%d, %d, '-infinity', 'plan')", "purge": "EXECUTE purge(%d, %d, '-infinity')"} {
					st := testdb.Explain(t, conn, fmt.Sprintf(stmt, day, batch))
					require.Empty(t, st.SeqScans, "%s %d: a sequential scan\n%s", name, i, st.Text)
					require.Contains(t, st.Indexes, "outbox_events_dead_time_idx", "%s %d\n%s", name, i, st.Text)
					// A batch reads and locks each of its rows in the time
					// index and the heap, then deletes it through the
					// primary key: about 8 buffers a row, however large
					// the table.
					require.Less(t, st.Buffers, 10.0*batch, "%s %d: %v buffers of a %v-page table\n%s", name, i, st.Buffers, pages, st.Text)
					if mode == "force_generic_plan" && i == 5 { // the drain's last, empty batches
						require.Less(t, st.Buffers, 1000.0, "%s %d: an empty batch read %v buffers\n%s", name, i, st.Buffers, st.Text)
					}
					t.Logf("%s %s %d: %v buffers (table: %v pages)", mode, name, i, st.Buffers, pages)
				}
			}
		})
	}
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events_dead WHERE failed_at < now() - interval '1 day'`).Scan(&left))
	require.Zero(t, left, "due rows left after both runs")
}

// On an outbox table of 1,000,000 PENDING rows and 2,000 strays, a sweep
// finds its strays through the stray index (no sequential scan, buffers
// in proportion to its batch); a sweep that finds none reads about one
// buffer per row moved since the last vacuum (their index entries stay
// until vacuum removes them, or a scan marks them dead once no snapshot
// can see them), not the table.
func TestSweepPlanOnAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 1,000,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at, next_attempt_at, payload)
SELECT gen_random_uuid(), 'plan.test', CASE WHEN i % 500 = 0 THEN 'SENT' ELSE 'PENDING' END,
	CASE WHEN i % 500 = 0 THEN now() END, now() + interval '1 hour', '\x7b7d'
FROM generate_series(1, 1000000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE outbox_events`)
	require.NoError(t, err)
	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	stmt := purge.SweepSQL(names, "SENT", names.Sent, "sent_at", "")
	conn := db.Conn(t)
	for i, left := range []int{1000, 0, 0} {
		st := testdb.Explain(t, conn, stmt, 1000)
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'SENT'`).Scan(&n))
		require.Equal(t, left, n, "strays left after sweep %d", i)
		require.NotContains(t, st.SeqScans, "outbox_events", "sweep %d\n%s", i, st.Text)
		require.Contains(t, st.Indexes, "outbox_events_stray_idx", "sweep %d\n%s", i, st.Text)
		require.Less(t, st.Buffers, 30.0*1000, "sweep %d\n%s", i, st.Text)
		if i == 2 {
			require.Less(t, st.Buffers, 2000.0+100, "the empty sweep\n%s", st.Text)
		}
		t.Logf("sweep %d: %v buffers", i, st.Buffers)
	}
}
