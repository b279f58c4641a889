package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// EnvURL names the environment variable holding the test database URL.
const EnvURL = "PGOUTBOX_TEST_DATABASE_URL"

// LocalURL is tried when EnvURL is unset.
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// schemaPrefix starts every schema this package creates.
const schemaPrefix = "pgotest_"

var (
	urlOnce   sync.Once
	urlValue  string
	urlErr    error
	sweepOnce sync.Once
)

// URL returns the connection string of the test database, or fails tb with
// instructions when there is none.
func URL(tb testing.TB) string {
	tb.Helper()
	urlOnce.Do(func() { urlValue, urlErr = findURL() })
	if urlErr != nil {
		tb.Fatalf("no PostgreSQL for tests: %v\n"+
			"Set %s to a database URL (the user must be able to create schemas), "+
			"start PostgreSQL on 127.0.0.1:5432 with trust auth for user postgres, "+
			"or run `make test` with Docker running: it starts PostgreSQL with testcontainers.", urlErr, EnvURL)
	}
	return urlValue
}

func findURL() (string, error) {
	if u := os.Getenv(EnvURL); u != "" {
		return u, nil
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:5432", 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("%s is unset and nothing answers on 127.0.0.1:5432", EnvURL)
	}
	_ = c.Close()
	return LocalURL, nil
}

// DB is one test's schema and a pool whose search_path is that schema.
type DB struct {
	// Pool's connections have search_path set to Schema, so unqualified
	// business tables a test creates land in its own schema.
	Pool *pgxpool.Pool
	// Schema is the test's own schema, dropped when the test ends.
	Schema string
	// URL is the database URL the schema lives in.
	URL string
}

// New creates a fresh schema and a pool bound to it. Both are removed when
// the test ends.
func New(tb testing.TB) *DB {
	tb.Helper()
	url := URL(tb)
	schema := newSchemaName()
	quoted := pgx.Identifier{schema}.Sanitize()
	withConn(tb, url, func(ctx context.Context, admin *pgx.Conn) {
		sweepOnce.Do(func() { sweepOld(ctx, admin) })
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
			tb.Fatalf("testdb: create schema: %v", err)
		}
	})
	tb.Cleanup(func() {
		withConn(tb, url, func(ctx context.Context, admin *pgx.Conn) {
			if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE"); err != nil {
				tb.Errorf("testdb: drop schema %s: %v", schema, err)
			}
		})
	})
	db := &DB{Schema: schema, URL: url}
	db.Pool = db.NewPool(tb, 8)
	return db
}

// withConn runs f on a short-lived connection, so that a test holds no
// connection of its own beyond its pools (PostgreSQL allows 100 in all).
func withConn(tb testing.TB, url string, f func(context.Context, *pgx.Conn)) {
	tb.Helper()
	ctx := context.Background()
	conn := connect(tb, url)
	defer func() { _ = conn.Close(ctx) }()
	f(ctx, conn)
}

// MigrateOption changes the migrations.Config NewMigrated migrates with.
type MigrateOption func(*migrations.Config)

// KeyOrder migrates with migrations.Config.KeyOrder: the outbox table
// keeps its per-key order index, which dispatchers with Ordering PerKey
// and admin's blocked-key views need.
func KeyOrder(c *migrations.Config) { c.KeyOrder = true }

// NewMigrated is New with the outbox table migrated into the schema
// (with opts applied to the migrations.Config; without KeyOrder the
// table has no order index), less the SENT history's time partitions
// Migrate creates: the tests start from a history with its default
// partition only and create the partitions they need (a dispatcher's
// Start creates those ahead).
func NewMigrated(tb testing.TB, opts ...MigrateOption) *DB {
	tb.Helper()
	db := New(tb)
	cfg := migrations.Config{Table: db.Table()}
	for _, o := range opts {
		o(&cfg)
	}
	withConn(tb, db.URL, func(ctx context.Context, conn *pgx.Conn) {
		if err := migrations.Migrate(ctx, conn, cfg); err != nil {
			tb.Fatalf("testdb: migrate: %v", err)
		}
		drop := pgx.Identifier{db.Schema, outbox.DefaultTable + sqlname.SuffixSentDrop}.Sanitize()
		if _, err := conn.Exec(ctx, `SELECT `+drop+`('infinity')`); err != nil {
			tb.Fatalf("testdb: drop the history's partitions: %v", err)
		}
	})
	return db
}

// Table is the test's outbox table: outbox_events in the test's schema.
func (db *DB) Table() outbox.Table {
	return outbox.Table{Schema: db.Schema, Name: outbox.DefaultTable}
}

// NewPool opens another pool on the test's schema with at most maxConns
// connections, closed when the test ends.
func (db *DB) NewPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("testdb: parse url: %v", err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("testdb: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Conn opens a dedicated connection on the test's schema, closed when the
// test ends.
func (db *DB) Conn(tb testing.TB) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), db.DirectConnConfig(tb))
	if err != nil {
		tb.Fatalf("testdb: connect: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func connect(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		tb.Fatalf("testdb: connect to %s: %v", EnvURL, err)
	}
	return conn
}

// newSchemaName returns pgotest_<unix seconds>_<random hex>: unique, and
// dated so that sweepOld can tell leftovers of crashed runs.
func newSchemaName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%d_%s", schemaPrefix, time.Now().Unix(), hex.EncodeToString(b[:]))
}

// sweepOld drops test schemas older than an hour: leftovers of runs that
// were killed before their cleanup ran.
func sweepOld(ctx context.Context, conn *pgx.Conn) {
	cutoff := time.Now().Add(-time.Hour).Unix()
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace
		WHERE nspname LIKE 'pgotest\_%' AND split_part(nspname, '_', 2)::bigint < $1`, cutoff)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE")
	}
}
