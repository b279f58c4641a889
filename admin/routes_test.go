package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestExecModes runs every Admin call in each pgx query exec mode,
// directly and through PgBouncer in transaction mode.
func TestExecModes(t *testing.T) {
	t.Parallel()
	testdb.ForEachRoute(t, func(t *testing.T, r testdb.Route) {
		ctx := context.Background()
		b := setup(t)
		a, err := admin.New(b.db.RoutePool(t, r, 2), admin.Config{Table: b.db.Table()})
		require.NoError(t, err)
		failedRows := many(3, row{Status: "FAILED", Type: "f", Code: "handler_error", FailedAgo: time.Hour,
			Payload: []byte(`{"n":1}`), Headers: map[string]string{"h": "v"},
			AttemptLog: `[{"attempt":1,"outcome":"failed","code":"handler_error","message":"boom","owner":"w",` +
				`"started":"2024-01-01T00:00:00Z","ended":"2024-01-01T00:00:01Z"}]`})
		failedRows[1].Aggregate = "o-1"
		failed := b.insert(t, failedRows...)
		b.insert(t, many(2, row{Status: "SENT", SentAgo: time.Hour})...)

		c, err := a.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), c.Failed)
		require.Equal(t, int64(2), c.Sent)

		page, err := a.List(ctx, admin.ListParams{Status: outbox.StatusFailed, Type: "f", Limit: 2})
		require.NoError(t, err)
		require.Equal(t, failed[:2], []uuid.UUID{page.Events[0].ID, page.Events[1].ID})
		page, err = a.List(ctx, admin.ListParams{After: page.Next, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, failed[2], page.Events[0].ID)
		page, err = a.List(ctx, admin.ListParams{AggregateID: "o-1", Code: outbox.CodeHandlerError})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{failed[1]}, ids(page.Events))

		s, err := a.Summary(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), s.Counts.Failed)
		require.Equal(t, []admin.TypeCounts{{Type: "f", Failed: 3}, {Type: "test.event", Sent: 2}}, s.ByType)
		require.Equal(t, []admin.CodeCount{{Code: outbox.CodeHandlerError, Count: 3}}, s.FailedByCode)

		d, err := a.Inspect(ctx, failed[0])
		require.NoError(t, err)
		require.Equal(t, []byte(`{"n":1}`), d.Payload)
		require.Equal(t, map[string]string{"h": "v"}, d.Headers)
		require.Len(t, d.AttemptLog, 1)
		require.NotNil(t, d.FailedAt)

		res, err := a.Replay(ctx, admin.ReplayParams{IDs: failed[:1], DryRun: true})
		require.NoError(t, err)
		require.Equal(t, failed[:1], res.Replayed)
		res, err = a.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{failed[0], uuid.New()}})
		require.NoError(t, err)
		require.Equal(t, failed[:1], res.Replayed)
		require.Len(t, res.Skipped, 1)
		res, err = a.Replay(ctx, admin.ReplayParams{Type: "f", Code: "handler_error", FailedBefore: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.ElementsMatch(t, failed[1:], res.Replayed)

		n, err := a.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: time.Minute, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		n, err = a.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: time.Minute})
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		require.Equal(t, 3, b.countWhere(t, "status = 'PENDING'"))
	})
}
