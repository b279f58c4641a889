package dispatcher_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/keyorder"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
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

// An INVALID order index with no build running (a CREATE INDEX
// CONCURRENTLY that failed) is no order index: a PerKey dispatcher whose
// role owns the table drops it and builds it again; an unordered one
// starts without touching it (Verify lets an invalid order index be).
func TestPerKeyStartRebuildsInvalidOrderIndex(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	db.InvalidOrderIndex(t)
	runDispatcher(t, mustNew(t, db, baseConfig(db)))
	require.Equal(t, keyorder.Invalid, orderIndexState(t, db))

	runDispatcher(t, mustNew(t, db, orderedConfig(db, dispatcher.SkipFailed)))
	require.Equal(t, keyorder.Valid, orderIndexState(t, db))
	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	var def string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT pg_get_indexdef(i.indexrelid) FROM pg_index AS i
		JOIN pg_class AS c ON c.oid = i.indexrelid WHERE c.relname = $1 AND c.relnamespace = $2::regnamespace`,
		names.Object(sqlname.SuffixOrderIndex), db.Schema).Scan(&def))
	require.Contains(t, def, "COALESCE(partition_key, aggregate_id)", "the order index's definition, not the failed one's")
}

// Replicas that start at once on a table without the order index all
// start: one builds it, the others wait for that build (or lose the
// race for the table's lock and find it built).
func TestPerKeyReplicasStartingAtOnceShareOneBuild(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	ds := make([]*dispatcher.Dispatcher, 3)
	for i := range ds {
		ds[i] = mustNew(t, db, orderedConfig(db, dispatcher.BlockKey))
	}
	for i, d := range ds {
		wg.Go(func() { errs[i] = d.Start(testctx.New(t)) })
	}
	wg.Wait()
	for i, d := range ds {
		require.NoError(t, errs[i], "replica %d", i)
		require.NoError(t, d.Stop(testctx.New(t)))
	}
	require.Equal(t, keyorder.Valid, orderIndexState(t, db))
}

// mustNew is dispatcher.New on a pool of db's, failing the test on error.
func mustNew(t *testing.T, db *testdb.DB, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	return d
}
