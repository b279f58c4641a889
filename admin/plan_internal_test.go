package admin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/pguuid"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// maxPlanBuffers bounds the shared buffers one operator statement may
// touch on the million-row table below, whose heap alone is some 15,000
// pages: a page of 100 or a replay batch of 1,000, with the index pages
// above them, and the SENT rows counted up to SentCountLimit.
const maxPlanBuffers = 2500

// On a table of 1,000,000 rows, 99% SENT, with the PENDING rows inserted
// last (so a walk of the seq index from the start reads past every SENT
// row first), counts, summary, pending by type, every form of list (unfiltered, each
// filter, a late page), blocked keys, skip and replay (each filter, dry
// run and run) read
// indexes only: no sequential scan of the outbox and a bounded number of
// buffers, however many rows are SENT.
func TestOperatorPlansOnAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 1,000,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events
	(id, event_type, aggregate_id, status, sent_at, failed_at, last_error_code, next_attempt_at)
SELECT gen_random_uuid(), CASE WHEN i % 250000 = 1 THEN 'rare' ELSE 'type.' || (i % 20) END, 'agg-' || (i % 100000),
	CASE WHEN i > 995000 THEN 'PENDING' WHEN i % 1000 = 7 THEN 'FAILED' ELSE 'SENT' END,
	CASE WHEN i <= 995000 AND i % 1000 <> 7 THEN now() - interval '1 hour' END,
	CASE WHEN i <= 995000 AND i % 1000 = 7 THEN now() - (i % 100) * interval '1 hour' END,
	CASE WHEN i <= 995000 AND i % 1000 = 7 THEN (ARRAY['handler_error', 'timeout', 'publish_error'])[1 + i % 3]
		WHEN i % 50 = 3 THEN 'handler_error' END,
	now() - interval '1 minute'
FROM generate_series(1, 1000000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE outbox_events`)
	require.NoError(t, err)
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)
	var checkWrite func(t *testing.T, q testdb.Querier, perRow float64, name, stmt string, args ...any)

	check := func(t *testing.T, q testdb.Querier, name, stmt string, args ...any) {
		t.Helper()
		checkWrite(t, q, 0, name, stmt, args...)
	}
	// checkWrite allows a write perRow buffers more for each row it
	// changes: a replayed row gets a new version in the heap and in each
	// index whose predicate it meets (primary key, seq, type, aggregate,
	// code, due, about 3 levels each).
	checkWrite = func(t *testing.T, q testdb.Querier, perRow float64, name, stmt string, args ...any) {
		t.Helper()
		p := testdb.Explain(t, q, stmt, args...)
		require.Empty(t, p.SeqScans, "%s: a sequential scan\n%s", name, p.Text)
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
			OldestDueAge: c.OldestDueAge, At: c.At}, c)
		require.InEpsilon(t, 994005, c.Sent, 0.05, "the estimate of SENT rows")
		conn := db.Conn(t)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			// Counts.DueBlocked reads each FAILED row (its key and seq)
			// and probes the order index once per key of a FAILED row: up
			// to two buffers more per FAILED row.
			checkFailed := func(name, stmt string) {
				t.Helper()
				p := testdb.Explain(t, conn, stmt)
				require.Empty(t, p.SeqScans, "%s: a sequential scan\n%s", name, p.Text)
				require.Less(t, p.Buffers, maxPlanBuffers+2*float64(c.Failed), "%s: %v buffers\n%s", name, p.Buffers, p.Text)
				t.Logf("%s: %v buffers, indexes %v", name, p.Buffers, p.Indexes)
			}
			checkFailed("counts "+mode, a.sql.counts)
			checkFailed("summary "+mode, a.sql.summary)
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

	t.Run("List", func(t *testing.T) {
		for _, p := range []ListParams{
			{}, {After: Cursor{seq: 900_000}}, {Status: outbox.StatusSent}, {Status: outbox.StatusSent, After: Cursor{seq: 900_000}},
			{Status: outbox.StatusPending}, {Status: outbox.StatusProcessing}, {Status: outbox.StatusFailed},
			{Type: "type.3"}, {Type: "type.3", After: Cursor{seq: 900_000}}, {Type: "rare"}, {Type: "rare", After: Cursor{seq: 1}}, {AggregateID: "agg-77"}, {Code: "timeout"},
			{Code: "handler_error", After: Cursor{seq: 900_000}}, {Status: outbox.StatusFailed, Type: "type.7"},
			{Status: outbox.StatusPending, Type: "type.3"}, {Status: outbox.StatusFailed, Code: "timeout"},
		} {
			page, err := a.List(ctx, p)
			require.NoError(t, err)
			if p.Status != outbox.StatusProcessing {
				require.NotEmpty(t, page.Events, "%+v", p)
			}
			stmt, args := a.listSQL(p, DefaultListLimit+1)
			check(t, db.Pool, fmt.Sprintf("list %+v", p), stmt, args...)
		}
	})

	// The FAILED rows are the heads of 100 keys (agg-7, agg-1007, ...),
	// nine events behind each; 5,000 more keys have PENDING rows. A page
	// walks the order index one key at a time: its cost follows the keys
	// it examines, never the SENT rows.
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
		require.Equal(t, 5095, page.Scanned+rest.Scanned, "every key with an unsent event, once")
		conn := db.Conn(t)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			for _, pg := range []struct {
				after   string
				scanned int
			}{{"", page.Scanned}, {page.Next, rest.Scanned}} {
				p := testdb.Explain(t, conn, a.sql.blocked, pg.after, BlockedScanLimit, DefaultBlockedLimit, WaitingCountLimit)
				require.Empty(t, p.SeqScans, "a sequential scan\n%s", p.Text)
				require.Contains(t, p.Indexes, db.Table().Name+"_order_idx")
				limit := maxPlanBuffers + 5*float64(pg.scanned)
				require.Less(t, p.Buffers, limit, "%v buffers for %d keys\n%s", p.Buffers, pg.scanned, p.Text)
				t.Logf("blocked keys %s after %q: %v buffers for %d keys", mode, pg.after, p.Buffers, pg.scanned)
				p = testdb.Explain(t, conn, a.sql.blockedByType, pg.after, BlockedScanLimit, DefaultBlockedLimit, WaitingCountLimit)
				require.Empty(t, p.SeqScans, "a sequential scan\n%s", p.Text)
				require.Contains(t, p.Indexes, db.Table().Name+"_order_idx")
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
		check(t, db.Pool, "skip dry run", a.sql.skip.dry, pguuid.ArrayOf(ids))
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		checkWrite(t, tx, 30, "skip", a.sql.skip.run, pguuid.ArrayOf(ids), len(ids))
	})

	t.Run("Replay", func(t *testing.T) {
		for _, p := range []ReplayParams{
			{}, {Code: "timeout"}, {Type: "type.7"}, {FailedBefore: time.Now().Add(-50 * time.Hour)},
			{Code: "handler_error", Type: "type.7", FailedBefore: time.Now().Add(-time.Hour), Limit: 10},
			{IDs: []uuid.UUID{uuid.New()}}, {Type: "rare"},
		} {
			stmt, args, err := a.replayArgs(p)
			require.NoError(t, err)
			check(t, db.Pool, fmt.Sprintf("replay dry run %+v", p), stmt.dry, args...)
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
}

// A filter replay batch and a page of FAILED rows of one code read the
// head of the failed index, not every matching FAILED row: on 150,000
// FAILED rows of one code, ordered by seq alone, each batch read and
// sorted all of them (a parallel sequential scan).
func TestReplayAndListOnABigFailedSet(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 300,000 rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events
	(id, event_type, status, failed_at, last_error_code)
SELECT gen_random_uuid(), 'type.' || (i % 20),
	CASE WHEN i % 2 = 0 THEN 'FAILED' ELSE 'PENDING' END,
	CASE WHEN i % 2 = 0 THEN now() END, CASE WHEN i % 2 = 0 THEN 'timeout' END
FROM generate_series(1, 300000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE outbox_events`)
	require.NoError(t, err)
	a, err := New(db.Pool, Config{Table: db.Table()})
	require.NoError(t, err)
	var bad []string
	for _, p := range []ReplayParams{{Code: "timeout"}, {}} {
		stmt, args, err := a.replayArgs(p)
		require.NoError(t, err)
		plan := testdb.Explain(t, db.Pool, stmt.dry, args...)
		if plan.Buffers > maxPlanBuffers || len(plan.SeqScans) > 0 {
			bad = append(bad, fmt.Sprintf("replay %+v: %v buffers, seq scans %v", p, plan.Buffers, plan.SeqScans))
		}
	}
	p := ListParams{Status: outbox.StatusFailed, Code: "timeout"}
	stmt, args := a.listSQL(p, DefaultListLimit+1)
	plan := testdb.Explain(t, db.Pool, stmt, args...)
	if plan.Buffers > maxPlanBuffers || len(plan.SeqScans) > 0 {
		bad = append(bad, fmt.Sprintf("list %+v: %v buffers, seq scans %v", p, plan.Buffers, plan.SeqScans))
	}
	require.Empty(t, bad, "one batch / one page read every FAILED row")
}
