package migrations_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// orderIdx is the order index's suffix.
const orderIdx = "_order_idx"

// orderIndexState returns "missing", "invalid" or "valid" for the order
// index of db's outbox table.
func orderIndexState(t *testing.T, conn *pgx.Conn, db *testdb.DB) string {
	t.Helper()
	var state string
	err := conn.QueryRow(context.Background(), `SELECT coalesce((SELECT CASE WHEN x.indisvalid THEN 'valid' ELSE 'invalid' END
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_namespace n ON n.oid = i.relnamespace
		WHERE n.nspname = $1 AND i.relname = $2), 'missing')`, db.Schema, db.Table().Name+orderIdx).Scan(&state)
	require.NoError(t, err)
	return state
}

// insertKeyed adds 3 PENDING events with an order key and 1 without.
func insertKeyed(t *testing.T, conn *pgx.Conn, table string) {
	t.Helper()
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, aggregate_id, partition_key)
		VALUES (gen_random_uuid(), 'x', 'a', NULL), (gen_random_uuid(), 'x', NULL, 'p'),
			(gen_random_uuid(), 'x', 'a', 'p'), (gen_random_uuid(), 'x', NULL, NULL)`)
}

// keyedThroughIndex counts the keyed rows through the order index only.
func keyedThroughIndex(t *testing.T, conn *pgx.Conn, db *testdb.DB) int {
	t.Helper()
	return countThrough(t, conn, quoted(db.Table()), db.Table().Name+orderIdx,
		"status <> 'SENT' AND coalesce(partition_key, aggregate_id) IS NOT NULL")
}

// A fresh install has no order index without Config.KeyOrder and a valid
// one with it; Verify accepts both.
func TestKeyOrderFreshInstall(t *testing.T) {
	t.Parallel()
	for _, keyOrder := range []bool{false, true} {
		db := testdb.New(t)
		conn := db.Conn(t)
		cfg := migrations.Config{Table: db.Table(), KeyOrder: keyOrder}
		require.NoError(t, migrations.Migrate(context.Background(), conn, cfg))
		want := map[bool]string{false: "missing", true: "valid"}[keyOrder]
		require.Equal(t, want, orderIndexState(t, conn, db), "KeyOrder %t", keyOrder)
		require.NoError(t, migrations.Verify(context.Background(), conn, migrations.Config{Table: db.Table()}))
	}
}

// An outbox at version 11 with rows upgrades to 12 keeping every row:
// without KeyOrder the order index goes, with it the index stays and
// holds the keyed rows.
func TestKeyOrderUpgradeFromVersion11(t *testing.T) {
	t.Parallel()
	for _, keyOrder := range []bool{false, true} {
		ctx := context.Background()
		db, conn, cfg, table := version9(t)
		applyRendered(t, conn, cfg, "010_lean_tables.up.sql", "011_lean_indexes.up.sql")
		insertEveryStatus(t, conn, table)
		cfg.KeyOrder = keyOrder
		require.NoError(t, migrations.Migrate(ctx, conn, cfg))
		require.NoError(t, migrations.Verify(ctx, conn, cfg))
		requireRowsPerStatus(t, conn, table)
		if !keyOrder {
			require.Equal(t, "missing", orderIndexState(t, conn, db))
			continue
		}
		require.Equal(t, "valid", orderIndexState(t, conn, db))
		require.Equal(t, 4, keyedThroughIndex(t, conn, db), "the keyed PENDING and PROCESSING rows")
	}
}

// KeyOrder turned on after version 12 was applied without it: Migrate
// builds the index (concurrently), which then holds the rows emitted
// before. A later Migrate without KeyOrder (another replica) leaves it.
func TestKeyOrderTurnedOnLaterAndLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	conn := db.Conn(t)
	insertKeyed(t, conn, quoted(db.Table()))
	require.Equal(t, "missing", orderIndexState(t, conn, db))

	require.NoError(t, migrations.Migrate(ctx, conn, migrations.Config{Table: db.Table(), KeyOrder: true}))
	require.Equal(t, "valid", orderIndexState(t, conn, db))
	require.Equal(t, 3, keyedThroughIndex(t, conn, db))
	require.NoError(t, migrations.Verify(ctx, conn, migrations.Config{Table: db.Table()}), "the definition built matches")

	require.NoError(t, migrations.Migrate(ctx, conn, migrations.Config{Table: db.Table()}))
	require.Equal(t, "valid", orderIndexState(t, conn, db), "Migrate without KeyOrder left the index")
}

// Replicas migrating with KeyOrder at once build the index once between
// them: each returns with it valid, none drops the one another builds.
func TestKeyOrderConcurrentBuilds(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertKeyed(t, db.Conn(t), quoted(db.Table()))
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		conn := db.Conn(t)
		wg.Go(func() {
			errs[i] = migrations.Migrate(context.Background(), conn, migrations.Config{Table: db.Table(), KeyOrder: true})
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "replica %d", i)
	}
	require.Equal(t, "valid", orderIndexState(t, db.Conn(t), db))
}

// An INVALID index left by a failed concurrent build: Verify lets it be
// (no dispatcher but a PerKey one reads it, and those check it at start);
// Migrate with KeyOrder drops it and builds the index again.
func TestKeyOrderRebuildsAnInvalidIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	conn := db.Conn(t)
	db.InvalidOrderIndex(t)
	require.Equal(t, "invalid", orderIndexState(t, conn, db))
	require.NoError(t, migrations.Verify(ctx, conn, migrations.Config{Table: db.Table()}))

	require.NoError(t, migrations.Migrate(ctx, conn, migrations.Config{Table: db.Table(), KeyOrder: true}))
	require.Equal(t, "valid", orderIndexState(t, conn, db))
	require.NoError(t, migrations.Verify(ctx, conn, migrations.Config{Table: db.Table()}), "the rebuilt index has the order index's definition")
}

// Down from version 12 builds the order index again (dispatchers of
// version 11 need it), also over an invalid leftover, and sets fillfactor
// 80 again; Migrate without KeyOrder then applies 12 again: it drops the
// index and sets fillfactor 50 (every renewal a HOT update, see
// 012_key_order_optional.sql).
func TestKeyOrderDownFromVersion12(t *testing.T) {
	t.Parallel()
	for _, invalid := range []bool{false, true} {
		ctx := context.Background()
		db := testdb.NewMigrated(t)
		conn := db.Conn(t)
		cfg := migrations.Config{Table: db.Table()}
		insertKeyed(t, conn, quoted(db.Table()))
		if invalid {
			db.InvalidOrderIndex(t)
		}
		applyRendered(t, conn, cfg, "013_audit.down.sql", "012_key_order_optional.down.sql")
		v, err := migrations.Version(ctx, conn, cfg)
		require.NoError(t, err)
		require.EqualValues(t, 11, v)
		require.Equal(t, "valid", orderIndexState(t, conn, db))
		require.Equal(t, 3, keyedThroughIndex(t, conn, db))
		require.Equal(t, "80", fillfactor(t, conn, db))

		require.NoError(t, migrations.Migrate(ctx, conn, cfg))
		require.Equal(t, "missing", orderIndexState(t, conn, db))
		require.Equal(t, "50", fillfactor(t, conn, db))
	}
}

// fillfactor reads the outbox table's fillfactor storage parameter.
func fillfactor(t *testing.T, conn *pgx.Conn, db *testdb.DB) string {
	t.Helper()
	var ff string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT coalesce((SELECT split_part(o, '=', 2) FROM unnest(reloptions) AS o
		WHERE o LIKE 'fillfactor=%'), '') FROM pg_class WHERE oid = $1::regclass`, quoted(db.Table())).Scan(&ff))
	return ff
}

// Render writes version 12 for the choice made: without KeyOrder its up
// file drops the order index, with it the up file leaves it; the down
// file builds it either way.
func TestRenderKeyOrder(t *testing.T) {
	t.Parallel()
	for _, keyOrder := range []bool{false, true} {
		files, err := migrations.Render(migrations.Config{KeyOrder: keyOrder})
		require.NoError(t, err)
		up, err := fs.ReadFile(files, "012_key_order_optional.up.sql")
		require.NoError(t, err)
		drops := strings.Contains(string(up), `DROP INDEX IF EXISTS "public"."outbox_events_order_idx";`)
		require.Equal(t, !keyOrder, drops, "KeyOrder %t:\n%s", keyOrder, up)
		require.Contains(t, string(up), "UPDATE "+`"public"."outbox_events_schema_version"`+" SET version = 12;")
		down, err := fs.ReadFile(files, "012_key_order_optional.down.sql")
		require.NoError(t, err)
		require.Contains(t, string(down), `CREATE INDEX IF NOT EXISTS "outbox_events_order_idx" ON "public"."outbox_events"`)
	}
}
