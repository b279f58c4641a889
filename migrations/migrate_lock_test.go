package migrations_test

import (
	"context"
	"io/fs"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// ownedSchema creates a test schema and a role without the CREATE
// privilege on the database that owns it, and returns the schema, a
// connection logged in as the role (a migrator that owns its schema and
// nothing else), and the config of an outbox in that schema.
func ownedSchema(t *testing.T) (*testdb.DB, *pgx.Conn, migrations.Config) {
	t.Helper()
	db := testdb.New(t)
	role := db.NewRole(t, "pgotest_migrator")
	mustExec(t, db.Conn(t), "ALTER SCHEMA "+pgx.Identifier{db.Schema}.Sanitize()+" OWNER TO "+pgx.Identifier{role}.Sanitize())
	conn := db.RoleConn(t, role)
	var create bool
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT has_database_privilege(current_database(), 'CREATE')").Scan(&create))
	require.False(t, create, "the migrator must lack CREATE on the database for this test")
	return db, conn, migrations.Config{Table: db.Table()}
}

// A migrator that owns its schema but may not create schemas in the
// database migrates, and migrates again finding nothing to do: Migrate
// creates the schema only when it is missing.
func TestMigrateAsSchemaOwnerWithoutDatabaseCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn, cfg := ownedSchema(t)

	require.NoError(t, migrations.Migrate(ctx, conn, cfg), "first run")
	require.NoError(t, migrations.Migrate(ctx, conn, cfg), "no-op re-run")
	require.NoError(t, migrations.Verify(ctx, conn, cfg))

	in := inbox.Config{Table: outbox.Table{Schema: db.Schema}}
	require.NoError(t, inbox.Migrate(ctx, conn, in), "the inbox shares the migration steps")
	require.NoError(t, inbox.Migrate(ctx, conn, in))
}

// The files Render returns run as a migrator that owns its schema but
// may not create schemas, once and (the first file) again.
func TestRenderedSQLAsSchemaOwnerWithoutDatabaseCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn, cfg := ownedSchema(t)
	files, err := migrations.Render(cfg)
	require.NoError(t, err)
	ups, err := fs.Glob(files, "*.up.sql")
	require.NoError(t, err)
	sort.Strings(ups)
	for _, name := range ups {
		text, err := fs.ReadFile(files, name)
		require.NoError(t, err)
		mustExec(t, conn, string(text))
	}
	require.NoError(t, migrations.Verify(ctx, conn, cfg))

	first, err := fs.ReadFile(files, ups[0])
	require.NoError(t, err)
	_, err = conn.Exec(ctx, string(first))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42P07", pgErr.Code, "re-running it stops at the existing table (duplicate_table), past the schema")
}

// holdLock takes the session advisory lock key on a connection of its
// own named by application_name, as an idle pooled server connection that
// once ran Migrate keeps it, and returns that connection.
func holdLock(t *testing.T, db *testdb.DB, key string) *pgx.Conn {
	t.Helper()
	cfg := db.DirectConnConfig(t)
	cfg.RuntimeParams["application_name"] = "pgotest-lock-holder"
	holder, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	_, err = holder.Exec(context.Background(), "SELECT pg_advisory_lock("+key+")")
	require.NoError(t, err)
	return holder
}

// While another session holds one of Migrate's advisory locks, Migrate
// waits at most LockTimeout and returns an error naming that session's
// backend; it changes nothing and holds no lock after. Once the holder
// is gone, Migrate succeeds.
func TestMigrateNamesTheHolderOfItsLock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lock string
		key  func(outbox.Table) string
	}{
		{"pgoutbox", func(table outbox.Table) string {
			return "hashtextextended('pgoutbox.migrate:" + table.String() + "', 0)"
		}},
		// tern's, which every tern migration of the database takes: held
		// only for a moment, since other tests migrate meanwhile.
		{"tern", func(outbox.Table) string { return "9628173550095224" }},
	}
	for _, tt := range tests {
		t.Run(tt.lock, func(t *testing.T) {
			t.Parallel()
			ctx := testctx.New(t)
			db := testdb.New(t)
			conn := db.Conn(t)
			cfg := migrations.Config{Table: db.Table(), LockTimeout: 300 * time.Millisecond}
			holder := holdLock(t, db, tt.key(db.Table()))

			err := migrations.Migrate(ctx, conn, cfg)
			require.NoError(t, holder.Close(ctx))

			var lockErr *migrations.LockError
			require.ErrorAs(t, err, &lockErr)
			require.Equal(t, tt.lock, lockErr.Lock)
			require.Equal(t, holder.PgConn().PID(), uint32(lockErr.PID))
			require.Equal(t, "pgotest-lock-holder", lockErr.ApplicationName)
			require.Equal(t, "idle", lockErr.State)
			require.NotEmpty(t, lockErr.ClientAddr)
			require.Equal(t, 300*time.Millisecond, lockErr.Waited)
			require.ErrorContains(t, err, "pg_terminate_backend(")
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "55P03", pgErr.Code)

			require.Empty(t, tablesIn(t, conn, db.Schema), "nothing was migrated")
			var held int
			require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").Scan(&held))
			require.Zero(t, held, "Migrate let go of the lock it had taken")
			cfg.LockTimeout = 0 // other tests may hold tern's lock for seconds
			require.NoError(t, migrations.Migrate(ctx, conn, cfg))
		})
	}
}

// A migrator without pg_read_all_stats still learns the holder's pid,
// application_name and user; PostgreSQL hides its client address and
// state from other roles, and the error leaves them empty.
func TestMigrateNamesTheHolderToAnUnprivilegedMigrator(t *testing.T) {
	t.Parallel()
	db, conn, cfg := ownedSchema(t)
	cfg.LockTimeout = 300 * time.Millisecond
	holder := holdLock(t, db, "hashtextextended('pgoutbox.migrate:"+cfg.Table.String()+"', 0)")

	err := migrations.Migrate(context.Background(), conn, cfg)
	var lockErr *migrations.LockError
	require.ErrorAs(t, err, &lockErr)
	require.Equal(t, holder.PgConn().PID(), uint32(lockErr.PID))
	require.Equal(t, "pgotest-lock-holder", lockErr.ApplicationName)
	require.Equal(t, holder.Config().User, lockErr.User)
	require.Empty(t, lockErr.ClientAddr)
	require.Empty(t, lockErr.State)
}

// A LockTimeout below 0 or above PostgreSQL's largest lock_timeout is a
// ConfigError from Migrate and Verify alike, before anything is read or
// written (the largest one itself is accepted).
func TestMigrateRejectsALockTimeoutOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	for _, d := range []time.Duration{-time.Second, migrations.MaxLockTimeout + time.Millisecond, 30 * 24 * time.Hour} {
		cfg := migrations.Config{Table: db.Table(), LockTimeout: d}
		for name, err := range map[string]error{"migrate": migrations.Migrate(ctx, conn, cfg), "verify": migrations.Verify(ctx, conn, cfg)} {
			var cfgErr *outbox.ConfigError
			require.ErrorAs(t, err, &cfgErr, "%s %s", name, d)
			require.Equal(t, "LockTimeout", cfgErr.Field)
			require.Equal(t, 1, strings.Count(err.Error(), "pgoutbox:"), err.Error())
		}
		require.Empty(t, tablesIn(t, conn, db.Schema))
	}
	cfg := migrations.Config{Table: db.Table(), LockTimeout: migrations.MaxLockTimeout}
	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
}

// When Verify's read of the table queues behind an ALTER TABLE that is
// itself queued (behind a transaction that read the table), the
// VerifyLockError names the queued ALTER and says it is queued, rather
// than that the lock was released.
func TestVerifyLockErrorBehindAQueuedExclusiveLock(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db := testdb.NewMigrated(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table(), LockTimeout: 500 * time.Millisecond}
	open := func() *pgx.Conn {
		c, err := pgx.ConnectConfig(ctx, db.DirectConnConfig(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	reader, alter := open(), open()
	tx, err := reader.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT count(*) FROM "+quoted(db.Table()))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := alter.Exec(ctx, "ALTER TABLE "+quoted(db.Table())+" ADD COLUMN review_zz integer")
		done <- err
	}()
	testctx.Await(t, "the ALTER TABLE queued", func() bool {
		select {
		case err := <-done:
			t.Fatalf("lock ended: %v", err)
		default:
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = $1", int32(alter.PgConn().PID())).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	err = migrations.Verify(ctx, conn, cfg)
	var lockErr *migrations.VerifyLockError
	require.ErrorAs(t, err, &lockErr)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done)
	require.Equal(t, alter.PgConn().PID(), uint32(lockErr.PID), "the error names the queued ALTER: %v", err)
	require.True(t, lockErr.Queued)
	require.Equal(t, "AccessExclusiveLock", lockErr.Mode)
	require.ErrorContains(t, err, "is queued for AccessExclusiveLock")
	require.Equal(t, 1, strings.Count(err.Error(), "pgoutbox:"), err.Error())
}

// Verify on a connection inside the caller's transaction reads in a
// savepoint: the transaction stays open and usable, keeps what it wrote,
// and keeps its lock_timeout, after a success and after a lock timeout.
func TestVerifyInsideACallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db := testdb.NewMigrated(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table(), LockTimeout: 300 * time.Millisecond}
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "CREATE TABLE "+quoted(outbox.Table{Schema: db.Schema, Name: "callers_own"})+" (x int)")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET LOCAL lock_timeout = '7s'")
	require.NoError(t, err)
	require.NoError(t, migrations.Verify(ctx, conn, cfg))

	holder, err := pgx.ConnectConfig(ctx, db.DirectConnConfig(t))
	require.NoError(t, err)
	defer func() { _ = holder.Close(context.Background()) }()
	htx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = htx.Exec(ctx, "LOCK TABLE "+quoted(db.Table())+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	var lockErr *migrations.VerifyLockError
	require.ErrorAs(t, migrations.Verify(ctx, conn, cfg), &lockErr)
	require.False(t, lockErr.Queued)
	require.NoError(t, htx.Rollback(ctx))

	var timeout string
	require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&timeout), "the caller's transaction is usable")
	require.Equal(t, "7s", timeout)
	require.NoError(t, tx.Commit(ctx))
	require.Contains(t, tablesIn(t, conn, db.Schema), "callers_own", "the caller's transaction committed its work")
}

// While another session holds an ACCESS EXCLUSIVE lock on the outbox
// table, its dead letters or its SENT history in an open transaction,
// Verify waits at most LockTimeout and returns a *VerifyLockError naming
// that session (it had waited for as long as the lock was held); once
// the lock is gone it verifies.
func TestVerifyIsBoundedByLockTimeout(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"", "_dead", "_sent"} {
		t.Run("table"+suffix, func(t *testing.T) {
			t.Parallel()
			testVerifyIsBoundedByLockTimeout(t, suffix)
		})
	}
}

func testVerifyIsBoundedByLockTimeout(t *testing.T, suffix string) {
	ctx := testctx.New(t)
	db := testdb.NewMigrated(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table(), LockTimeout: 300 * time.Millisecond}
	holderCfg := db.DirectConnConfig(t)
	holderCfg.RuntimeParams["application_name"] = "pgotest-lock-holder"
	holder, err := pgx.ConnectConfig(ctx, holderCfg)
	require.NoError(t, err)
	defer func() { _ = holder.Close(context.Background()) }()
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	locked := outbox.Table{Schema: db.Schema, Name: db.Table().Name + suffix}
	_, err = tx.Exec(ctx, "LOCK TABLE "+quoted(locked)+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	err = migrations.Verify(ctx, conn, cfg)
	var lockErr *migrations.VerifyLockError
	require.ErrorAs(t, err, &lockErr)
	require.Equal(t, holder.PgConn().PID(), uint32(lockErr.PID))
	require.Equal(t, "AccessExclusiveLock", lockErr.Mode)
	require.Equal(t, "pgotest-lock-holder", lockErr.ApplicationName)
	require.Equal(t, "idle in transaction", lockErr.State)
	require.Equal(t, 300*time.Millisecond, lockErr.Waited)
	require.ErrorContains(t, err, "pgoutbox: verify ")
	require.Equal(t, 1, strings.Count(err.Error(), "pgoutbox:"), err.Error())
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code)
	require.NotErrorIs(t, err, outbox.ErrSchemaMismatch, "nothing was compared")

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
	cfg.LockTimeout = -time.Second
	var cfgErr *outbox.ConfigError
	require.ErrorAs(t, migrations.Verify(ctx, conn, cfg), &cfgErr)
	require.Equal(t, "LockTimeout", cfgErr.Field)
}
