package retention_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/retention"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// runPasses runs the retention job of db until passes passes have ended,
// and returns its log and the errors it reported.
func runPasses(t *testing.T, db *testdb.DB, passes int) (string, []error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testdb.LogBuffer{}
	var mu sync.Mutex
	var errs []error
	started := 0
	job := retention.New(retention.Config{
		Pool: db.Pool, Table: db.Table(), RetainSent: 7 * 24 * time.Hour, RetentionInterval: time.Millisecond,
		RetentionBatchSize: 1000, OpTimeout: time.Minute, Now: time.Now,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ErrorFunc: func(_ string, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		},
		PassFunc: func() {
			if started++; started > passes {
				cancel()
			}
		},
		SkippedFunc: func() {},
		DeletedFunc: func(outbox.Status, int64) {},
	})
	job.Run(ctx)
	mu.Lock()
	defer mu.Unlock()
	return logs.String(), errs
}

// heapBlocks returns the heap blocks a count of the last minute's SENT
// events reads through the history's BRIN index, and the history's pages.
func heapBlocks(t *testing.T, db *testdb.DB) (read, pages int64) {
	t.Helper()
	ctx := context.Background()
	conn := db.Conn(t)
	_, err := conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	var plan string
	require.NoError(t, conn.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		SELECT count(*) FROM outbox_events_sent WHERE sent_at >= now() - interval '1 minute'`).Scan(&plan))
	require.Contains(t, plan, `"Bitmap Index Scan"`)
	var nodes []map[string]any
	require.NoError(t, json.Unmarshal([]byte(plan), &nodes))
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		for _, k := range []string{"Exact Heap Blocks", "Lossy Heap Blocks"} {
			if v, ok := n[k].(float64); ok {
				read += int64(v)
			}
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(nodes[0]["Plan"].(map[string]any))
	require.NoError(t, conn.QueryRow(ctx, `SELECT sum(pg_relation_size(inhrelid)) / current_setting('block_size')::bigint
		FROM pg_inherits WHERE inhparent = 'outbox_events_sent'::regclass`).Scan(&pages))
	return read, pages
}

// One retention pass summarizes the full ranges of the history's BRIN
// index that no VACUUM summarized: a count of the last minute's SENT
// events then reads a few ranges, not the whole partition. (The rows
// land in the default partition, which has no time partition for today
// here; its B-tree on sent_at is dropped so that the count reads the
// BRIN index, as it does on a time partition.)
func TestPassSummarizesTheHistoryIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 300,000 history rows")
	}
	t.Parallel()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(context.Background(), `DROP INDEX outbox_events_sent_def_idx`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `INSERT INTO outbox_events_sent (id, seq, event_type, status, payload, created_at, sent_at, next_attempt_at)
		SELECT gen_random_uuid(), i, 't', 'SENT', convert_to(repeat('x', 100), 'UTF8'), t, t, t
		FROM generate_series(1, 300000) AS i, LATERAL (SELECT now() - (300000 - i) * interval '10 milliseconds' AS t) AS s ORDER BY i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `ANALYZE outbox_events_sent`)
	require.NoError(t, err)

	logs, errs := runPasses(t, db, 1)
	require.Empty(t, errs)
	require.NotContains(t, logs, "summarize")
	read, pages := heapBlocks(t, db)
	t.Logf("after one pass, a minute of 50 read %d of the history's %d pages", read, pages)
	require.Greater(t, pages, int64(1000))
	require.Less(t, read, pages/10, "the count read most of the history: its ranges are not summarized")
}

// Without the summarizing function (a schema older than version 13) the
// pass goes on and logs one WARN, however many passes fail the same way.
func TestPassWithoutTheSummarizingFunction(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(context.Background(), `DROP FUNCTION outbox_events_sent_summarize()`)
	require.NoError(t, err)
	logs, errs := runPasses(t, db, 3)
	require.Empty(t, errs)
	require.Equal(t, 1, strings.Count(logs, "could not summarize"), logs)
	require.Equal(t, 3, strings.Count(logs, "retention pass"), logs)
}
