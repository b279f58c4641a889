package dispatcher_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// On a table migrated without migrations.Config.KeyOrder (no order
// index), a dispatcher with Ordering PerKey refuses to start with an
// *OrderIndexError that says what to set and gives the statement that
// builds the index; once that statement ran, the same dispatcher starts.
// An unordered dispatcher starts without the index.
func TestStartRefusesPerKeyWithoutOrderIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	runDispatcher(t, mustNew(t, db, baseConfig(db)))

	d := mustNew(t, db, orderedConfig(db, dispatcher.BlockKey))
	err := d.Start(ctx)
	require.ErrorIs(t, err, dispatcher.ErrNoOrderIndex)
	var oe *dispatcher.OrderIndexError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Invalid)
	require.Equal(t, db.Schema+".outbox_events_order_idx", oe.Index)
	require.Contains(t, err.Error(), "migrations.Config.KeyOrder")
	require.Contains(t, err.Error(), "CREATE INDEX CONCURRENTLY IF NOT EXISTS")

	_, err = db.Pool.Exec(ctx, oe.Create)
	require.NoError(t, err)
	runDispatcher(t, d)
}

// An INVALID order index (a CREATE INDEX CONCURRENTLY that failed) is no
// order index: Start refuses a PerKey dispatcher, saying to drop it
// first; an unordered one starts (Verify lets an invalid order index
// be).
func TestStartRefusesPerKeyOnInvalidOrderIndex(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	db.InvalidOrderIndex(t)
	runDispatcher(t, mustNew(t, db, baseConfig(db)))

	err := mustNew(t, db, orderedConfig(db, dispatcher.SkipFailed)).Start(context.Background())
	var oe *dispatcher.OrderIndexError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Invalid)
	require.Contains(t, err.Error(), oe.Drop)
	require.Contains(t, oe.Drop, "DROP INDEX CONCURRENTLY")
}

// mustNew is dispatcher.New on a pool of db's, failing the test on error.
func mustNew(t *testing.T, db *testdb.DB, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	return d
}
