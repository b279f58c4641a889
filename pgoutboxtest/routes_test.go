package pgoutboxtest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/pgoutboxtest"
)

// TestExecModes runs every assertion and DispatchUntilIdle in each pgx
// query exec mode, directly and through PgBouncer in transaction mode
// (with the listener connected to PostgreSQL directly), in a transaction
// and on a pool.
func TestExecModes(t *testing.T) {
	t.Parallel()
	testdb.ForEachRoute(t, func(t *testing.T, r testdb.Route) {
		ctx := context.Background()
		b := setup(t)
		pool := b.db.RoutePool(t, r, 4)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = b.emitter.Emit(ctx, tx, jsonEvent("a", "1", `{"n":1}`), jsonEvent("b", "2", `{}`))
		require.NoError(t, err)

		for _, db := range []pgoutboxtest.DB{tx, pool} {
			if db == pool {
				require.NoError(t, tx.Commit(ctx))
			}
			got := pgoutboxtest.RequireEmitted(ctx, t, db, b.table, pgoutboxtest.Want{
				Type: "a", PayloadJSON: map[string]int{"n": 1}, Status: outbox.StatusPending,
			})
			require.Equal(t, []byte(`{"n":1}`), got.Payload)
			pgoutboxtest.RequireManyEmitted(ctx, t, db, b.table, pgoutboxtest.Want{Type: "a"}, pgoutboxtest.Want{Type: "b"})
			pgoutboxtest.RequireManyEmitted(ctx, t, db, b.table, pgoutboxtest.Want{AggregateID: "1"}, pgoutboxtest.Want{AggregateID: "2"})
			pgoutboxtest.RequireNotEmitted(ctx, t, db, b.table, pgoutboxtest.Want{Type: "c"})
			msg := requireFails(t, func(tb pgoutboxtest.TB) {
				pgoutboxtest.RequireEmitted(ctx, tb, db, b.table, pgoutboxtest.Want{Type: "c"})
			})
			require.Contains(t, msg, "the table holds 2 events")
		}

		cfg := b.config()
		if r.Bouncer != nil {
			cfg.ListenerConnConfig = b.db.DirectConnConfig(t)
		}
		ok := func(context.Context, outbox.Event) error { return nil }
		res := pgoutboxtest.DispatchUntilIdle(ctx, t, pool, cfg, map[string]outbox.Handler{"a": ok, "b": ok})
		require.Equal(t, int64(2), res.Counts.Sent)
	})
}
