package inbox_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// exampleDB gives an example what a consumer has: a pool on its database,
// with an invoices table, and the schema its inbox table goes in. Here
// that is a schema of its own, dropped by done.
func exampleDB() (pool *pgxpool.Pool, schema string, done func()) {
	t := &testdb.ExampleTB{}
	db := testdb.New(t)
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE invoices (order_id text NOT NULL)`); err != nil {
		t.Done()
		panic(err)
	}
	return db.Pool, db.Schema, t.Done
}
