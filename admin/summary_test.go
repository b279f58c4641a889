package admin_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Breakdown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The PENDING row not yet due is the oldest: it has waited out backoffs.
		b.insert(t, row{Type: "a", DueIn: -time.Hour}, row{Type: "a", DueIn: time.Hour, CreatedAgo: 3 * time.Hour}, row{Type: "b", DueIn: -time.Minute},
			row{Type: "a", Status: "PROCESSING"}, row{Type: "b", Status: "SENT"}, row{Type: "b", Status: "SENT"},
			row{Type: "a", Status: "FAILED", Code: "handler_error"}, row{Type: "b", Status: "FAILED", Code: "handler_error"},
			row{Type: "b", Status: "FAILED", Code: "publish_error"}, row{Type: "b", Status: "FAILED"},
			row{Type: "c", Status: "SENT", Code: "timeout"})

		s, err := b.admin.Summary(ctx)
		require.NoError(t, err)
		c, err := b.admin.Counts(ctx)
		require.NoError(t, err)
		c.At = s.Counts.At
		c.OldestDueAge = s.Counts.OldestDueAge // measured a moment later
		require.Equal(t, c, s.Counts, "the totals agree with Counts")
		require.Equal(t, admin.Counts{Pending: 3, Processing: 1, Sent: 3, Failed: 4, Due: 2,
			OldestDueAge: s.Counts.OldestDueAge, At: s.Counts.At}, s.Counts)
		require.GreaterOrEqual(t, s.Counts.OldestDueAge, time.Hour)
		require.Less(t, s.Counts.OldestDueAge, time.Hour+time.Minute)
		require.GreaterOrEqual(t, s.OldestPendingAge, 3*time.Hour)
		require.Less(t, s.OldestPendingAge, 3*time.Hour+time.Minute)
		require.Equal(t, []admin.TypeCounts{
			{Type: "a", Pending: 2, Due: 1, Processing: 1, Failed: 1},
			{Type: "b", Pending: 1, Due: 1, Sent: 2, Failed: 3},
			{Type: "c", Sent: 1},
		}, s.ByType)
		require.Equal(t, []admin.CodeCount{
			{Code: outbox.CodeHandlerError, Count: 2}, {Code: "", Count: 1}, {Code: outbox.CodePublishError, Count: 1},
		}, s.FailedByCode, "most frequent first, then by code; a SENT row's code is not a failure")
	})

	t.Run("PendingByType", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insert(t, row{Type: "a", DueIn: -time.Hour}, row{Type: "a", DueIn: time.Hour}, row{Type: "b", DueIn: -time.Minute},
			row{Type: "b", DueIn: -time.Second}, row{Type: "a", Status: "PROCESSING"}, row{Type: "c", Status: "SENT"},
			row{Type: "d", Status: "FAILED", Code: "handler_error"})
		got, err := b.admin.PendingByType(ctx)
		require.NoError(t, err)
		require.Len(t, got, 2, "PENDING rows only")
		require.Equal(t, admin.TypePending{Type: "a", Pending: 2, Due: 1, OldestDueAge: got[0].OldestDueAge, OldestAge: got[0].OldestAge}, got[0])
		require.Equal(t, admin.TypePending{Type: "b", Pending: 2, Due: 2, OldestDueAge: got[1].OldestDueAge, OldestAge: got[1].OldestAge}, got[1])
		require.InDelta(t, time.Hour.Seconds(), got[0].OldestDueAge.Seconds(), 60)
		require.InDelta(t, time.Minute.Seconds(), got[1].OldestDueAge.Seconds(), 30)

		empty, err := setup(t).admin.PendingByType(ctx)
		require.NoError(t, err)
		require.Empty(t, empty)
	})

	t.Run("PendingByTypeReadsOnlyPendingRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
			SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 'old', 'SENT', now() FROM generate_series(1, 20000)`)
		require.NoError(t, err)
		b.insert(t, row{Type: "a"}, row{Type: "b"})
		_, err = b.db.Pool.Exec(ctx, `ANALYZE outbox_events, outbox_events_sent, outbox_events_dead`)
		require.NoError(t, err)
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		a, err := admin.New(tx, admin.Config{Table: b.db.Table()})
		require.NoError(t, err)
		got, err := a.PendingByType(ctx)
		require.NoError(t, err)
		require.Len(t, got, 2)
		var scans int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)
			FROM pg_stat_xact_user_tables WHERE relid IN ('outbox_events_sent_default'::regclass, 'outbox_events_dead'::regclass)`).Scan(&scans))
		require.Zero(t, scans, "neither the history nor the dead letters read")
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s, err := b.admin.Summary(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), s.Counts.At, time.Minute)
		s.Counts.At = time.Time{}
		require.Equal(t, admin.Summary{SentByType: true}, s)
	})

	// A table bulk-loaded and never analyzed nor vacuumed (pg_class
	// knows no row count) gets an estimate from a sample of its pages,
	// not SentCountLimit+1.
	t.Run("SentEstimateOfANeverAnalyzedTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(ctx, `ALTER TABLE outbox_events_sent_default SET (autovacuum_enabled = false)`)
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
			SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 'old', 'SENT', now() FROM generate_series(1, 50000)`)
		require.NoError(t, err)
		var pages int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = 'outbox_events_sent_default'::regclass`).Scan(&pages))
		require.Zero(t, pages, "never analyzed")
		c, err := b.admin.Counts(ctx)
		require.NoError(t, err)
		require.True(t, c.SentEstimated)
		require.InEpsilon(t, 50000, c.Sent, 0.2, "an estimate from a sample of the table's pages")
		s, err := b.admin.Summary(ctx)
		require.NoError(t, err)
		require.True(t, s.Counts.SentEstimated)
		t.Logf("SENT estimates: %d, %d", c.Sent, s.Counts.Sent)
		require.InEpsilon(t, 50000, s.Counts.Sent, 0.2, "a sample: not the same one")
	})

	t.Run("PastTheSentLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
			SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), CASE WHEN i = 1 THEN 'a' ELSE 'old' END, 'SENT', now()
			FROM generate_series(1, $1::int) AS i`, admin.SentCountLimit+1)
		require.NoError(t, err)
		b.insert(t, row{Type: "a"})
		s, err := b.admin.Summary(ctx)
		require.NoError(t, err)
		require.True(t, s.Counts.SentEstimated)
		require.False(t, s.SentByType)
		require.Equal(t, []admin.TypeCounts{{Type: "a", Pending: 1, Due: 1}}, s.ByType,
			"SENT rows not counted by type; the type with SENT rows only left out")
		js, err := json.Marshal(s)
		require.NoError(t, err)
		require.Contains(t, string(js), `"sent_by_type":false`, "JSON readers can tell 0 from not counted")

		b.insert(t, row{Type: "c"})
		_, err = b.db.Pool.Exec(ctx, `DELETE FROM outbox_events_sent WHERE event_type = 'old'`)
		require.NoError(t, err)
		s, err = b.admin.Summary(ctx)
		require.NoError(t, err)
		require.True(t, s.SentByType)
		require.Equal(t, []admin.TypeCounts{{Type: "a", Pending: 1, Due: 1, Sent: 1}, {Type: "c", Pending: 1, Due: 1}}, s.ByType)
	})
}
