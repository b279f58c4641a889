package dispatcher_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// exampleDB gives an example what an application has: a pool and a
// migrated outbox table, here in a schema of its own dropped by done.
func exampleDB() (pool *pgxpool.Pool, table outbox.Table, done func()) {
	t := &testdb.ExampleTB{}
	db := testdb.NewMigrated(t)
	return db.Pool, db.Table(), t.Done
}

// exampleEmit commits an order.created event for each order ID, as the
// emitting service would.
func exampleEmit(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, orderIDs ...string) {
	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		panic(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, id := range orderIDs {
		e, err := outbox.NewJSON("order.created", exampleOrder{ID: id})
		if err != nil {
			panic(err)
		}
		e.AggregateType, e.AggregateID = "order", id
		if _, err := em.Emit(ctx, tx, e); err != nil {
			panic(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
}

// exampleEmitTypes commits one event of each type, with an empty JSON
// object as its payload.
func exampleEmitTypes(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, types ...string) {
	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		panic(err)
	}
	events := make([]outbox.Event, len(types))
	for i, t := range types {
		events[i] = outbox.Event{Type: t, ContentType: outbox.ContentTypeJSON, Payload: []byte(`{}`)}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := em.Emit(ctx, tx, events...); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
}

// exampleOrder is the payload of the examples' order.created events.
type exampleOrder struct {
	ID string `json:"id"`
}
