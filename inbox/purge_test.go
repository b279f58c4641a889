package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DeletesOnlyOldRowsInBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		recordEvents(t, b, 25, "2 hours")
		recordEvents(t, b, 5, "0 seconds")
		logBatches(t, b)

		n, err := b.ib.Purge(ctx, b.db.Pool, time.Hour, 10)

		require.NoError(t, err)
		require.Equal(t, int64(25), n)
		require.Equal(t, 5, b.records(t))
		require.Zero(t, b.count(t, "SELECT count(*) FROM outbox_inbox WHERE processed_at < now() - interval '1 hour'"))
		rows, err := b.db.Pool.Query(ctx, "SELECT n FROM purge_batches ORDER BY at, n DESC")
		require.NoError(t, err)
		batches, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		require.Equal(t, []int{10, 10, 5}, batches)
	})

	t.Run("InvalidInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		recordEvents(t, b, 3, "2 hours")
		for _, args := range []struct {
			olderThan time.Duration
			batchSize int
			arg       string
		}{
			{0, 10, "olderThan"},
			{-time.Hour, 10, "olderThan"},
			{time.Hour, 0, "batchSize"},
			{time.Hour, inbox.MaxBatchSize + 1, "batchSize"},
		} {
			n, err := b.ib.Purge(ctx, b.db.Pool, args.olderThan, args.batchSize)
			var inputErr *outbox.InputError
			require.ErrorAs(t, err, &inputErr)
			require.Equal(t, args.arg, inputErr.Field)
			require.Zero(t, n)
		}
		n, err := b.ib.Purge(ctx, nil, time.Hour, 10)
		var inputErr *outbox.InputError
		require.ErrorAs(t, err, &inputErr)
		require.Equal(t, "db", inputErr.Field)
		require.Zero(t, n)
		require.Equal(t, 3, b.records(t))
	})

	t.Run("NothingOld", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		recordEvents(t, b, 3, "59 minutes")

		n, err := b.ib.Purge(ctx, b.db.Pool, time.Hour, 10)

		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, 3, b.records(t))
	})
}

// recordEvents processes n new events and then backdates their records by
// age (a PostgreSQL interval).
func recordEvents(t *testing.T, b *testBundle, n int, age string) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	var calls atomic.Int64
	for range n {
		e := newEvent(`{}`)
		_, err := b.ib.Process(ctx, tx, "billing", e, effect("billing", e.ID, &calls))
		require.NoError(t, err)
	}
	_, err = tx.Exec(ctx, "UPDATE outbox_inbox SET processed_at = now() - $1::interval WHERE processed_at = now()", age)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// logBatches makes every DELETE on the inbox table log how many rows it
// removed into purge_batches.
func logBatches(t *testing.T, b *testBundle) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `
CREATE TABLE purge_batches (at timestamptz NOT NULL DEFAULT clock_timestamp(), n int NOT NULL);
CREATE FUNCTION log_purge() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO purge_batches (n) SELECT count(*) FROM old_rows;
	RETURN NULL;
END $$;
CREATE TRIGGER log_purge AFTER DELETE ON outbox_inbox
	REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION log_purge();`)
	require.NoError(t, err)
}
