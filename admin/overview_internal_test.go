package admin

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// The overview's shape, as seedOverview writes it.
const (
	overviewSent       = 980_000
	overviewFailed     = 10_000
	overviewPending    = 9_900
	overviewProcessing = 100
)

// seedOverview fills the outbox of db with 1,000,000 events as an
// operator console sees a busy outbox: 980,000 SENT over the last 24
// hours in hour-long partitions (in sent_at order, as completions append
// them; every 50th retried once a second before it was sent), 10,000 dead
// letters failed over the same day (three codes, each the FAILED head of
// its key), 9,900 PENDING rows due in the last ten minutes and 100
// PROCESSING ones held by three replicas; 100-byte payloads; vacuumed and
// analyzed, so that the BRIN index on sent_at summarizes the history.
func seedOverview(tb testing.TB, db *testdb.DB) {
	tb.Helper()
	ctx := context.Background()
	// Hours that start half an hour before now: the windows of one and
	// fifteen minutes start in the newest one, which holds half an hour
	// of rows, whatever the time of day the test runs.
	hourlyPartitions(tb, db, "date_trunc('minute', now()) - interval '30 minutes'", -25, 1)
	retry := `CASE WHEN i %% 50 = 3 THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'outcome', 'retry',
		'code', 'handler_error', 'message', 'm', 'owner', 'w', 'started', %[1]s - interval '2 seconds',
		'ended', %[1]s - interval '1 second')) ELSE '[]' END`
	for _, stmt := range []string{
		fmt.Sprintf(`INSERT INTO outbox_events_sent (id, seq, event_type, aggregate_id, status, payload, created_at, sent_at,
	attempts, last_error_code, attempt_log, next_attempt_at)
SELECT gen_random_uuid(), i, 'type.' || (i %% 20), 'agg-' || (i %% 100000), 'SENT', convert_to(repeat('x', 100), 'UTF8'),
	t - interval '2 seconds', t, (i %% 50 = 3)::int, CASE WHEN i %% 50 = 3 THEN 'handler_error' END, %s, t - interval '2 seconds'
FROM generate_series(1, %d) AS i, LATERAL (SELECT now() - interval '24 hours' + i * interval '86400 seconds' / %[2]d AS t) AS s
ORDER BY i`, fmt.Sprintf(retry, "t"), overviewSent),
		fmt.Sprintf(`INSERT INTO outbox_events_dead (id, seq, event_type, aggregate_id, status, payload, failed_at, last_error_code,
	attempts, attempt_log, next_attempt_at)
SELECT gen_random_uuid(), %[1]d + i, 'type.' || (i %% 20), 'dead-' || i, 'FAILED', convert_to(repeat('x', 100), 'UTF8'),
	t, (ARRAY['handler_error', 'timeout', 'publish_error'])[1 + i %% 3], 5, %[3]s, t - interval '1 minute'
FROM generate_series(1, %[2]d) AS i, LATERAL (SELECT now() - i * interval '86400 seconds' / %[2]d AS t) AS s`,
			overviewSent, overviewFailed, fmt.Sprintf(retry, "t")),
		fmt.Sprintf(`INSERT INTO outbox_events (id, seq, event_type, aggregate_id, payload, next_attempt_at) OVERRIDING SYSTEM VALUE
SELECT gen_random_uuid(), %d + i, 'type.' || (i %% 20), CASE WHEN i %% 100 = 0 THEN 'dead-' || i ELSE 'agg-' || i END,
	convert_to(repeat('x', 100), 'UTF8'), now() - (i %% 600) * interval '1 second'
FROM generate_series(1, %d) AS i`, overviewSent+overviewFailed, overviewPending),
		fmt.Sprintf(`INSERT INTO outbox_events (id, seq, event_type, status, payload, lock_token, lock_owner, locked_at,
	heartbeat_at, lease_until) OVERRIDING SYSTEM VALUE
SELECT gen_random_uuid(), %d + i, 'type.' || (i %% 20), 'PROCESSING', convert_to(repeat('x', 100), 'UTF8'), gen_random_uuid(),
	'replica-' || (i %% 3), now() - interval '5 seconds', now() - interval '1 second', now() + interval '30 seconds'
FROM generate_series(1, %d) AS i`, overviewSent+overviewFailed+overviewPending, overviewProcessing),
		`SELECT setval(pg_get_serial_sequence('outbox_events', 'seq'), 1000000)`,
		`VACUUM ANALYZE outbox_events, outbox_events_dead, outbox_events_sent`,
	} {
		_, err := db.Pool.Exec(ctx, stmt)
		require.NoError(tb, err)
	}
}

// partitionName matches a history time partition's name.
var partitionName = regexp.MustCompile(`_s\d{12}$`)

// partitionTimeIndex returns the name of the BRIN index on sent_at of
// the history partition that holds at.
func partitionTimeIndex(t *testing.T, conn *pgx.Conn, at time.Time) string {
	t.Helper()
	var name string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT i.relname FROM pg_inherits AS h
		JOIN pg_class AS p ON p.oid = h.inhrelid JOIN pg_index AS x ON x.indrelid = p.oid
		JOIN pg_class AS i ON i.oid = x.indexrelid JOIN pg_am AS am ON am.oid = i.relam
		WHERE h.inhparent = 'outbox_events_sent'::regclass AND am.amname = 'brin'
			AND $1::timestamptz >= (regexp_match(pg_get_expr(p.relpartbound, p.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz
			AND $1::timestamptz < (regexp_match(pg_get_expr(p.relpartbound, p.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz`,
		at).Scan(&name))
	return name
}

// On the overview's million rows (seedOverview), every statement of the
// console's overview (Summary, Activity over its longest window,
// BlockedKeys, PendingByType) reads indexes, never a history partition
// whose range starts before the window, and a bounded number of buffers.
func TestOverviewPlansOnAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 1,000,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	seedOverview(t, db)
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)

	act, err := a.Activity(ctx, MaxActivityWindow)
	require.NoError(t, err)
	perHour := int64(overviewSent / 24)
	require.InDelta(t, perHour, act.Sent, float64(perHour)/50, "an hour of the day's SENT rows")
	require.InDelta(t, overviewFailed/24, act.Failed, overviewFailed/24/20)
	// Retries: every 50th SENT row and dead letter of the hour retried a
	// second before it finished.
	require.InDelta(t, (act.Sent+act.Failed)/50, act.Retried, 5)
	require.Len(t, act.Replicas, 3)
	for _, r := range act.Replicas {
		require.InDelta(t, overviewProcessing/3, r.Holding, 1)
	}

	conn := db.Conn(t)
	var backlogPages float64
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_relation_size('outbox_events') / 8192`).Scan(&backlogPages))
	for _, window := range []time.Duration{MinActivityWindow, 15 * time.Minute, MaxActivityWindow} {
		p := testdb.Explain(t, conn, activitySQL(a.sql.t, a.sql.dead, a.sql.sent, window))
		var start time.Time
		require.NoError(t, conn.QueryRow(ctx, `SELECT now() - $1::bigint * interval '1 microsecond'`, window.Microseconds()).Scan(&start))
		// Sequential scans: of the outbox table (the backlog, when most
		// of it is due in the window), and of a history partition only
		// when the window holds most of its rows: a minute of the half
		// hour in the newest partition is read through the BRIN index.
		// Never of the dead letters.
		for _, rel := range bigScans(t, conn, p) {
			m := partitionName.FindStringSubmatch(rel)
			require.True(t, rel == "outbox_events" || m != nil, "window %s: a sequential scan of %s\n%s", window, rel, p.Text)
			require.False(t, m != nil && window == MinActivityWindow, "window %s: a sequential scan of %s\n%s", window, rel, p.Text)
		}
		if window == MinActivityWindow {
			require.Contains(t, p.Indexes, partitionTimeIndex(t, conn, start), "the newest partition's BRIN index")
		}
		// The window's SENT rows (some 45 a page, 20 allowed), the last
		// range of the BRIN index, the dead letters failed in it, and the
		// backlog at most.
		limit := maxPlanBuffers + backlogPages + float64(act.Sent)*float64(window)/float64(MaxActivityWindow)/20
		require.Less(t, p.Buffers, limit, "window %s: %v buffers\n%s", window, p.Buffers, p.Text)
		t.Logf("activity, window %s: %v buffers, indexes %v, scans %v", window, p.Buffers, p.Indexes, p.SeqScans)
	}
	for name, stmt := range map[string]string{"summary": a.sql.summary, "pending by type": a.sql.pendingByType} {
		p := testdb.Explain(t, conn, stmt)
		require.Empty(t, historyScans(t, conn, p), "%s: a sequential scan of the history\n%s", name, p.Text)
		require.Less(t, p.Buffers, maxPlanBuffers+backlogPages+2*float64(overviewFailed), "%s\n%s", name, p.Text)
		t.Logf("%s: %v buffers", name, p.Buffers)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		p := testdb.Explain(t, conn, a.sql.blocked, "", BlockedScanLimit, DefaultBlockedLimit, WaitingCountLimit)
		require.Empty(t, bigScans(t, conn, p), "blocked keys %s\n%s", mode, p.Text)
		require.Less(t, p.Buffers, float64(maxPlanBuffers), "blocked keys %s\n%s", mode, p.Text)
		t.Logf("blocked keys %s: %v buffers", mode, p.Buffers)
	}
	// A page of a long audit log reads its rows through the primary key.
	_, err = conn.Exec(ctx, `INSERT INTO outbox_events_audit (actor, source, action, filter, rows)
		SELECT 'ops', 'admin', 'replay', '{}', i FROM generate_series(1, 100000) AS i; ANALYZE outbox_events_audit`)
	require.NoError(t, err)
	for _, after := range []int64{0, 50_000} {
		p := testdb.Explain(t, conn, a.sql.auditPage, after, DefaultAuditLimit+1)
		require.Contains(t, p.Indexes, db.Table().Name+"_audit_pkey")
		require.Less(t, p.Buffers, 50.0, "audit page after %d\n%s", after, p.Text)
	}
}

// BenchmarkOverview1M times what the console's overview reads on each
// refresh on the million rows of seedOverview: Summary, Activity over
// its longest window, the first page of BlockedKeys and PendingByType,
// one after the other. The seeding (a minute or so) is not timed.
//
//	go test ./admin/ -run '^$' -bench Overview1M -benchtime 20x
func BenchmarkOverview1M(b *testing.B) {
	if testing.Short() {
		b.Skip("inserts 1,000,000 rows")
	}
	ctx := context.Background()
	db := testdb.NewMigrated(b, testdb.KeyOrder)
	seedOverview(b, db)
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(b, err)
	for b.Loop() {
		_, err := a.Summary(ctx)
		require.NoError(b, err)
		_, err = a.Activity(ctx, MaxActivityWindow)
		require.NoError(b, err)
		_, err = a.BlockedKeys(ctx, BlockedParams{})
		require.NoError(b, err)
		_, err = a.PendingByType(ctx)
		require.NoError(b, err)
	}
}
