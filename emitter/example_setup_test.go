package emitter_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// exampleDB gives an example what an application has: a pool and a
// migrated outbox table, here in a schema of its own with an orders table,
// dropped by done.
func exampleDB() (pool *pgxpool.Pool, table outbox.Table, done func()) {
	t := &testdb.ExampleTB{}
	db := testdb.NewMigrated(t)
	if _, err := db.Pool.Exec(context.Background(),
		`CREATE TABLE orders (id text PRIMARY KEY, total_cents bigint NOT NULL)`); err != nil {
		t.Done()
		panic(err)
	}
	return db.Pool, db.Table(), t.Done
}
