package migrations_test

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// exampleDB gives an example what an application has: a pool, and the
// outbox table it means to use, not yet migrated. Here that table lives
// in a schema of its own, dropped by done.
func exampleDB() (pool *pgxpool.Pool, table outbox.Table, done func()) {
	t := &testdb.ExampleTB{}
	db := testdb.New(t)
	return db.Pool, db.Table(), t.Done
}
