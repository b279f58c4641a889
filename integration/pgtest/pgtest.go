// Package pgtest gives the integration module's tests a real PostgreSQL.
//
// Call [Main] from each test package's TestMain. It picks the database once
// per test binary: PGOUTBOX_TEST_DATABASE_URL when set; else the PostgreSQL
// answering on 127.0.0.1:5432; else, when a Docker engine answers, a
// PostgreSQL container started with testcontainers-go and terminated when
// the tests end. When none of these exists the binary fails with a message
// saying how to provide a database; it never skips.
//
// Each test then takes its own schema with [New] or [NewMigrated], which
// are the core module's internal/testdb helpers: tests run in parallel
// without seeing each other's rows, and the schema is dropped at the end.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/tools/pgenv"
)

// DB is one test's schema and a pool bound to it.
type DB = testdb.DB

// containerStartTimeout bounds pulling and starting the PostgreSQL image.
const containerStartTimeout = 5 * time.Minute

// Runner runs a package's tests and returns the exit code: a *testing.M,
// or a wrapper that stops what the tests shared (a browser) once they
// have run, so that the leak check after it does not count it.
type Runner interface{ Run() int }

// Main finds the test database, runs the tests, checks that they leaked no
// goroutine, releases the database and exits. Use it as the whole TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m Runner) {
	os.Exit(run(m))
}

func run(m Runner) int {
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	url, stop, err := pgenv.Ensure(ctx, pgenv.DefaultProbes(), logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer func() {
		if err := stop(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: terminate container: %v\n", err)
		}
	}()
	// internal/testdb reads the variable on first use.
	if err := os.Setenv(testdb.EnvURL, url); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: pgtest: %v\n", err)
		return 1
	}
	// Goroutines started before the tests (testcontainers' own) are not
	// the tests' leaks.
	ignore := goleak.IgnoreCurrent()
	code := m.Run()
	if code == 0 {
		// toxiproxy's proxy (TestChaosNetwork) leaves a link's toxic
		// goroutine blocked on its send when the connection closes under
		// it: the proxy's, not pgoutbox's.
		toxiproxy := goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run")
		if err := goleak.Find(ignore, toxiproxy); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: pgtest: goroutines leaked: %v\n", err)
			return 1
		}
	}
	return code
}

// URL returns the test database URL chosen by [Main].
func URL(tb testing.TB) string {
	tb.Helper()
	return testdb.URL(tb)
}

// New creates a fresh schema for the test and a pool whose search_path is
// that schema; both are removed when the test ends.
func New(tb testing.TB) *DB {
	tb.Helper()
	return testdb.New(tb)
}

// NewMigrated is [New] with the outbox table migrated into the schema,
// with opts (testdb.KeyOrder: the per-key order index) applied.
func NewMigrated(tb testing.TB, opts ...testdb.MigrateOption) *DB {
	tb.Helper()
	return testdb.NewMigrated(tb, opts...)
}
