package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestExecModes records, deduplicates, forgets and purges in each pgx
// query exec mode, directly and through PgBouncer in transaction mode.
func TestExecModes(t *testing.T) {
	t.Parallel()
	testdb.ForEachRoute(t, func(t *testing.T, r testdb.Route) {
		ctx := context.Background()
		b := setup(t)
		pool := b.db.RoutePool(t, r, 2)
		// Through PgBouncer there is no search_path: qualify the table.
		effects := pgx.Identifier{b.db.Schema, "effects"}.Sanitize()
		process := func(e outbox.Event, work inbox.WorkFunc) (inbox.Result, error) {
			var res inbox.Result
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				res, err = b.ib.Process(ctx, tx, "c", e, work)
				return err
			})
			return res, err
		}
		write := func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (consumer, event_id) VALUES ('c', gen_random_uuid())")
			return err
		}

		e := newEvent(`{"n":1}`)
		res, err := process(e, write)
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		res, err = process(e, write)
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		other := e
		other.Payload = []byte(`{"n":2}`)
		_, err = process(other, write)
		var conflict *inbox.ConflictError
		require.ErrorAs(t, err, &conflict)

		boom := errors.New("boom")
		failing := newEvent("x")
		_, err = process(failing, func(context.Context, pgx.Tx) error { return boom })
		require.ErrorIs(t, err, boom)

		// Forget, in a tx that goes on: the work failed, the caller commits.
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := b.ib.Process(ctx, tx, "c", failing, func(context.Context, pgx.Tx) error { return boom })
			require.ErrorIs(t, err, boom)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 1, b.records(t))
		require.Equal(t, 1, b.count(t, "SELECT count(*) FROM effects"))

		_, err = b.db.Pool.Exec(ctx, "UPDATE outbox_inbox SET processed_at = now() - interval '2 hours'")
		require.NoError(t, err)
		n, err := b.ib.Purge(ctx, pool, time.Hour, 10)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})
}
