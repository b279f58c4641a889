package purge

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// planStats walks an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) plan tree:
// the relations it scans sequentially, the indexes it uses and the
// shared buffers its top node touched (children included).
type planStats struct {
	seqScans, indexes []string
	buffers           float64
}

func walkPlan(node map[string]any, s *planStats) {
	switch node["Node Type"] {
	case "Seq Scan":
		s.seqScans = append(s.seqScans, node["Relation Name"].(string))
	case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
		s.indexes = append(s.indexes, node["Index Name"].(string))
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		walkPlan(c.(map[string]any), s)
	}
}

// On a table of 1,000,000 rows, nearly all SENT and young (not due), a
// retention batch, a purge batch and a purge's dry-run count reach the due rows through
// the finished index: no sequential scan of the outbox, and buffers in
// proportion to the batch, not to the table; the last, empty batch of a
// drain (the full scan of 14s that §8 of issue 14 measured at 10M rows)
// reads next to nothing. Both plans a prepared statement can get are
// checked: a custom one and the generic one PostgreSQL switches to after
// five executions.
func TestRetentionPlanOnAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 1,000,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at, failed_at, payload)
SELECT gen_random_uuid(), 'plan.test',
	CASE WHEN i <= 5000 THEN 'PENDING' WHEN i <= 10000 THEN 'FAILED' ELSE 'SENT' END,
	CASE WHEN i > 10000 THEN now() - CASE WHEN i <= 32000 THEN interval '48 hours' + i * interval '1 second' ELSE (i % 3600) * interval '1 second' END END,
	CASE WHEN i > 5000 AND i <= 10000 THEN now() - interval '48 hours' END,
	'\x7b7d'
FROM generate_series(1, 1000000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE outbox_events`)
	require.NoError(t, err)
	var pages float64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = 'outbox_events'::regclass`).Scan(&pages))

	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	s := New(names)
	const batch = 1000
	day := (24 * time.Hour).Microseconds()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			conn := db.Conn(t)
			for _, q := range []string{"SET plan_cache_mode = " + mode,
				"PREPARE del(bigint, int, timestamptz, text) AS " + s.sentExcl, "PREPARE purge(bigint, int, timestamptz) AS " + s.sent,
				"PREPARE cnt(bigint, int) AS " + s.sentCount} {
				_, err := conn.Exec(ctx, q)
				require.NoError(t, err)
			}
			run := func(stmt string) (planStats, string) {
				var plan []map[string]any
				require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+stmt).Scan(&plan))
				top := plan[0]["Plan"].(map[string]any)
				var st planStats
				walkPlan(top, &st)
				hit, _ := top["Shared Hit Blocks"].(float64)
				read, _ := top["Shared Read Blocks"].(float64)
				st.buffers = hit + read
				text, _ := json.MarshalIndent(top, "", " ")
				return st, string(text)
			}
			// 22,000 due rows: the custom plans delete 12 batches of 1,000,
			// the generic ones the 10 left, then find none.
			for i := range 6 {
				for name, stmt := range map[string]string{"count": "EXECUTE cnt(%d, %d)",
					"retention": "EXECUTE del(%d, %d, '-infinity', 'plan')", "purge": "EXECUTE purge(%d, %d, '-infinity')"} {
					st, text := run(fmt.Sprintf(stmt, day, batch))
					require.Empty(t, st.seqScans, "%s %d: a sequential scan\n%s", name, i, text)
					require.Contains(t, st.indexes, "outbox_events_finished_idx", "%s %d\n%s", name, i, text)
					// A batch reads and locks each of its rows in the
					// finished index and the heap, then deletes it through
					// the primary key (about 3 levels at 1M rows): about 8
					// buffers a row, however large the table.
					require.Less(t, st.buffers, 10.0*batch, "%s %d: %v buffers of a %v-page table\n%s", name, i, st.buffers, pages, text)
					if mode == "force_generic_plan" && i == 5 { // the drain's last, empty batches
						require.Less(t, st.buffers, 1000.0, "%s %d: an empty batch read %v buffers\n%s", name, i, st.buffers, text)
					}
					t.Logf("%s %s %d: %v buffers (table: %v pages)", mode, name, i, st.buffers, pages)
				}
			}
		})
	}
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'SENT' AND sent_at < now() - interval '1 day'`).Scan(&left))
	require.Zero(t, left, "due rows left after both runs")
}
