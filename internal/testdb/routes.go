package testdb

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ExecModes are pgx's five query exec modes, each with the name
// default_query_exec_mode gives it in a connection string.
var ExecModes = []struct {
	Name string
	Mode pgx.QueryExecMode
}{
	{"cache_statement", pgx.QueryExecModeCacheStatement},
	{"cache_describe", pgx.QueryExecModeCacheDescribe},
	{"describe_exec", pgx.QueryExecModeDescribeExec},
	{"exec", pgx.QueryExecModeExec},
	{"simple_protocol", pgx.QueryExecModeSimpleProtocol},
}

// Route is one way a test reaches PostgreSQL: a query exec mode, on a
// direct connection or through PgBouncer in transaction mode.
type Route struct {
	// ModeName is the mode as a connection string names it.
	ModeName string
	// Mode is the query exec mode every connection of the route uses.
	Mode pgx.QueryExecMode
	// Bouncer is the PgBouncer the route goes through; nil for a direct
	// connection.
	Bouncer *Bouncer
}

// String names the route: "direct/exec", "pgbouncer/cache_describe".
func (r Route) String() string {
	if r.Bouncer != nil {
		return "pgbouncer/" + r.ModeName
	}
	return "direct/" + r.ModeName
}

// ForEachRoute runs f in a parallel subtest for each exec mode on a
// direct connection, then for each through PgBouncer in transaction mode
// (one PgBouncer, started on loopback for t and stopped after its
// subtests). The PgBouncer subtests skip, saying why, only when the
// pgbouncer binary is not installed, or for a mode that cannot work
// through a transaction-mode pooler: describe_exec (pgx says so), and
// cache_statement before PgBouncer 1.21.
func ForEachRoute(t *testing.T, f func(t *testing.T, r Route)) {
	t.Helper()
	for _, m := range ExecModes {
		r := Route{ModeName: m.Name, Mode: m.Mode}
		t.Run(r.String(), func(t *testing.T) {
			t.Parallel()
			f(t, r)
		})
	}
	b, missing := StartBouncer(t)
	for _, m := range ExecModes {
		r := Route{ModeName: m.Name, Mode: m.Mode, Bouncer: b}
		t.Run("pgbouncer/"+m.Name, func(t *testing.T) {
			switch {
			case b == nil:
				t.Skip(missing)
			case m.Mode == pgx.QueryExecModeCacheStatement && !b.Prepared:
				t.Skipf("PgBouncer %s keeps no prepared statements in transaction mode "+
					"(1.21 added max_prepared_statements); cache_statement cannot work through it", b.Version)
			case m.Mode == pgx.QueryExecModeDescribeExec:
				t.Skip("describe_exec binds, in a second round trip, the unnamed statement it parsed in the first; " +
					"a transaction-mode pooler may switch server connections in between (26000), as pgx documents")
			}
			t.Parallel()
			f(t, r)
		})
	}
}

// RouteURL returns the connection string of the test database on route
// r: the database URL (or PgBouncer's) with default_query_exec_mode set.
// It sets no search_path: PgBouncer refuses it as a startup parameter.
func (db *DB) RouteURL(tb testing.TB, r Route) string {
	tb.Helper()
	base := db.URL
	if r.Bouncer != nil {
		base = r.Bouncer.URL
	}
	return withParam(base, "default_query_exec_mode", r.ModeName)
}

// RoutePool opens a pool of at most maxConns connections on route r,
// closed when the test ends. Directly its search_path is the test's
// schema, like NewPool; through PgBouncer it has none (no startup
// parameter can set it there), so SQL run on it must qualify its tables.
func (db *DB) RoutePool(tb testing.TB, r Route, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(db.RouteURL(tb, r))
	if err != nil {
		tb.Fatalf("testdb: parse route url: %v", err)
	}
	cfg.MaxConns = maxConns
	if r.Bouncer == nil {
		cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("testdb: pool on %s: %v", r, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// DirectConnConfig returns the config of a direct connection to the test
// database (search_path set to the test's schema): what a LISTEN
// connection or a migration needs behind a pooler.
func (db *DB) DirectConnConfig(tb testing.TB) *pgx.ConnConfig {
	tb.Helper()
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("testdb: parse url: %v", err)
	}
	cfg.RuntimeParams["search_path"] = db.Schema
	return cfg
}

// withParam sets one parameter of a connection string, URL or
// keyword/value.
func withParam(conn, key, value string) string {
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return strings.TrimSpace(conn) + " " + key + "=" + value
}
