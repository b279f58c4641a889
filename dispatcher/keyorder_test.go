package dispatcher_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/keyorder"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// On a table migrated without migrations.Config.KeyOrder (no order
// index), a dispatcher with Ordering PerKey whose role owns the table
// builds the index at Start and runs; an unordered dispatcher starts
// without building it.
func TestPerKeyStartBuildsMissingOrderIndex(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	runDispatcher(t, mustNew(t, db, baseConfig(db)))
	require.Equal(t, keyorder.Missing, orderIndexState(t, db), "an unordered dispatcher builds nothing")

	runDispatcher(t, mustNew(t, db, orderedConfig(db, dispatcher.BlockKey)))
	require.Equal(t, keyorder.Valid, orderIndexState(t, db))
}

// A PerKey dispatcher whose role does not own the table cannot build the
// missing order index: Start refuses with an *OrderIndexError that says
// what to set, gives the statement that builds the index and wraps the
// build's error; once the owner ran that statement, the same dispatcher
// starts.
func TestStartRefusesPerKeyWithoutOrderIndexItCannotBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	role, _ := newGrantedRole(t, db, "pgotest_keyorder", `GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
`+finishedGrants)
	d, err := dispatcher.New(db.RolePool(t, role, 4), orderedConfig(db, dispatcher.BlockKey))
	require.NoError(t, err)
	err = d.Start(ctx)
	require.ErrorIs(t, err, dispatcher.ErrNoOrderIndex)
	var oe *dispatcher.OrderIndexError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Invalid)
	require.Equal(t, pgerr.InsufficientPrivilege, pgerr.Code(oe.Cause), "the build's own error: %v", err)
	require.Equal(t, db.Schema+".outbox_events_order_idx", oe.Index)
	require.Contains(t, err.Error(), "migrations.Config.KeyOrder")
	require.Contains(t, err.Error(), "CREATE INDEX CONCURRENTLY IF NOT EXISTS")
	require.Equal(t, keyorder.Missing, orderIndexState(t, db))

	_, err = db.Pool.Exec(ctx, oe.Create)
	require.NoError(t, err)
	runDispatcher(t, d)
}

// orderIndexState reads the state of db's order index.
func orderIndexState(t *testing.T, db *testdb.DB) keyorder.State {
	t.Helper()
	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	state, err := keyorder.Read(context.Background(), db.Pool, names)
	require.NoError(t, err)
	return state
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
