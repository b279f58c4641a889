package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewRole creates a login role named <prefix>_<random hex> with no
// privileges beyond PUBLIC's, and returns its name. When the test ends the
// objects it owns and its grants are dropped, then the role; open pools
// and connections of the role after NewRole, so that they close first.
// Connecting as it needs trust (or matching) authentication for local
// connections, as the test database has.
func (db *DB) NewRole(tb testing.TB, prefix string) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := prefix + "_" + hex.EncodeToString(b[:])
	quoted := pgx.Identifier{role}.Sanitize()
	withConn(tb, db.URL, func(ctx context.Context, admin *pgx.Conn) {
		if _, err := admin.Exec(ctx, "CREATE ROLE "+quoted+" LOGIN"); err != nil {
			tb.Fatalf("testdb: create role (needs CREATEROLE): %v", err)
		}
	})
	tb.Cleanup(func() {
		withConn(tb, db.URL, func(ctx context.Context, admin *pgx.Conn) {
			if _, err := admin.Exec(ctx, "DROP OWNED BY "+quoted+"; DROP ROLE "+quoted); err != nil {
				tb.Errorf("testdb: drop role %s: %v", role, err)
			}
		})
	})
	return role
}

// RoleConnConfig is DirectConnConfig logging in as role.
func (db *DB) RoleConnConfig(tb testing.TB, role string) *pgx.ConnConfig {
	tb.Helper()
	cfg := db.DirectConnConfig(tb)
	cfg.User = role
	cfg.Password = ""
	return cfg
}

// RoleConn opens a direct connection on the test's schema logged in as
// role, closed when the test ends.
func (db *DB) RoleConn(tb testing.TB, role string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), db.RoleConnConfig(tb, role))
	if err != nil {
		tb.Fatalf("testdb: connect as %s: %v", role, err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// RolePool opens a pool of at most maxConns connections on the test's
// schema logged in as role, closed when the test ends.
func (db *DB) RolePool(tb testing.TB, role string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("testdb: parse url: %v", err)
	}
	cfg.ConnConfig = db.RoleConnConfig(tb, role)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("testdb: pool as %s: %v", role, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}
