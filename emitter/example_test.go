package emitter_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Emit an event in the transaction that writes the business row: commit
// persists both, rollback neither.
func ExampleEmitter_Emit() {
	ctx := context.Background()
	pool, table, done := exampleDB() // the application's pool and outbox table
	defer done()

	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		panic(err)
	}

	type order struct {
		ID         string `json:"id"`
		TotalCents int64  `json:"total_cents"`
	}
	o := order{ID: "o-1", TotalCents: 4200}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total_cents) VALUES ($1, $2)`, o.ID, o.TotalCents); err != nil {
		panic(err)
	}
	e, err := outbox.NewJSON("order.created", o)
	if err != nil {
		panic(err)
	}
	e.AggregateType, e.AggregateID = "order", o.ID
	if _, err := em.Emit(ctx, tx, e); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'PENDING'`).Scan(&pending); err != nil {
		panic(err)
	}
	fmt.Println("pending events:", pending)
	// Output:
	// pending events: 1
}

// Emit a batch: one call writes all its events with one statement, and
// returns their IDs in the order of the events.
func ExampleEmitter_Emit_batch() {
	ctx := context.Background()
	pool, table, done := exampleDB()
	defer done()
	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		panic(err)
	}

	var events []outbox.Event
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		e, err := outbox.NewJSON("order.shipped", map[string]string{"order_id": id})
		if err != nil {
			panic(err)
		}
		e.AggregateType, e.AggregateID = "order", id
		events = append(events, e)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ids, err := em.Emit(ctx, tx, events...)
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	fmt.Println(len(ids), "events, IDs are", ids[0].Version())
	// Output:
	// 3 events, IDs are VERSION_7
}

// An invalid event is refused before anything is written, with an error
// naming the event and the field; the transaction stays usable.
func ExampleEmitter_Emit_invalid() {
	ctx := context.Background()
	pool, table, done := exampleDB()
	defer done()
	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		panic(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = em.Emit(ctx, tx, outbox.Event{Type: "order.created", Payload: []byte(`{}`)}, outbox.Event{Payload: []byte(`{}`)})
	var invalid *outbox.ValidationError
	if errors.As(err, &invalid) {
		fmt.Println("event", invalid.Index, "field", invalid.Field, "is invalid")
	}
	fmt.Println(errors.Is(err, outbox.ErrInvalidEvent))
	// Output:
	// event 1 field Type is invalid
	// true
}

// The zero Config is usable; a field out of range is refused with an error
// naming it.
func ExampleNew() {
	_, err := emitter.New(emitter.Config{MaxPayloadBytes: 128 << 20})
	var bad *outbox.ConfigError
	if errors.As(err, &bad) {
		fmt.Println(bad.Field)
	}
	// Output:
	// MaxPayloadBytes
}
