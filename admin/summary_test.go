package admin_test

import (
	"context"
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
		require.Equal(t, admin.TypePending{Type: "a", Pending: 2, Due: 1, OldestDueAge: got[0].OldestDueAge}, got[0])
		require.Equal(t, admin.TypePending{Type: "b", Pending: 2, Due: 2, OldestDueAge: got[1].OldestDueAge}, got[1])
		require.InDelta(t, time.Hour.Seconds(), got[0].OldestDueAge.Seconds(), 60)
		require.InDelta(t, time.Minute.Seconds(), got[1].OldestDueAge.Seconds(), 30)

		empty, err := setup(t).admin.PendingByType(ctx)
		require.NoError(t, err)
		require.Empty(t, empty)
	})

	t.Run("PendingByTypeReadsOnlyPendingRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at)
			SELECT gen_random_uuid(), 'old', 'SENT', now() FROM generate_series(1, 20000)`)
		require.NoError(t, err)
		b.insert(t, row{Type: "a"}, row{Type: "b"})
		_, err = b.db.Pool.Exec(ctx, `ANALYZE outbox_events`)
		require.NoError(t, err)
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		a, err := admin.New(tx, admin.Config{Table: b.db.Table()})
		require.NoError(t, err)
		got, err := a.PendingByType(ctx)
		require.NoError(t, err)
		require.Len(t, got, 2)
		var seqScans int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('outbox_events'::regclass)`).Scan(&seqScans))
		require.Zero(t, seqScans, "no sequential scan of the table")
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s, err := b.admin.Summary(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), s.Counts.At, time.Minute)
		s.Counts.At = time.Time{}
		require.Equal(t, admin.Summary{}, s)
	})
}
