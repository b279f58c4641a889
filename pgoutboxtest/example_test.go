package pgoutboxtest_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/pgoutboxtest"
)

// orders is the code under test: it records an order and emits
// order.placed in the same transaction.
type orders struct{ emitter *emitter.Emitter }

func (o orders) place(ctx context.Context, tx pgx.Tx, id string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
		return err
	}
	e, err := outbox.NewJSON("order.placed", map[string]string{"order_id": id})
	if err != nil {
		return err
	}
	e.AggregateType, e.AggregateID = "order", id
	_, err = o.emitter.Emit(ctx, tx, e)
	return err
}

// A test of orders.place. In a real test t is the test's *testing.T, and
// the pool and table come from the test's own database set-up.
func Example() {
	ctx := context.Background()
	t, pool, table := exampleSetup()
	defer t.Done()
	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		panic(err)
	}

	// The event is visible in the transaction before it commits.
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := (orders{emitter: em}).place(ctx, tx, "42"); err != nil {
		panic(err)
	}
	e := pgoutboxtest.RequireEmitted(ctx, t, tx, table, pgoutboxtest.Want{
		Type: "order.placed", AggregateID: "42", PayloadJSON: map[string]string{"order_id": "42"},
	})
	fmt.Println(e.Type, e.AggregateID, e.ContentType)
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	// Deliver it with the service's own handler, until nothing is left.
	res := pgoutboxtest.DispatchUntilIdle(ctx, t, pool, dispatcher.Config{Table: table}, map[string]outbox.Handler{
		"order.placed": func(ctx context.Context, e outbox.Event) error { return nil },
	})
	fmt.Println("sent:", res.Counts.Sent)
	pgoutboxtest.RequireEmitted(ctx, t, pool, table, pgoutboxtest.Want{Type: "order.placed", Status: outbox.StatusSent})

	// Output:
	// order.placed 42 application/json
	// sent: 1
}
