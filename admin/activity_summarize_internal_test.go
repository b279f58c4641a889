package admin

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// heapBlocksRe finds the heap blocks a bitmap heap scan read.
var heapBlocksRe = regexp.MustCompile(`Heap Blocks:(?: exact=(\d+))?(?: lossy=(\d+))?`)

// On a history partition no VACUUM summarized (autovacuum off), the
// summarizing function (which each retention pass calls) makes
// Activity's SENT count read a few ranges of the partition rather than
// all of it.
func TestActivityAfterSummarize(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 300,000 history rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	var start time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT date_trunc('hour', now()) - interval '12 hours'`).Scan(&start))
	part := names.QualifiedPartition(start)
	for _, stmt := range []string{
		`SELECT count(*) FROM outbox_events_sent_drop('infinity')`,
		fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s') WITH (autovacuum_enabled = off)`,
			part, names.Sent, start.Format(time.RFC3339), start.Add(24*time.Hour).Format(time.RFC3339)),
		`INSERT INTO outbox_events_sent (id, seq, event_type, status, payload, created_at, sent_at, next_attempt_at)
		SELECT gen_random_uuid(), i, 't', 'SENT', convert_to(repeat('x', 100), 'UTF8'), t, t, t
		FROM generate_series(1, 300000) AS i, LATERAL (SELECT now() - interval '11 hours' + i * interval '39600 seconds' / 300000 AS t) AS s ORDER BY i`,
		`ANALYZE outbox_events_sent`,
		`SELECT outbox_events_sent_summarize()`,
	} {
		_, err = db.Pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)
	rows, err := db.Pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+activitySQL(a.sql.t, a.sql.dead, a.sql.sent, 5*time.Minute))
	require.NoError(t, err)
	var read int64
	var seen bool
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		if m := heapBlocksRe.FindStringSubmatch(line); m != nil {
			seen = true
			for _, n := range m[1:] {
				v, _ := strconv.ParseInt(n, 10, 64)
				read += v
			}
		}
	}
	require.NoError(t, rows.Err())
	require.True(t, seen, "the count reads no bitmap heap scan")
	var pages int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass) / 8192`, part).Scan(&pages))
	t.Logf("Activity read %d heap blocks of the partition's %d pages", read, pages)
	require.Less(t, read, pages/10)
}
