package pgwatermill_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// localDatabase is the database the tests use when
// PGOUTBOX_TEST_DATABASE_URL is unset.
const localDatabase = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// quietLogger logs WARN and above: the dispatchers' INFO lines (every
// Nack is a failed attempt) would drown the test output.
var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

var (
	// databaseURL is the database every test uses, chosen in TestMain.
	databaseURL string
	// skipReason is set when no database answers outside CI: every test
	// that needs one skips, saying why.
	skipReason string
	// sharedPool is the pool of the whole run, made in TestMain.
	sharedPool *pgxpool.Pool
)

func TestMain(m *testing.M) {
	databaseURL = cmp.Or(os.Getenv("PGOUTBOX_TEST_DATABASE_URL"), localDatabase)
	pool, err := connect(databaseURL)
	switch {
	case err != nil && os.Getenv("CI") == "true":
		fmt.Fprintln(os.Stderr, "pgwatermill tests: CI=true and PostgreSQL does not answer:", err)
		os.Exit(1)
	case err != nil:
		skipReason = fmt.Sprintf("PostgreSQL at %s does not answer (%v); set PGOUTBOX_TEST_DATABASE_URL", redact(databaseURL), err)
		fmt.Fprintln(os.Stderr, "pgwatermill tests:", skipReason)
	default:
		sharedPool = pool
	}
	code := m.Run()
	if sharedPool != nil {
		sharedPool.Close()
	}
	os.Exit(code)
}

// connect opens the run's pool and checks that the database answers.
func connect(url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 30
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// redact drops the password of url, if any, for messages.
func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// runContext returns a context that ends with the test, or a little
// before the run's go test -timeout, with a cause that says so: no fixed
// cap, which a loaded machine could reach. The root module's
// internal/testctx does the same; a published module imports no internal
// package of the core.
func runContext(tb testing.TB) context.Context {
	tb.Helper()
	ctx := tb.Context()
	t, ok := tb.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return ctx
	}
	deadline, ok := t.Deadline()
	if !ok {
		return ctx
	}
	grace := min(time.Minute, time.Until(deadline)/10)
	ctx, cancel := context.WithDeadlineCause(ctx, deadline.Add(-grace),
		fmt.Errorf("the go test -timeout of this run ends at %s", deadline.Format(time.TimeOnly)))
	tb.Cleanup(cancel)
	return ctx
}

var schemaSeq atomic.Int64

// testDB is a test's database: the run's pool and an outbox table in a
// schema of its own.
type testDB struct {
	Pool  *pgxpool.Pool
	Table outbox.Table
}

// newDB migrates an outbox into a fresh schema for tb (with the per-key
// order index when keyOrder) and drops the schema at cleanup. It skips tb
// when no database answers outside CI.
func newDB(tb testing.TB, keyOrder bool) testDB {
	tb.Helper()
	if sharedPool == nil {
		tb.Skip(skipReason)
	}
	ctx := runContext(tb)
	schema := fmt.Sprintf("pgwatermill_%d_%d", os.Getpid(), schemaSeq.Add(1))
	table := exampleTable(schema)
	require.NoError(tb, migrateTable(ctx, table, keyOrder))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, err := sharedPool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(tb, err)
	})
	return testDB{Pool: sharedPool, Table: table}
}

// exampleTable is the outbox table of a test's schema.
func exampleTable(schema string) outbox.Table {
	return outbox.Table{Schema: schema, Name: "outbox_events"}
}

// migrateTable migrates an outbox into table's schema.
func migrateTable(ctx context.Context, table outbox.Table, keyOrder bool) error {
	conn, err := sharedPool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return migrations.Migrate(ctx, conn.Conn(), migrations.Config{Table: table, KeyOrder: keyOrder})
}

// row is what the tests read of an event: its status, attempts and
// snoozes, in whichever table holds it.
type row struct {
	Status   string
	Attempts int
	Snoozes  int
}

// rows returns the events of db by ID.
func rows(tb testing.TB, db testDB) map[uuid.UUID]row {
	tb.Helper()
	var parts []string
	for _, name := range []string{db.Table.Name, db.Table.Name + "_sent", db.Table.Name + "_dead"} {
		parts = append(parts, "SELECT id, status, attempts, snoozes FROM "+pgx.Identifier{db.Table.Schema, name}.Sanitize())
	}
	got, err := pgx.CollectRows(mustQuery(tb, db, strings.Join(parts, " UNION ALL ")), func(r pgx.CollectableRow) (struct {
		ID uuid.UUID
		R  row
	}, error) {
		var v struct {
			ID uuid.UUID
			R  row
		}
		err := r.Scan(&v.ID, &v.R.Status, &v.R.Attempts, &v.R.Snoozes)
		return v, err
	})
	require.NoError(tb, err)
	out := make(map[uuid.UUID]row, len(got))
	for _, v := range got {
		out[v.ID] = v.R
	}
	return out
}

func mustQuery(tb testing.TB, db testDB, q string) pgx.Rows {
	tb.Helper()
	r, err := db.Pool.Query(runContext(tb), q)
	require.NoError(tb, err)
	return r
}

// emitterConfig is the emitter configuration of db's publishers.
func emitterConfig(db testDB) emitter.Config {
	return emitter.Config{Table: db.Table}
}
