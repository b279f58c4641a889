package admin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// maxPlanBuffers bounds the shared buffers one operator statement may
// touch on the million-row outbox below, whose history's heap alone is
// some 15,000 pages: a page of 100 or a replay batch of 1,000, with the
// index pages above them, the backlog of 5,000 PENDING rows, and the SENT
// rows counted up to SentCountLimit.
const maxPlanBuffers = 2500

// seedMillion fills the outbox of db with 1,000,000 events by seq: the
// history holds 994,005 SENT ones (type.0 to type.19, and "rare" four
// times; every 50th retried after handler_error), spread over five hourly
// partitions (a sixth, the next hour's, is empty, and so is the default
// one); the dead letters the 995 with seq % 1000
// = 7 (three codes, the heads of 100 keys agg-7, agg-1007, ..., each with
// nine more behind it); the outbox table the last 5,000, PENDING and due,
// inserted last (so that a walk of a seq index from the start reads past
// every SENT row first).
func seedMillion(t *testing.T, db *testdb.DB) {
	t.Helper()
	ctx := context.Background()
	hourlyPartitions(t, db, "date_trunc('hour', now())", -4, 1)
	for _, stmt := range []string{
		`INSERT INTO outbox_events_sent (id, seq, event_type, aggregate_id, status, sent_at, last_error_code, next_attempt_at)
SELECT gen_random_uuid(), i, CASE WHEN i % 250000 = 1 THEN 'rare' ELSE 'type.' || (i % 20) END, 'agg-' || (i % 100000), 'SENT',
	now() - (i % 5) * interval '1 hour', CASE WHEN i % 50 = 3 THEN 'handler_error' END, now() - interval '1 minute'
FROM generate_series(1, 995000) AS i WHERE i % 1000 <> 7`,
		`INSERT INTO outbox_events_dead (id, seq, event_type, aggregate_id, status, failed_at, last_error_code, next_attempt_at)
SELECT gen_random_uuid(), i, 'type.' || (i % 20), 'agg-' || (i % 100000), 'FAILED', now() - (i % 100) * interval '1 hour',
	(ARRAY['handler_error', 'timeout', 'publish_error'])[1 + i % 3], now() - interval '1 minute'
FROM generate_series(1, 995000) AS i WHERE i % 1000 = 7`,
		`INSERT INTO outbox_events (id, seq, event_type, aggregate_id, last_error_code, next_attempt_at) OVERRIDING SYSTEM VALUE
SELECT gen_random_uuid(), i, 'type.' || (i % 20), 'agg-' || (i % 100000), CASE WHEN i % 50 = 3 THEN 'handler_error' END,
	now() - interval '1 minute'
FROM generate_series(995001, 1000000) AS i`,
		`SELECT setval(pg_get_serial_sequence('outbox_events', 'seq'), 1000000)`,
		`VACUUM ANALYZE outbox_events, outbox_events_dead, outbox_events_sent`,
	} {
		_, err := db.Pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
}

// hourlyPartitions creates the history's hour-long partitions of db,
// starting at anchor (an SQL expression of a time) plus from hours to
// anchor plus to hours.
func hourlyPartitions(tb testing.TB, db *testdb.DB, anchor string, from, to int) {
	tb.Helper()
	ctx := context.Background()
	names, err := sqlname.For(db.Table())
	require.NoError(tb, err)
	var now time.Time
	require.NoError(tb, db.Pool.QueryRow(ctx, `SELECT `+anchor).Scan(&now))
	for h := from; h <= to; h++ {
		start := now.Add(time.Duration(h) * time.Hour)
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
			names.QualifiedPartition(start), names.Sent, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339)))
		require.NoError(tb, err)
	}
}

// bigScans returns the relations that p reads by a sequential scan and
// that are a history partition with rows, or bigger than 200 pages: the
// planner may rightly scan a small outbox table or a few dead letters,
// and an empty partition (one created ahead of its time) costs nothing.
func bigScans(t *testing.T, q testdb.Querier, p testdb.Plan) []string {
	t.Helper()
	return seqScansPast(t, q, p, 200)
}

// historyScans returns the history partitions with rows that p reads by
// a sequential scan: Counts and Summary count the outbox table's backlog
// and the dead letters whole, by whichever plan, but never read the
// history past SentCountLimit rows.
func historyScans(t *testing.T, q testdb.Querier, p testdb.Plan) []string {
	t.Helper()
	return seqScansPast(t, q, p, 1<<30)
}

// seqScansPast returns the relations p reads by a sequential scan that
// are a history partition with rows or bigger than pages pages.
func seqScansPast(t *testing.T, q testdb.Querier, p testdb.Plan, pages int) []string {
	t.Helper()
	if len(p.SeqScans) == 0 {
		return nil
	}
	var big []string
	require.NoError(t, q.QueryRow(context.Background(), `SELECT coalesce(array_agg(r), '{}') FROM unnest($1::text[]) AS r
		WHERE pg_relation_size(to_regclass(r)) > CASE WHEN r LIKE 'outbox\_events\_s%' THEN 0 ELSE $2::bigint * 8192 END`,
		p.SeqScans, pages).Scan(&big))
	return big
}

// On an outbox of 1,000,000 events, 99% SENT (in the history), counts,
// summary, pending by type, every form of list (unfiltered, each filter,
// a late page), inspect, blocked keys, skip, replay and purge (each
// filter, dry run and run) read indexes: no sequential scan of the
// history, nor of a big outbox table or dead letters, and a bounded
// number of buffers, however long the history.
func TestOperatorPlansOnAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 1,000,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	seedMillion(t, db)
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)
	var checkWrite func(t *testing.T, q testdb.Querier, perRow float64, name, stmt string, args ...any)

	check := func(t *testing.T, q testdb.Querier, name, stmt string, args ...any) {
		t.Helper()
		checkWrite(t, q, 0, name, stmt, args...)
	}
	// checkWrite allows a write perRow buffers more for each row it
	// changes: a replayed row is inserted in the heap and each index of
	// the outbox table and deleted from the dead letters, about 3 levels
	// each.
	checkWrite = func(t *testing.T, q testdb.Querier, perRow float64, name, stmt string, args ...any) {
		t.Helper()
		p := testdb.Explain(t, q, stmt, args...)
		require.Empty(t, bigScans(t, q, p), "%s: a sequential scan\n%s", name, p.Text)
		limit := maxPlanBuffers + perRow*p.Rows
		require.Less(t, p.Buffers, limit, "%s: %v buffers for %v rows\n%s", name, p.Buffers, p.Rows, p.Text)
		t.Logf("%s: %v buffers, indexes %v", name, p.Buffers, p.Indexes)
	}

	t.Run("Counts", func(t *testing.T) {
		c, err := a.Counts(ctx)
		require.NoError(t, err)
		// DueBlocked: the PENDING rows of agg-95007 ... agg-99007, behind
		// a FAILED row of their key.
		require.Equal(t, Counts{Pending: 5000, Failed: 995, Due: 5000, DueBlocked: 5, Sent: c.Sent, SentEstimated: true,
			OldestDueAge: c.OldestDueAge, At: c.At}, c, "no strays: Unmoved 0")
		require.InEpsilon(t, 994005, c.Sent, 0.05, "the estimate of SENT rows")
		conn := db.Conn(t)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			// Counts.DueBlocked reads each dead letter (its key and seq)
			// and probes the order index once per key of one: up to two
			// buffers more per dead letter. Counts and Summary read the
			// dead letters whole (by an index or a sequential scan of
			// theirs) and never scan the history.
			checkFailed := func(name, stmt string) {
				t.Helper()
				p := testdb.Explain(t, conn, stmt)
				require.Empty(t, historyScans(t, conn, p), "%s: a sequential scan of the history\n%s", name, p.Text)
				require.Less(t, p.Buffers, maxPlanBuffers+2*float64(c.Failed), "%s: %v buffers\n%s", name, p.Buffers, p.Text)
				t.Logf("%s: %v buffers, indexes %v", name, p.Buffers, p.Indexes)
			}
			checkFailed("counts "+mode, a.sql.counts)
			checkFailed("summary "+mode, a.sql.summary)
			checkFailed("counts without key order "+mode, a.sql.countsOff)
			checkFailed("summary without key order "+mode, a.sql.summaryOff)
			check(t, conn, "pending by type "+mode, a.sql.pendingByType)
		}
		byType, err := a.PendingByType(ctx)
		require.NoError(t, err)
		require.Len(t, byType, 20, "the types with PENDING rows")
		require.Equal(t, TypePending{Type: "type.0", Pending: 250, Due: 250, OldestDueAge: byType[0].OldestDueAge,
			OldestAge: byType[0].OldestAge}, byType[0])
		s, err := a.Summary(ctx)
		require.NoError(t, err)
		require.Equal(t, c.Pending, s.Counts.Pending)
		require.True(t, s.Counts.SentEstimated)
		require.Len(t, s.ByType, 20, "types with PENDING or FAILED rows; SENT rows are not counted by type")
		require.Len(t, s.FailedByCode, 3)
	})

	var hourAgo time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now() - interval '1 hour'`).Scan(&hourAgo))
	t.Run("List", func(t *testing.T) {
		for _, p := range []ListParams{
			{}, {After: Cursor{seq: 900_000}}, {Status: outbox.StatusSent}, {Status: outbox.StatusSent, After: Cursor{seq: 900_000}},
			{Status: outbox.StatusPending}, {Status: outbox.StatusProcessing}, {Status: outbox.StatusFailed},
			{Type: "type.3"}, {Type: "type.3", After: Cursor{seq: 900_000}}, {Type: "rare"}, {Type: "rare", After: Cursor{seq: 1}}, {AggregateID: "agg-77"}, {Code: "timeout"},
			{Code: "handler_error", After: Cursor{seq: 900_000}}, {Status: outbox.StatusFailed, Type: "type.7"},
			{Status: outbox.StatusPending, Type: "type.3"}, {Status: outbox.StatusFailed, Code: "timeout"},
			{Status: outbox.StatusSent, Code: "handler_error"}, {Status: outbox.StatusSent, Code: "timeout"},
			{Status: outbox.StatusSent, Type: "rare", After: Cursor{seq: 2}}, {AggregateID: "agg-77", After: Cursor{seq: 900_000}},
			{Key: "agg-77"}, {Key: "agg-7", Status: outbox.StatusFailed}, {Key: "agg-95007", Status: outbox.StatusPending},
			{Key: "agg-77", Status: outbox.StatusSent, After: Cursor{seq: 900_000}}, {Key: "agg-77", Type: "type.17"},
			{CreatedAfter: hourAgo}, {CreatedAfter: hourAgo, Status: outbox.StatusSent}, {CreatedBefore: hourAgo},
			{CreatedAfter: hourAgo, Type: "type.3"}, {CreatedBefore: hourAgo, Status: outbox.StatusFailed},
		} {
			page, err := a.List(ctx, p)
			require.NoError(t, err)
			if p.Status != outbox.StatusProcessing && (p.Status != outbox.StatusSent || p.Code != "timeout") && p.CreatedBefore.IsZero() {
				require.NotEmpty(t, page.Events, "%+v", p)
			}
			upTo, err := a.listBound(ctx, p)
			require.NoError(t, err)
			if stmt, args := a.listBoundSQL(p); stmt != "" {
				require.NotZero(t, upTo, "%+v: the history is read up to a bound", p)
				check(t, db.Pool, fmt.Sprintf("list bound %+v", p), stmt, args...)
			}
			stmt, args := a.listSQL(p, DefaultListLimit+1, upTo)
			check(t, db.Pool, fmt.Sprintf("list %+v", p), stmt, args...)
			// Count reads List's indexes, up to MaxCount rows in all
			// (index-only where it can, some 300 to a leaf page; a heap
			// page every 60 rows or so where a filter needs the row).
			upTo, err = a.historyBound(ctx, p, MaxCount)
			require.NoError(t, err)
			stmt, args = a.countSQL(p, upTo)
			plan := testdb.Explain(t, db.Pool, stmt, args...)
			require.Empty(t, bigScans(t, db.Pool, plan), "count %+v: a sequential scan\n%s", p, plan.Text)
			require.Less(t, plan.Buffers, maxPlanBuffers+MaxCount/20.0, "count %+v\n%s", p, plan.Text)
			t.Logf("count %+v: %v buffers, indexes %v", p, plan.Buffers, plan.Indexes)
		}
		// SENT rows of a code no SENT row has: pages of at most
		// ListScanLimit history rows each, never a read of the whole
		// history.
		page, err := a.List(ctx, ListParams{Status: outbox.StatusSent, Code: "timeout"})
		require.NoError(t, err)
		require.Empty(t, page.Events)
		var last int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT seq FROM outbox_events_sent ORDER BY seq OFFSET $1 LIMIT 1`, ListScanLimit-1).Scan(&last))
		require.Equal(t, last, page.Next.seq, "the seq of the ListScanLimit-th SENT row")
	})

	// Inspect finds a row in each of the three tables by one probe of each
	// primary key (of the outbox table, of the dead letters) and one of
	// the history's id index per partition.
	t.Run("Inspect", func(t *testing.T) {
		var ids [3]uuid.UUID
		for i, table := range []string{"outbox_events", "outbox_events_dead", "outbox_events_sent"} {
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT id FROM "+table+" WHERE seq = 7007 OR seq = 999999 OR seq = 500000").Scan(&ids[i]))
			d, err := a.Inspect(ctx, ids[i])
			require.NoError(t, err)
			require.Equal(t, ids[i], d.ID)
			check(t, db.Pool, "inspect in "+table, a.sql.inspect, ids[i])
		}
		check(t, db.Pool, "inspect a missing id", a.sql.inspect, uuid.New())
	})

	// The dead letters are the heads of 100 keys (agg-7, agg-1007, ...),
	// nine events behind each; 5,000 more keys have PENDING rows. A page
	// walks the dead order index one key at a time, probing the outbox's
	// order index for each: its cost follows the keys with a dead letter,
	// never the SENT rows or the keys without a dead letter.
	t.Run("BlockedKeys", func(t *testing.T) {
		page, err := a.BlockedKeys(ctx, BlockedParams{})
		require.NoError(t, err)
		require.Len(t, page.Keys, DefaultBlockedLimit)
		for _, k := range page.Keys {
			require.Equal(t, 9, k.Waiting, "%+v", k)
		}
		require.NotEmpty(t, page.Next)
		rest, err := a.BlockedKeys(ctx, BlockedParams{After: page.Next})
		require.NoError(t, err)
		require.Empty(t, rest.Keys)
		require.Empty(t, rest.Next)
		require.Equal(t, 100, page.Scanned+rest.Scanned, "every key with a dead letter, once")
		conn := db.Conn(t)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			for _, pg := range []struct {
				after   string
				scanned int
			}{{"", page.Scanned}, {page.Next, rest.Scanned}} {
				p := testdb.Explain(t, conn, a.sql.blocked, pg.after, BlockedScanLimit, DefaultBlockedLimit, WaitingCountLimit)
				require.Empty(t, bigScans(t, conn, p), "a sequential scan\n%s", p.Text)
				require.Contains(t, p.Indexes, db.Table().Name+"_dead_order_idx")
				limit := maxPlanBuffers + 5*float64(pg.scanned)
				require.Less(t, p.Buffers, limit, "%v buffers for %d keys\n%s", p.Buffers, pg.scanned, p.Text)
				t.Logf("blocked keys %s after %q: %v buffers for %d keys", mode, pg.after, p.Buffers, pg.scanned)
				p = testdb.Explain(t, conn, a.sql.blockedByType, pg.after, BlockedScanLimit, DefaultBlockedLimit, WaitingCountLimit)
				require.Empty(t, bigScans(t, conn, p), "a sequential scan\n%s", p.Text)
				require.Contains(t, p.Indexes, db.Table().Name+"_dead_order_idx")
				require.Less(t, p.Buffers, 4*limit, "%v buffers for %d keys\n%s", p.Buffers, pg.scanned, p.Text)
				t.Logf("blocked keys by type %s after %q: %v buffers", mode, pg.after, p.Buffers)
			}
		}
		byType, err := a.BlockedKeys(ctx, BlockedParams{ByType: true})
		require.NoError(t, err)
		require.Len(t, byType.Keys, DefaultBlockedLimit)
		require.Equal(t, page.Keys[0].HeadID, byType.Keys[0].HeadID, "the first blocked key's head blocks its type")
	})

	t.Run("SkipHeads", func(t *testing.T) {
		page, err := a.BlockedKeys(ctx, BlockedParams{Limit: 3})
		require.NoError(t, err)
		ids := []uuid.UUID{page.Keys[0].HeadID, page.Keys[1].HeadID, page.Keys[2].HeadID}
		check(t, db.Pool, "skip dry run", a.sql.skip.dry, pgvalue.UUIDs(ids))
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		checkWrite(t, tx, 30, "skip", a.sql.skip.run, pgvalue.UUIDs(ids), len(ids))
	})

	t.Run("Replay", func(t *testing.T) {
		for _, p := range []ReplayParams{
			{}, {Code: "timeout"}, {Type: "type.7"}, {FailedBefore: time.Now().Add(-50 * time.Hour)},
			{Code: "handler_error", Type: "type.7", FailedBefore: time.Now().Add(-time.Hour), Limit: 10},
			{IDs: []uuid.UUID{uuid.New()}}, {Type: "rare"},
		} {
			stmt, args, err := a.replayArgs(p)
			require.NoError(t, err)
			// The dry run probes the outbox table's primary key for each
			// row it returns (a conflict): three buffers or so each.
			checkWrite(t, db.Pool, 4, fmt.Sprintf("replay dry run %+v", p), stmt.dry, args...)
			func() {
				tx, err := db.Pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				checkWrite(t, tx, 30, fmt.Sprintf("replay %+v", p), stmt.run, args...)
			}()
		}
		res, err := a.Replay(ctx, ReplayParams{Code: "timeout", Limit: 100})
		require.NoError(t, err)
		require.Len(t, res.Replayed, 100)
	})

	// Purge's batches are internal/purge's statements, whose plans
	// internal/purge's plan test checks.
}

// A filter replay batch and a page of FAILED rows of one code read the
// head of the dead letters' code index, not every matching dead letter:
// on 150,000 dead letters of one code, ordered by seq alone, each batch
// read and sorted all of them (a parallel sequential scan).
func TestReplayAndListOnABigFailedSet(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 300,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events_dead (id, seq, event_type, failed_at, last_error_code)
SELECT gen_random_uuid(), nextval(pg_get_serial_sequence('outbox_events', 'seq')), 'type.' || (i % 20), now(), 'timeout'
FROM generate_series(1, 150000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type) SELECT gen_random_uuid(), 'type.' || (i % 20)
FROM generate_series(1, 150000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE outbox_events, outbox_events_dead`)
	require.NoError(t, err)
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)
	var bad []string
	for _, p := range []ReplayParams{{Code: "timeout"}, {}} {
		stmt, args, err := a.replayArgs(p)
		require.NoError(t, err)
		plan := testdb.Explain(t, db.Pool, stmt.dry, args...)
		if plan.Buffers > maxPlanBuffers+4*plan.Rows || len(bigScans(t, db.Pool, plan)) > 0 {
			bad = append(bad, fmt.Sprintf("replay %+v: %v buffers, seq scans %v", p, plan.Buffers, plan.SeqScans))
		}
	}
	p := ListParams{Status: outbox.StatusFailed, Code: "timeout"}
	stmt, args := a.listSQL(p, DefaultListLimit+1, 0)
	plan := testdb.Explain(t, db.Pool, stmt, args...)
	if plan.Buffers > maxPlanBuffers || len(bigScans(t, db.Pool, plan)) > 0 {
		bad = append(bad, fmt.Sprintf("list %+v: %v buffers, seq scans %v", p, plan.Buffers, plan.SeqScans))
	}
	require.Empty(t, bad, "one batch / one page read every FAILED row")
}
