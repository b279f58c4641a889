package migrations_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table()}

	for range 3 {
		require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	}

	v, err := migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), v)
	tables, partitions := splitPartitions(tablesIn(t, conn, db.Schema))
	require.Equal(t, []string{"outbox_events", "outbox_events_audit", "outbox_events_dead", "outbox_events_schema_version", "outbox_events_sent_default"}, tables)
	require.Len(t, partitions, 3, "the history's partitions of now and the next two spans, created once")
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
}

// Migrate, Version and Verify take the *pgxpool.Pool a program holds, and
// acquire one connection per call: several replicas sharing pools migrate
// once, and the pool gets every connection back.
func TestMigrateThroughPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cfg := migrations.Config{Table: db.Table()}
	pool := db.NewPool(t, 2)

	v, err := migrations.Version(ctx, pool, cfg)
	require.NoError(t, err)
	require.Zero(t, v)
	require.ErrorIs(t, migrations.Verify(ctx, pool, cfg), outbox.ErrSchemaMismatch)

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = migrations.Migrate(ctx, pool, cfg) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "call %d", i)
	}
	v, err = migrations.Version(ctx, pool, cfg)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), v)
	require.NoError(t, migrations.Verify(ctx, pool, cfg))
	require.Zero(t, pool.Stat().AcquiredConns(), "every acquired connection was released")
}

func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cfg := migrations.Config{Table: db.Table()}
	const replicas = 10
	conns := make([]*pgx.Conn, replicas)
	for i := range conns {
		conns[i] = db.Conn(t)
	}

	start := make(chan struct{})
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Go(func() {
			<-start
			errs[i] = migrations.Migrate(ctx, conn, cfg)
		})
	}
	close(start)
	wg.Wait()

	for i, err := range errs {
		require.NoError(t, err, "replica %d", i)
	}
	v, err := migrations.Version(ctx, conns[0], cfg)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), v)
	tables, partitions := splitPartitions(tablesIn(t, conns[0], db.Schema))
	require.Equal(t, []string{"outbox_events", "outbox_events_audit", "outbox_events_dead", "outbox_events_schema_version", "outbox_events_sent_default"}, tables)
	require.Len(t, partitions, 3, "each partition created once")
}

func TestMigrateTwoOutboxes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// tables returns the two outboxes, in one database.
		tables func(t *testing.T) (outbox.Table, outbox.Table)
	}{
		{
			name: "SameSchemaTwoTables",
			tables: func(t *testing.T) (outbox.Table, outbox.Table) {
				db := testdb.New(t)
				return outbox.Table{Schema: db.Schema, Name: "orders_outbox"},
					outbox.Table{Schema: db.Schema, Name: "billing_outbox"}
			},
		},
		{
			name: "TwoSchemasSameTable",
			tables: func(t *testing.T) (outbox.Table, outbox.Table) {
				return testdb.New(t).Table(), testdb.New(t).Table()
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			a, b := tt.tables(t)
			conn := testdb.New(t).Conn(t)

			for _, table := range []outbox.Table{a, b} {
				require.NoError(t, migrations.Migrate(ctx, conn, migrations.Config{Table: table}))
			}
			for _, table := range []outbox.Table{a, b} {
				require.NoError(t, migrations.Verify(ctx, conn, migrations.Config{Table: table}), table.String())
			}

			insertEvent(t, conn, a)
			require.Equal(t, 1, countEvents(t, conn, a))
			require.Equal(t, 0, countEvents(t, conn, b))
		})
	}
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	tests := []struct {
		name  string
		table outbox.Table
	}{
		{"SchemaPgPrefix", outbox.Table{Schema: "pg_x"}},
		{"SchemaTooLong", outbox.Table{Schema: strings.Repeat("s", 64)}},
		{"SchemaUppercase", outbox.Table{Schema: "Outbox"}},
		{"TableInjection", outbox.Table{Schema: db.Schema, Name: `x"; DROP SCHEMA public; --`}},
		{"TableStartsWithDigit", outbox.Table{Schema: db.Schema, Name: "1events"}},
		{"TableTooLongForSuffixes", outbox.Table{Schema: db.Schema, Name: strings.Repeat("t", 49)}},
		{"TableUppercase", outbox.Table{Schema: db.Schema, Name: "Events"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			conn := db.Conn(t)
			cfg := migrations.Config{Table: tt.table}

			require.ErrorIs(t, migrations.Migrate(ctx, conn, cfg), outbox.ErrInvalidIdentifier)
			require.ErrorIs(t, migrations.Verify(ctx, conn, cfg), outbox.ErrInvalidIdentifier)
			_, err := migrations.Version(ctx, conn, cfg)
			require.ErrorIs(t, err, outbox.ErrInvalidIdentifier)
			_, err = migrations.Render(cfg)
			require.ErrorIs(t, err, outbox.ErrInvalidIdentifier)

			var schemas int
			err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", tt.table.Schema).Scan(&schemas)
			require.NoError(t, err)
			if tt.table.Schema != db.Schema {
				require.Zero(t, schemas, "schema %q was created", tt.table.Schema)
			}
			require.Empty(t, tablesIn(t, conn, db.Schema))
		})
	}
}

// An outbox at version 2 with rows in it upgrades in place: its rows keep
// their state and read 0 snoozes.
func TestMigrateUpgradesExistingTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table()}
	migrateToVersion2(t, conn, cfg)
	mustExec(t, conn, "INSERT INTO "+quoted(db.Table())+
		" (id, event_type, status, attempts, last_error_code) VALUES (gen_random_uuid(), 'x', 'FAILED', 4, 'timeout')")
	require.ErrorIs(t, migrations.Verify(ctx, conn, cfg), outbox.ErrSchemaMismatch, "version 2 is not the latest")

	require.NoError(t, migrations.Migrate(ctx, conn, cfg))

	require.NoError(t, migrations.Verify(ctx, conn, cfg))
	var status string
	var attempts, snoozes int
	require.NoError(t, conn.QueryRow(ctx, "SELECT status, attempts, snoozes FROM "+suffixed(quoted(db.Table()), "_dead")).
		Scan(&status, &attempts, &snoozes))
	require.Equal(t, "FAILED", status)
	require.Equal(t, 4, attempts)
	require.Zero(t, snoozes)
}

// migrateToVersion2 applies the rendered migrations 1 and 2 on conn, so
// that Migrate has migration 3, an ALTER TABLE, left to apply.
func migrateToVersion2(t *testing.T, conn *pgx.Conn, cfg migrations.Config) {
	t.Helper()
	applyRendered(t, conn, cfg, "001_create_outbox.up.sql", "002_started_at.up.sql")
}

// applyRendered runs the named rendered migration files on conn, in order.
func applyRendered(t *testing.T, conn *pgx.Conn, cfg migrations.Config, names ...string) {
	t.Helper()
	files, err := migrations.Render(cfg)
	require.NoError(t, err)
	for _, name := range names {
		text, err := fs.ReadFile(files, name)
		require.NoError(t, err)
		mustExec(t, conn, string(text))
	}
}

// holdTable opens a transaction on a connection of its own that inserts a
// row into table, as an application's emitting transaction does, and
// returns it still open.
func holdTable(t *testing.T, db *testdb.DB, table outbox.Table) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Conn(t).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, "INSERT INTO "+quoted(table)+" (id, event_type) VALUES (gen_random_uuid(), 'held')")
	require.NoError(t, err)
	return tx
}

// While an open transaction that emitted holds the table, Migrate's
// ALTER TABLE gives up its place in the lock queue after its lock_timeout
// and tries again later, so writers wait for it at most that long; once
// the holder commits, a retry succeeds.
func TestMigrateWaitsForAHeldTableWithoutStallingWriters(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table()}
	migrateToVersion2(t, conn, cfg)
	holder := holdTable(t, db, db.Table())

	migrated := make(chan error, 1)
	go func() { migrated <- migrations.Migrate(ctx, conn, cfg) }()
	waitForLockWaiter(ctx, t, db, db.Table()) // the ALTER TABLE is queued behind the holder

	// The holder commits only after the write: a writer that waited for
	// it would never return (the run's budget would end it).
	writer := db.Conn(t)
	start := time.Now()
	_, err := writer.Exec(ctx, "INSERT INTO "+quoted(db.Table())+" (id, event_type) VALUES (gen_random_uuid(), 'later')")
	require.NoError(t, err, "a writer waits behind the migration at most its lock_timeout, not until the holder commits")
	t.Logf("the writer waited %s behind the migration", time.Since(start).Round(time.Millisecond))

	require.NoError(t, holder.Commit(ctx))
	require.NoError(t, <-migrated)
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
}

// When the holder stays open, Migrate gives up after its bounded retries
// with an error that says another transaction holds the table, and leaves
// the table at version 2 and free for writers.
func TestMigrateGivesUpOnATableHeldThroughItsRetries(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table()}
	migrateToVersion2(t, conn, cfg)
	holdTable(t, db, db.Table())

	start := time.Now()
	err := migrations.Migrate(ctx, conn, cfg)
	require.ErrorContains(t, err, "another transaction holds a lock on "+db.Table().String())
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code)
	require.NoError(t, ctx.Err(), "Migrate gave up by itself, not at the end of the run's budget")
	t.Logf("Migrate gave up after %s", time.Since(start).Round(time.Millisecond))

	v, err := migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Equal(t, int32(2), v)
	_, err = db.Conn(t).Exec(ctx, "INSERT INTO "+quoted(db.Table())+" (id, event_type) VALUES (gen_random_uuid(), 'after')")
	require.NoError(t, err)
}

// waitForLockWaiter returns once a session waits for a lock on table.
func waitForLockWaiter(ctx context.Context, t *testing.T, db *testdb.DB, table outbox.Table) {
	t.Helper()
	observer := db.Conn(t)
	testctx.Await(t, "a session waiting for a lock on "+table.String(), func() bool {
		var waiting bool
		err := observer.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_locks WHERE relation = $1::regclass AND NOT granted)",
			quoted(table)).Scan(&waiting)
		return err == nil && waiting
	})
}

// An outbox at version 1 with keyed and keyless rows in every status
// upgrades to version 7 in place: the rows keep their state, skipped_at is
// empty, and the order index holds exactly the keyed rows that are not
// SENT (a SENT row can never block its key; a keyless row has no key),
// and keeps it at version 12 with Config.KeyOrder.
func TestMigrateFromVersion1AddsKeyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, cfg, table := version1(t)
	cfg.KeyOrder = true // version 12 keeps the order index
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, status, partition_key, aggregate_id, lock_token, lease_until)
		SELECT gen_random_uuid(), 'x', s.status, k.pk, k.agg,
			CASE WHEN s.status = 'PROCESSING' THEN gen_random_uuid() END,
			CASE WHEN s.status = 'PROCESSING' THEN now() + interval '1 minute' END
		FROM (VALUES ('PENDING'), ('PROCESSING'), ('SENT'), ('FAILED')) AS s(status)
		CROSS JOIN (VALUES ('p', NULL), (NULL, 'a'), ('p', 'a'), (NULL, NULL)) AS k(pk, agg)`)

	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))

	requireRowsPerStatus(t, conn, table)

	// Read the keyed rows through the order indexes only.
	n := countThrough(t, conn, table, db.Table().Name+"_order_idx",
		"status <> 'SENT' AND coalesce(partition_key, aggregate_id) IS NOT NULL")
	require.Equal(t, 6, n, "3 keyed rows in each of PENDING and PROCESSING")
	n = countThrough(t, conn, suffixed(table, "_dead"), db.Table().Name+"_dead_order_idx",
		"coalesce(partition_key, aggregate_id) IS NOT NULL")
	require.Equal(t, 3, n, "3 keyed FAILED rows")
}

func mustExecTx(t *testing.T, tx pgx.Tx, sql string) {
	t.Helper()
	_, err := tx.Exec(context.Background(), sql)
	require.NoError(t, err)
}

// An outbox at version 1 with rows in every status, keyed and not, with
// and without an error code, upgrades to version 8 in place: the rows
// keep their state, and the operator indexes, under their version 5
// names, hold every row but the PROCESSING ones. Down to version 7 makes
// them full again, and Migrate then upgrades again.
func TestMigrateFromVersion1ToListIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, cfg, table := version1(t)
	insertEveryStatus(t, conn, table)

	applyRendered(t, conn, cfg, upTo8...)
	requireRowsPerStatus(t, conn, table)
	requireListIndexes(t, conn, db.Table(), table)
	require.Empty(t, indexesOf(t, conn, db.Table(), "_seq_list_idx", "_type_list_idx", "_agg_list_idx", "_code_list_idx"))

	files, err := migrations.Render(cfg)
	require.NoError(t, err)
	for _, name := range []string{"008_list_indexes.down.sql"} {
		down, err := fs.ReadFile(files, name)
		require.NoError(t, err)
		mustExec(t, conn, string(down))
	}
	v, err := migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 7, v)
	name := db.Table().Name
	require.Equal(t, 16, countThrough(t, conn, table, name+"_seq_idx", "seq > 0"), "the full index of version 5 is back")
	require.Empty(t, indexesOf(t, conn, db.Table(), "_seq_list_idx", "_type_list_idx", "_agg_list_idx", "_code_list_idx"))
	requireRowsPerStatus(t, conn, table)

	applyRendered(t, conn, cfg, "008_list_indexes.up.sql")
	requireListIndexes(t, conn, db.Table(), table)
	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
	requireRowsPerStatus(t, conn, table)
}

// upTo8 are the rendered up migrations from version 2 to 8.
var upTo8 = []string{"002_started_at.up.sql", "003_snoozes.up.sql", "004_finished_idx.up.sql",
	"005_operator_indexes.up.sql", "006_type_due_index.up.sql", "007_key_order.up.sql", "008_list_indexes.up.sql"}

// insertEveryStatus inserts 16 rows of type x into table: 4 of each
// status, keyed by aggregate or not, with an error code or not.
func insertEveryStatus(t *testing.T, conn *pgx.Conn, table string) {
	t.Helper()
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type, status, aggregate_id, last_error_code, lock_token, lease_until)
		SELECT gen_random_uuid(), 'x', s.status, a.agg, c.code,
			CASE WHEN s.status = 'PROCESSING' THEN gen_random_uuid() END,
			CASE WHEN s.status = 'PROCESSING' THEN now() + interval '1 minute' END
		FROM (VALUES ('PENDING'), ('PROCESSING'), ('SENT'), ('FAILED')) AS s(status)
		CROSS JOIN (VALUES ('a'), (NULL)) AS a(agg) CROSS JOIN (VALUES ('handler_error'), (NULL)) AS c(code)`)
}

// requireListIndexes checks that the four operator indexes of version 8
// hold the rows of insertEveryStatus that are not
// PROCESSING.
func requireListIndexes(t *testing.T, conn *pgx.Conn, tb outbox.Table, table string) {
	t.Helper()
	for _, c := range []struct {
		index, where string
		want         int
	}{
		{"_seq_idx", "status <> 'PROCESSING' AND seq > 0", 12},
		{"_type_idx", "status <> 'PROCESSING' AND event_type = 'x'", 12},
		{"_aggregate_idx", "status <> 'PROCESSING' AND aggregate_id = 'a'", 6},
		{"_code_idx", "status <> 'PROCESSING' AND last_error_code = 'handler_error'", 6},
	} {
		require.Equal(t, c.want, countThrough(t, conn, table, tb.Name+c.index, c.where), c.index)
	}
}

// Migration 008 finds the new indexes an operator built CONCURRENTLY
// beforehand, and rebuilds one that a failed CONCURRENTLY build left
// INVALID (simulated by marking it so) instead of renaming it into place:
// Verify then passes and every list index is valid.
func TestMigrate008UsesPrebuiltIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, cfg, table := version1(t)
	insertEveryStatus(t, conn, table)
	name := db.Table().Name
	mustExec(t, conn, `CREATE INDEX CONCURRENTLY `+name+`_seq_list_idx ON `+table+` (seq) WHERE status <> 'PROCESSING'`)
	mustExec(t, conn, `CREATE INDEX CONCURRENTLY `+name+`_type_list_idx ON `+table+` (event_type, seq) WHERE status <> 'PROCESSING'`)
	mustExec(t, conn, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass('`+db.Table().Schema+`.`+name+`_type_list_idx')`)

	applyRendered(t, conn, cfg, upTo8...)
	requireListIndexes(t, conn, db.Table(), table)
	var invalid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND NOT i.indisvalid`,
		db.Table().Schema, name).Scan(&invalid))
	require.Zero(t, invalid)
	require.Empty(t, indexesOf(t, conn, db.Table(), "_seq_list_idx", "_type_list_idx", "_agg_list_idx", "_code_list_idx"))
}

// requireRowsPerStatus checks that the outbox holds the 4 rows of each
// status insertEveryStatus inserted: in table before version 10; from
// version 10 on, FAILED rows in the dead letters and, once Migrate has
// swept them, SENT rows in the history.
func requireRowsPerStatus(t *testing.T, conn *pgx.Conn, table string) {
	t.Helper()
	from := table
	var lean bool
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, suffixed(table, "_dead")).Scan(&lean))
	if lean {
		from = `(SELECT status FROM ` + table + ` UNION ALL SELECT status FROM ` + suffixed(table, "_dead") + `
			UNION ALL SELECT status FROM ` + suffixed(table, "_sent") + `) AS u`
	}
	var perStatus map[string]int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT jsonb_object_agg(status, n) FROM (
		SELECT status, count(*) AS n FROM `+from+` GROUP BY status) AS c`).Scan(&perStatus))
	require.Equal(t, map[string]int{"PENDING": 4, "PROCESSING": 4, "SENT": 4, "FAILED": 4}, perStatus)
}

// countThrough counts the rows of table matching where, read through
// index only (the test fails if the plan takes another path).
func countThrough(t *testing.T, conn *pgx.Conn, table, index, where string) int {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	mustExecTx(t, tx, `SET LOCAL enable_seqscan = off`)
	mustExecTx(t, tx, `SET LOCAL enable_bitmapscan = off`)
	query := `SELECT count(*) FROM ` + table + ` WHERE ` + where
	var plan string
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+query).Scan(&plan))
	require.Contains(t, plan, `"`+index+`"`, query)
	var n int
	require.NoError(t, tx.QueryRow(ctx, query).Scan(&n))
	return n
}

// indexesOf returns those of the indexes named table name + suffix that
// exist.
func indexesOf(t *testing.T, conn *pgx.Conn, table outbox.Table, suffixes ...string) []string {
	t.Helper()
	names := make([]string, len(suffixes))
	for i, s := range suffixes {
		names[i] = table.Name + s
	}
	rows, err := conn.Query(context.Background(), `SELECT c.relname::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'i' AND c.relname = ANY ($2::text[]) ORDER BY 1`, table.Schema, names)
	require.NoError(t, err)
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return found
}

// version1 creates an outbox at schema version 1 in a database of its
// own, and returns its connection, config and quoted table name.
func version1(t *testing.T) (*testdb.DB, *pgx.Conn, migrations.Config, string) {
	t.Helper()
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table()}
	applyRendered(t, conn, cfg, "001_create_outbox.up.sql")
	return db, conn, cfg, quoted(db.Table())
}

// An outbox at version 8 with rows in every status upgrades to version 9
// in place: the rows keep their state and have no outcome token (no
// completion of version 9 recorded them), and the column holds no index.
// Down to version 8 drops the column, and Migrate then upgrades again.
func TestMigrateFromVersion8AddsOutcomeToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn, cfg, table := version1(t)
	applyRendered(t, conn, cfg, "002_started_at.up.sql", "003_snoozes.up.sql", "004_finished_idx.up.sql",
		"005_operator_indexes.up.sql", "006_type_due_index.up.sql", "007_key_order.up.sql", "008_list_indexes.up.sql")
	insertEveryStatus(t, conn, table)
	v, err := migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 8, v)

	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
	requireRowsPerStatus(t, conn, table)
	var tokens, indexed int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(outcome_token) FROM `+table).Scan(&tokens))
	require.Zero(t, tokens)
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_index x JOIN pg_attribute a
		ON a.attrelid = x.indrelid AND a.attnum = ANY (x.indkey)
		WHERE x.indrelid = $1::regclass AND a.attname = 'outcome_token'`, table).Scan(&indexed))
	require.Zero(t, indexed, "no index holds outcome_token")

	files, err := migrations.Render(cfg)
	require.NoError(t, err)
	for _, name := range []string{"013_audit.down.sql", "011_lean_indexes.down.sql", "010_lean_tables.down.sql", "009_outcome_token.down.sql"} {
		down, err := fs.ReadFile(files, name)
		require.NoError(t, err)
		mustExec(t, conn, string(down))
	}
	v, err = migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 8, v)
	var columns int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attname = 'outcome_token' AND NOT attisdropped`, table).Scan(&columns))
	require.Zero(t, columns)
	requireRowsPerStatus(t, conn, table)

	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
	requireRowsPerStatus(t, conn, table)
}

// Down to version 9 refuses, changing nothing, when an event id is in
// more than one of the three tables (an event emitted again with the id
// of a dead letter): the outbox table's primary key could not hold both.
func TestDownToVersion9RefusesRepeatedIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table()}
	table := quoted(db.Table())
	id := "0190c5a0-0000-7000-8000-000000000001"
	mustExec(t, conn, `INSERT INTO `+table+` (id, event_type) VALUES ($1, 'again')`, id)
	mustExec(t, conn, `INSERT INTO `+db.Schema+`.outbox_events_dead (id, seq, event_type, failed_at) VALUES ($1, 1, 'old', now())`, id)
	files, err := migrations.Render(cfg)
	require.NoError(t, err)
	down, err := fs.ReadFile(files, "010_lean_tables.down.sql")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, string(down))
	require.ErrorContains(t, err, "is in more than one of the outbox table")
	var dead int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+db.Schema+`.outbox_events_dead`).Scan(&dead))
	require.Equal(t, 1, dead)
}
